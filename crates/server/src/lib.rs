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
//! - [`auth`]: bearer tokens and roles.
//! - [`clock`]: the injected [`Clock`] (system or fake).
//! - [`state`]: [`AppState`], shared by every handler.
//! - [`store`]: the [`Store`] trait, the embedded store, the Redis store and their conformance
//!   suite.
//! - [`sse`]: the event hub (ring buffer for `Last-Event-ID`, wake-ups for long polls).
//! - [`embed`]: the [`Embedder`] trait, the engine behind it and the request batcher.
//! - [`metrics`]: counters, histogram and worker snapshots as Prometheus text.
//! - `routes/`: one file per route family (`jobs`, `dlq`, `events`, `cache`, `locks`, `embed`,
//!   `metrics`); `routes/mod.rs` assembles the router and its layers (auth, CORS, body limit).
//! - `json`: the JSON extractor whose rejections become protocol errors.

use std::future::Future;

use tokio::net::TcpListener;

pub mod auth;
pub mod clock;
pub mod config;
pub mod embed;
pub mod error;
mod json;
pub mod metrics;
mod routes;
pub mod sse;
pub mod state;
pub mod store;

pub use auth::{Role, Tokens};
pub use clock::{Clock, FakeClock, SystemClock};
pub use config::Config;
pub use embed::{Embedder, EngineEmbedder, HashEmbedder};
pub use error::{Error, Result};
pub use state::AppState;
pub use store::embedded::{EmbeddedStore, Fsync};
pub use store::redis::RedisStore;
pub use store::Store;

/// The router over `state`: every route with its auth, CORS and body-limit layers.
pub fn app(state: AppState) -> axum::Router {
    routes::router(state)
}

/// Serves `state` on `listener` until `shutdown` resolves, then stops taking requests, ends SSE
/// streams and long polls, lets in-flight requests finish, and hands every lease this process
/// gave out back to the queue.
///
/// # Errors
/// I/O errors from the listener.
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let st = state.clone();
    axum::serve(listener, app(state.clone()))
        .with_graceful_shutdown(async move {
            shutdown.await;
            tracing::info!("shutting down");
            st.begin_shutdown();
        })
        .await?;
    state.release_leases().await;
    Ok(())
}
