//! Compact vector encoding: little-endian f32, base64 in JSON.
