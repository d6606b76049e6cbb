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
//! - [`ports`]: the traits adapters implement (`JobSource`, `LocalCache`, `RemoteCache`, `Locks`,
//!   `Embedder`, `Clock`, `Wakeups`).
//! - [`server_client`]: those ports over the server's HTTP protocol, for any [`server_client::Transport`]
//!   (the adapters only move bytes: `fetch` in the browser, `wasi:http` in the WASI worker).
//!   `batch_answers`: the batch requests (`/v1/jobs/ack`, `/heartbeat`, `/nack`) and their
//!   per-item answers, the same for every transport.
//! - [`pipeline`]: one text through local cache → remote cache → lock → engine or backend →
//!   write-through, and the queue loop's host.
//! - [`cache`] (`cache/`): the cache side of the data path — [`cache::mem_local`], the in-memory
//!   local cache (where there is no IndexedDB, and in front of it where there is).
//! - [`queue`] (`queue/`): the queue side — [`queue::claim_loop`] (the claim loop with bounded
//!   concurrency and graceful drain), [`queue::job`] (one claimed job: heartbeats, retries, ack
//!   or nack), [`queue::batch_queue`] (acks and nacks sent together), `lease_board` (leases kept
//!   alive by one batched heartbeat), [`queue::lease_journal`] (what changed in them, for the
//!   page), [`queue::signal`] (the stop signal), [`queue::pause`] (no claims while paused).
//! - [`cpu_budget`]: the share of wall time the engine may compute (measured busy time, waits
//!   between batches).
//! - [`retry`], [`breaker`], [`ratelimit`]: backoff with jitter, circuit breaker, token bucket;
//!   [`rng`]: the seeded random source for jitter and tokens.
//! - [`metrics`], [`trace`]: the metrics registry and W3C trace context.
//! - [`messages`]: the typed page ⇄ worker messages; [`http_handler`]: the embedding handler's
//!   HTTP contract (edge `fetch` and WASI `wasi:http` answer through it).
//! - [`config`]: the worker's settings; [`error`]: the crate's one error enum; [`error_code`]:
//!   every `code` ternflow reports (server, worker, npm package), one closed set.
//! - [`memory`]: in-memory ports and a fake clock for tests (feature `testing`).

mod batch_answers;
pub mod breaker;
pub mod cache;
pub mod codec;
pub mod config;
pub mod cpu_budget;
pub mod error;
pub mod error_code;
pub mod http_handler;
pub mod keys;
#[cfg(any(test, feature = "testing"))]
pub mod memory;
pub mod messages;
pub mod metrics;
pub mod pipeline;
pub mod ports;
pub mod protocol;
pub mod queue;
pub mod ratelimit;
pub mod retry;
pub mod rng;
pub mod server_client;
pub mod trace;

pub use config::Config;
pub use error::{Error, Result};
pub use error_code::ErrorCode;
pub use pipeline::{Adapters, Pipeline, Ports, Resolution, ResolveOptions, Resolved};
