//! `ternflow-wasi`: the ternflow worker as a WASI 0.2 component (`wasm32-wasip2`), on
//! `ternflow-core` unchanged. Two shapes from one crate:
//!
//! - `ternflow-wasi-worker` (`wasmtime run -S http …`): the claim loop against `ternflow serve`
//!   over `wasi:http` outgoing requests, with bounded concurrency (claims ask only for free
//!   slots), leases with heartbeats, retries with backoff, batched acks, hand-back on stop and
//!   metrics to `POST /v1/metrics`;
//! - `ternflow-wasi-handler` (`wasmtime serve …`): an incoming `wasi:http` handler with the edge
//!   `fetch` handler's contract.
//!
//! Async I/O runs on [wstd]'s executor over `wasi:io/poll`: every wait (a request, a timer,
//! standard input) is a pollable, and when nothing is ready the instance blocks in `poll` inside
//! the host. `docs/wasi.md` says why WASI 0.2 and what WASI 0.3 would change.
//!
//! # Layout
//! - [`settings`]: environment variables and worker flags (portable).
//! - [`engine`]: the engine inside as an `Embedder`, or an empty slot in a backend-only build
//!   (`--no-default-features`) (portable).
//! - WASI only: `http` (the server's protocol over `wasi:http`: queue, remote cache, locks,
//!   backend, metrics, model download), `clock` (`wasi:clocks`), `app` (the pipeline over these
//!   adapters, with core's `MemLocal` as the local cache; model loading; memory figures),
//!   `worker` (the long-running loop and its stop controller), `handler` (the HTTP handler).
//! - `src/bin/worker.rs`, `src/bin/handler.rs`: the two components' entry points.
//!
//! [wstd]: https://docs.rs/wstd

pub mod engine;
pub mod settings;

#[cfg(all(target_arch = "wasm32", target_os = "wasi"))]
pub mod app;
#[cfg(all(target_arch = "wasm32", target_os = "wasi"))]
pub mod clock;
#[cfg(all(target_arch = "wasm32", target_os = "wasi"))]
pub mod handler;
#[cfg(all(target_arch = "wasm32", target_os = "wasi"))]
pub mod http;
#[cfg(all(target_arch = "wasm32", target_os = "wasi"))]
pub mod worker;
