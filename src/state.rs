//! The Web Worker's state: the engine, the current pipeline, the running queue loop and the
//! settings `init` gave. One per worker (a `thread_local`); the message entry ([`crate::worker`]),
//! the queue run ([`crate::queue_run`]) and the token source ([`crate::page_token`]) share it.

use std::cell::RefCell;
use std::rc::Rc;

use futures_channel::oneshot;
use ternflow_core::messages::{RunSummary, ServerOptions};
use ternflow_core::{Config, Pipeline};

use crate::browser::Browser;
use crate::engine_port::LocalEngine;
use crate::error::WorkerError;
use crate::settings::AdapterConfig;
use crate::sse::SseWakeups;

/// IndexedDB database name when `init` gives none.
pub(crate) const DEFAULT_DB: &str = "ternflow";
/// Most IndexedDB entries when `init` gives no bound.
pub(crate) const DEFAULT_MAX_LOCAL: u32 = 50_000;

/// A queue loop in progress: its summary when it ends, and its SSE wake-ups.
pub(crate) struct Running {
    pub(crate) done: oneshot::Receiver<RunSummary>,
    pub(crate) wake: Rc<SseWakeups>,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) engine: LocalEngine,
    pub(crate) pipeline: Option<Rc<Pipeline<Browser>>>,
    pub(crate) running: Option<Running>,
    /// IndexedDB name and bound given at `init`, reused when the pipeline is rebuilt.
    pub(crate) db: Option<(String, u32)>,
    /// The adapter's own settings from `init`'s `config`.
    pub(crate) adapter: AdapterConfig,
    /// What starts an engine worker (given by `www/worker.js`).
    pub(crate) factory: Option<js_sys::Function>,
}

thread_local! {
    pub(crate) static STATE: RefCell<State> = RefCell::new(State::default());
}

/// The current pipeline.
///
/// # Errors
/// Before `init`.
pub(crate) fn pipeline() -> Result<Rc<Pipeline<Browser>>, WorkerError> {
    STATE
        .with(|s| s.borrow().pipeline.clone())
        .ok_or_else(|| WorkerError::BadMessage("send `init` first".into()))
}

/// The IndexedDB name and bound in use.
pub(crate) fn db_settings() -> (String, u32) {
    STATE
        .with(|s| s.borrow().db.clone())
        .unwrap_or_else(|| (DEFAULT_DB.to_owned(), DEFAULT_MAX_LOCAL))
}

/// Builds a pipeline over the browser adapters with this worker's adapter settings (the memory
/// cache bound) and, for a renewable token, the page as its token source.
///
/// # Errors
/// When IndexedDB exists but cannot be opened.
pub async fn browser_pipeline(
    server: Option<&ServerOptions>,
    engine: LocalEngine,
    cfg: Config,
    db_name: &str,
    max_local_entries: u32,
) -> Result<Pipeline<Browser>, WorkerError> {
    let max_bytes = STATE.with(|s| s.borrow().adapter.memory_cache_bytes);
    browser_pipeline_bounded(server, engine, cfg, db_name, max_local_entries, max_bytes).await
}

/// [`browser_pipeline`] with the in-memory cache bounded to `max_bytes`.
///
/// # Errors
/// When IndexedDB exists but cannot be opened.
pub async fn browser_pipeline_bounded(
    server: Option<&ServerOptions>,
    engine: LocalEngine,
    cfg: Config,
    db_name: &str,
    max_local_entries: u32,
    max_bytes: usize,
) -> Result<Pipeline<Browser>, WorkerError> {
    let tokens = server
        .is_some_and(|s| s.renewable)
        .then(crate::page_token::page_token_source);
    crate::browser::pipeline(
        server,
        engine,
        cfg,
        db_name,
        max_local_entries,
        max_bytes,
        tokens,
    )
    .await
}
