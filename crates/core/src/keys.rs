//! Job ids and cache keys.
