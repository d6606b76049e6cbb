//! `ternflow-wasi`: the ternflow worker as a WASI component (`wasm32-wasip2`), on
//! `ternflow-core` unchanged, for WASI 0.2 (feature `p2`, the default) or WASI 0.3 (feature `p3`).
//! Two shapes from one crate:
//!
//! - `ternflow-wasi-worker` (`wasmtime run -S http …`): the claim loop against `ternflow serve`
//!   over `wasi:http` outgoing requests, with bounded concurrency (claims ask only for free
//!   slots), leases with heartbeats, retries with backoff, batched acks, hand-back on stop and
//!   metrics to `POST /v1/metrics`;
//! - `ternflow-wasi-handler` (`wasmtime serve …`): an incoming `wasi:http` handler with the edge
//!   `fetch` handler's contract.
//!
//! WASI 0.2: async I/O runs on [wstd]'s executor over `wasi:io/poll`: every wait (a request, a
//! timer, standard input) is a pollable, and when nothing is ready the instance blocks in `poll`
//! inside the host. WASI 0.3: the imports are async functions of the component model (`wasi:http`
//! `client.send`, `monotonic-clock.wait-for`, streams for bodies and stdin) and the exports are
//! async too (`wasi:cli/run`, `wasi:http/handler`): wit-bindgen's executor runs the tasks, the
//! host drives them, and one handler instance serves several requests at once. Only the I/O
//! adapter differs between the two builds (`http/p2.rs` or `http/p3.rs`, the `p2`/`p3` lines of
//! `clock`, `app` and `worker`, and the entry points); `docs/wasi.md` compares them.
//!
//! # Layout
//! - [`settings`]: environment variables and worker flags (portable).
//! - [`engine`]: the engine inside as an `Embedder`, or an empty slot in a backend-only build
//!   (`--no-default-features`) (portable).
//! - WASI only: `http` (the server's protocol over `wasi:http`: queue, remote cache, locks,
//!   backend, metrics, model download; its `p2` and `p3` submodules send one request each on WASI 0.2 or 0.3), `clock` (`wasi:clocks`), `app` (the pipeline over these
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

#[cfg(all(target_os = "wasi", feature = "p2", feature = "p3"))]
compile_error!("ternflow-wasi: features p2 and p3 are exclusive (the p3 build: --no-default-features --features engine,p3)");
#[cfg(all(target_os = "wasi", not(feature = "p2"), not(feature = "p3")))]
compile_error!("ternflow-wasi: pick the I/O adapter, feature p2 (WASI 0.2) or p3 (WASI 0.3)");
#[cfg(all(target_arch = "wasm32", target_os = "wasi"))]
pub mod worker;
