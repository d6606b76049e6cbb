//! `ternflow-server`: ternflow's companion server — a job queue with leases, Server-Sent Events,
//! a fenced remote cache, single-flight locks, backend inference and metrics, over a pluggable
//! store (embedded by default, Redis to scale out).
//!
//! A binary parses its arguments, builds an [`AppState`] and calls [`run`]; tests call [`app`]
//! and drive the router with `tower::ServiceExt::oneshot`, or bind `127.0.0.1:0` and use [`run`].
//! The protocol is described in `docs/protocol.md` and served as `GET /openapi.json`; its types
//! live in [`ternflow_core::protocol`].
//!
//! # Layout
//! - [`config`]: limits and queue policy ([`Config`]), backoff and TTL jitter.
//! - [`error`]: the crate's one error enum, mapped to status codes and the error body.
//! - [`identity`]: who is calling ([`Identity`]: tenant, [`Role`], `sub`, limits) and the exact
//!   rules a token's claims meet; a leaf, it knows no store.
//! - [`auth`]: static bearer tokens (digests, constant-time lookup) and the route gate that
//!   turns a token into an [`Identity`].
//! - [`jwt`]: short-lived signed tokens (role, tenant, expiry), verification and minting.
//! - [`tenants`]: a store, event hub and usage per tenant, opened on demand and closed when
//!   idle (a bounded LRU), and `Ctx`, the only way a handler reaches a store (its caller's).
//! - [`quota`]: per-tenant quotas (queue, workers, embed budget).
//! - [`workers`]: a tenant's worker table (snapshots pushed by its workers, bounded).
//! - `limits`: per-token request rate, SSE streams, long polls, claims and embed budgets.
//! - `lock_holds`: the single-flight locks each token holds on this server, capped in number and
//!   in how long it holds one key.
//! - `deliveries`: the job deliveries this server traces (a span per delivery, the worker's
//!   reported steps under it), while spans are exported.
//! - `sessions`: browser workers' sessions, so a page going away hands back the claims it cannot
//!   know of yet and its worker's later claims are refused.
//! - `granted_locks`: the locks this server granted and that were not released, of every
//!   tenant (held and leaked figures, what an operator lists and breaks).
//! - `serve`: [`run`], the accept loop (header timeout, connection bound, shutdown deadline).
//! - [`clock`]: the injected [`Clock`] (system or fake).
//! - [`state`]: [`AppState`], shared by every handler; it holds no tenant's data.
//! - [`store`]: the store traits ([`QueueStore`], [`CacheStore`], [`LockStore`], [`EventBus`],
//!   `ResultScan`, `IntegrityStore`, `BudgetStore`, `UsageStore`; a [`Store`] is all eight), the
//!   SQLite store (default), the in-memory store, the Redis store, their conformance suite and
//!   the timing wrapper every tenant's store is served through.
//! - [`sse`]: the event hub (ring buffer for `Last-Event-ID`, `reset` on a gap, wake-ups for
//!   long polls).
//! - [`embed`]: the [`Embedder`] trait, the engine behind it and the request batcher.
//! - [`metrics`]: counters, histograms (embed latency, claim → ack job latency), acks by result
//!   source and worker snapshots (with the runtime their `User-Agent` names), and the labelled
//!   families alerts are written on (store latency, lock contention, reasons), as Prometheus text.
//! - [`series`]: the dashboard's history, a ring of stats samples, and its alerts.
//! - [`search`]: semantic search over finished jobs (the query embedded by the server's engine).
//! - `cache`, `queue`: the cache and queue rules the routes share (routes never import each
//!   other).
//! - `routes/`: one file per route family (`jobs`, `dlq`, `events`, `cache`, `locks`, `embed`,
//!   `metrics`, `model`, `dashboard`, `health`, `quarantine`); `routes/mod.rs` assembles the
//!   router and its layers (auth, CORS, body limit).
//! - [`integrity`]: result verification: shape checks, provenance, probation and sampled
//!   recomputation, quarantine and undo.
//! - `extract`: the JSON, path and query extractors whose rejections are protocol errors.
//! - [`test_client`] (feature `testing`): core's `ServerClient` over reqwest, a typed client of a
//!   running server for tests.

pub mod auth;
mod cache;
pub mod clock;
pub mod config;
mod deliveries;
pub mod embed;
pub mod error;
mod extract;
mod granted_locks;
pub mod identity;
pub mod integrity;
pub mod jwt;
mod limits;
mod lock_holds;
pub mod metrics;
mod queue;
pub mod quota;
mod routes;
pub mod search;
pub mod series;
mod serve;
mod sessions;
pub mod sse;
pub mod state;
pub mod store;
pub mod tenants;
#[cfg(feature = "testing")]
pub mod test_client;
pub mod workers;

pub use auth::Tokens;
pub use clock::{Clock, FakeClock, SystemClock};
pub use config::Config;
pub use embed::{Embedder, EngineEmbedder, HashEmbedder};
pub use error::{Error, Result};
pub use identity::{Identity, Role};
pub use serve::{ignore_file_size_signal, run};
pub use state::AppState;
pub use store::memory::MemoryStore;
pub use store::redis::{is_redis_url, Durability, RedisStore, CLUSTER_SCHEME};
pub use store::sqlite::lock_data_dir;
pub use store::sqlite::{SqliteStore, Synchronous};
pub use store::{CacheStore, EventBus, LockStore, QueueStore, ResultScan, Store};

/// The router over `state`: every route with its auth, CORS and body-limit layers.
pub fn app(state: AppState) -> axum::Router {
    routes::router(state)
}
