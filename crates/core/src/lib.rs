//! `ternflow-core`: the portable heart of ternflow.
//!
//! Everything here compiles for native targets and for `wasm32-unknown-unknown` without web-sys or
//! tokio, so the pipeline logic is tested natively with in-memory stores and a fake clock, and the
//! browser, edge and server adapters only implement small traits.
//!
//! # Layout
//! - [`protocol`]: the HTTP protocol's request and response types (serde), shared by server and worker.
//! - [`codec`]: compact vector encoding (little-endian f32, base64 in JSON).
//! - [`keys`]: job ids and cache keys (model id + text hash).

pub mod codec;
pub mod keys;
pub mod protocol;
