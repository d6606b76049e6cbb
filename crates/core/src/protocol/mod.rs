//! The HTTP protocol types shared by the server and the worker.
//!
//! Every body is JSON. Times are Unix milliseconds (`u64`). Vectors are [`Vector`]s: base64 of
//! little-endian `f32` bytes (see [`crate::codec`]). Optional fields may be omitted on input and
//! are omitted on output when empty. `docs/protocol.md` walks through the routes; this module is
//! the source of truth for the shapes.
//!
//! # Layout
//! - [`enqueue`]: what a producer submits and what it gets back.
//! - [`claim`]: claims, leases, heartbeats, release.
//! - [`ack`]: results (single and batched) and their provenance.
//! - [`nack`]: failures (single and batched), attempts, the dead-letter queue.
//! - [`status`]: a job's state.
//! - [`cache`]: remote cache entries and the locks that fence their writes.
//! - [`embed`]: the backend inference endpoint.
//! - [`error_body`]: the error body of every non-2xx response.
//! - [`events`]: the server-sent events.
//! - [`stats`]: worker metrics and the server's stats.
//! - `tests`: the shapes, checked on JSON.

pub mod ack;
pub mod cache;
pub mod claim;
pub mod embed;
pub mod enqueue;
pub mod error_body;
pub mod events;
pub mod nack;
pub mod stats;
pub mod status;
#[cfg(test)]
mod tests;

pub use crate::codec::Vector;
pub use ack::*;
pub use cache::*;
pub use claim::*;
pub use embed::*;
pub use enqueue::*;
pub use error_body::*;
pub use events::*;
pub use nack::*;
pub use stats::*;
pub use status::*;
