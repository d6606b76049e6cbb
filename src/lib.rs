//! `ternflow`: text embeddings at the edge.
//!
//! This root crate is the browser / edge adapter. Compiled to `wasm32-unknown-unknown` it runs inside
//! a dedicated Web Worker (or an edge isolate) and carries embedding jobs from the queue to the
//! caches and the engine. Every piece of logic that does not need a browser lives in the portable
//! crates; this crate only implements their traits over browser APIs.
//!
//! # Layout
//! - [`ternflow_core`] (`crates/core`): protocol types, the per-job pipeline, retry, breaker, caches
//!   and the traits this crate implements. No web-sys.
//! - [`ternflow_engine`] (`crates/engine`): the Ternlight inference engine. No web deps.
//! - wasm32 only, one adapter per file: `idb` (IndexedDB local cache over rexie; `idb_keys`, the
//!   keys it may hold, kept in memory so a read of any other key skips IndexedDB), `local`
//!   (IndexedDB behind a hot core `MemLocal`, or a `MemLocal` alone where there is no IndexedDB: edge
//!   isolates, Node), `http` (the server's protocol over gloo-net: queue, remote cache, locks,
//!   backend embedder), `sse` (`EventSource` wake-ups and invalidations), `clock` (`Date.now`,
//!   `setTimeout`), `cancel` (timeouts and the page's `AbortSignal` for `fetch`), `engine_port`
//!   (the in-wasm engine as an embedder, and where it runs), `model_fetch` (model files from a
//!   URL: SHA-256 check, Cache API), `engine_worker`
//!   (the engine in a nested worker of its own, so embeds never block the pipeline's thread;
//!   `engine_entry` is that worker's side, `engineHandle`),
//!   `settings` (the page's `config`: pipeline settings plus the adapter's, unknown keys
//!   refused), `engine_api` (the engine's own JS class), `error` (the one error enum).
//! - The Web Worker (wasm32 only): `worker` (the message entry point: typed page messages in,
//!   replies out), `state` (the worker's engine, pipeline and settings), `queue_run` (the queue
//!   loop with SSE wake-ups and metrics pushes), `page` (replies and events as JS values,
//!   `postMessage`), `page_token` (tokens minted by the page).
//! - `edge` (wasm32 only): the edge handler's HTTP entry (`handleHttp`), core's handler contract.
//! - `browser` (wasm32 only): the adapters assembled — which type implements each port, and how a
//!   pipeline is built from them (the dispatch that uses it is `worker`).
//!
//! Nothing here touches `window`: every browser API is reached through the global scope, so the
//! same code runs in a dedicated worker, a shared worker or an edge isolate.

pub use ternflow_core as core;
pub use ternflow_engine as engine;

#[cfg(target_arch = "wasm32")]
pub mod browser;
#[cfg(target_arch = "wasm32")]
pub mod cancel;
#[cfg(target_arch = "wasm32")]
pub mod clock;
#[cfg(target_arch = "wasm32")]
pub mod edge;
#[cfg(target_arch = "wasm32")]
pub mod engine_entry;
#[cfg(target_arch = "wasm32")]
pub mod engine_port;
#[cfg(target_arch = "wasm32")]
pub mod engine_worker;
#[cfg(target_arch = "wasm32")]
pub mod error;
#[cfg(target_arch = "wasm32")]
pub mod http;
#[cfg(target_arch = "wasm32")]
pub mod idb;
mod idb_keys;
#[cfg(target_arch = "wasm32")]
pub mod local;
#[cfg(target_arch = "wasm32")]
pub mod model_fetch;
#[cfg(target_arch = "wasm32")]
mod page;
#[cfg(target_arch = "wasm32")]
mod page_token;
#[cfg(target_arch = "wasm32")]
mod queue_run;
#[cfg(target_arch = "wasm32")]
pub mod settings;
#[cfg(target_arch = "wasm32")]
pub mod sse;
#[cfg(target_arch = "wasm32")]
pub mod state;
#[cfg(target_arch = "wasm32")]
pub mod worker;

#[cfg(target_arch = "wasm32")]
pub mod engine_api;

/// The crate version, as built.
#[cfg_attr(target_arch = "wasm32", wasm_bindgen::prelude::wasm_bindgen)]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
