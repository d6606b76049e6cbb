//! The Web Worker entry: typed page ⇄ worker messages ([`ToWorker`] / [`FromWorker`]) over the
//! pipeline built from the browser adapters ([`crate::browser`]); the worker's state (engine,
//! pipeline, running queue loop, pending token requests) lives here.
//!
//! `www/worker.js` only forwards: `onmessage = e => handle(e.data).then(r => postMessage(r))`.
//! Metric snapshots are pushed to the page (`postMessage`) and to the server (`POST /v1/metrics`)
//! every `metrics_interval_ms` while the queue loop runs.

use std::cell::RefCell;
use std::rc::Rc;

use futures_channel::oneshot;
use serde::Serialize;
use ternflow_core::messages::{Embedding, FromWorker, RunSummary, ServerOptions, ToWorker};
use ternflow_core::ports::Clock;
use ternflow_core::{Config, Pipeline};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

pub use crate::browser::Browser;
use crate::cancel;
use crate::clock::BrowserClock;
use crate::engine_port::{load_model_from, EngineThread, FetchOptions, LocalEngine};
use crate::error::WorkerError;
use crate::settings::{parse_config, AdapterConfig};
use crate::sse::SseWakeups;

/// How often metrics are pushed while the queue loop runs.
const METRICS_INTERVAL_MS: u64 = 2_000;
const DEFAULT_DB: &str = "ternflow";
const DEFAULT_MAX_LOCAL: u32 = 50_000;

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
    let tokens = server.is_some_and(|s| s.renewable).then(page_token_source);
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

struct Running {
    done: oneshot::Receiver<RunSummary>,
    wake: Rc<SseWakeups>,
}

#[derive(Default)]
struct State {
    engine: LocalEngine,
    pipeline: Option<Rc<Pipeline<Browser>>>,
    running: Option<Running>,
    /// IndexedDB name and bound given at `init`, reused when the pipeline is rebuilt.
    db: Option<(String, u32)>,
    /// The adapter's own settings from `init`'s `config`.
    adapter: AdapterConfig,
    /// What starts an engine worker (given by `www/worker.js`).
    factory: Option<js_sys::Function>,
}

fn db_settings() -> (String, u32) {
    STATE
        .with(|s| s.borrow().db.clone())
        .unwrap_or_else(|| (DEFAULT_DB.to_owned(), DEFAULT_MAX_LOCAL))
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

fn pipeline() -> Result<Rc<Pipeline<Browser>>, WorkerError> {
    STATE
        .with(|s| s.borrow().pipeline.clone())
        .ok_or_else(|| WorkerError::BadMessage("send `init` first".into()))
}

/// How long a worker waits for the page to answer [`FromWorker::TokenNeeded`], ms.
const TOKEN_WAIT_MS: u64 = 10_000;

thread_local! {
    /// Who waits for the page's next token.
    static TOKEN_WAITERS: RefCell<Vec<oneshot::Sender<String>>> = const { RefCell::new(Vec::new()) };
}

/// A token source that asks the page (whose `server.token` is a function) and waits for its
/// [`ToWorker::Token`].
fn page_token_source() -> crate::http::TokenSource {
    Rc::new(|| {
        Box::pin(async {
            let (tx, rx) = oneshot::channel();
            let first = TOKEN_WAITERS.with(|w| {
                let mut w = w.borrow_mut();
                w.push(tx);
                w.len() == 1
            });
            if first {
                post_to_page(&FromWorker::TokenNeeded {});
            }
            let timer = BrowserClock.sleep(TOKEN_WAIT_MS);
            futures_util::pin_mut!(timer);
            match futures_util::future::select(rx, timer).await {
                futures_util::future::Either::Left((Ok(t), _)) => Some(t),
                _ => None,
            }
        })
    })
}

/// Applies a fresh token from the page: every clone of the current client uses it from the next
/// request (leases, in-flight jobs and the queue loop are untouched), and whoever waited for it
/// gets it.
fn apply_token(token: &str) {
    if let Some(p) = STATE.with(|s| s.borrow().pipeline.clone()) {
        p.adapters.source.set_token(token);
    }
    for w in TOKEN_WAITERS.with(|w| std::mem::take(&mut *w.borrow_mut())) {
        let _ = w.send(token.to_owned());
    }
}

fn post_to_page(msg: &FromWorker) {
    if let Ok(scope) = js_sys::global().dyn_into::<web_sys::DedicatedWorkerGlobalScope>() {
        if let Ok(v) = to_js(msg) {
            let _ = scope.post_message(&v);
        }
    }
}

fn to_js(msg: &FromWorker) -> Result<JsValue, serde_wasm_bindgen::Error> {
    if let FromWorker::Embedded { id, embeddings } = msg {
        return Ok(embedded_to_js(*id, embeddings));
    }
    msg.serialize(&serde_wasm_bindgen::Serializer::json_compatible())
}

/// `Embedded` with each vector as a `Float32Array`: `postMessage` then copies one buffer per
/// vector instead of cloning hundreds of numbers, and the page gets typed arrays directly.
fn embedded_to_js(id: u32, embeddings: &[Embedding]) -> JsValue {
    items_to_js(id, embeddings.iter().map(Ok))
}

/// `Embedded` with one item per text: `{vector, source}`, or `{error: {code, message,
/// retryable}}` for a text that failed (`embedMany(texts, {settle: true})`).
fn items_to_js<'a>(
    id: u32,
    items: impl ExactSizeIterator<Item = Result<&'a Embedding, &'a WorkerError>>,
) -> JsValue {
    let set = |o: &js_sys::Object, k: &str, v: &JsValue| {
        // Setting a property on a fresh plain object cannot fail.
        let _ = js_sys::Reflect::set(o, &JsValue::from_str(k), v);
    };
    let list = js_sys::Array::new_with_length(items.len() as u32);
    for (i, item) in items.enumerate() {
        let o = js_sys::Object::new();
        match item {
            Ok(e) => {
                set(
                    &o,
                    "vector",
                    &js_sys::Float32Array::from(e.vector.as_slice()).into(),
                );
                let source = serde_json::to_value(e.source)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                set(&o, "source", &JsValue::from_str(&source));
            }
            Err(e) => {
                let err = js_sys::Object::new();
                set(&err, "code", &JsValue::from_str(&e.code()));
                set(&err, "message", &JsValue::from_str(&e.to_string()));
                set(&err, "retryable", &JsValue::from_bool(e.is_retryable()));
                set(&o, "error", &err.into());
            }
        }
        list.set(i as u32, o.into());
    }
    let o = js_sys::Object::new();
    set(&o, "type", &JsValue::from_str("embedded"));
    set(&o, "id", &JsValue::from(id));
    set(&o, "embeddings", &list.into());
    o.into()
}

fn request_id(msg: &ToWorker) -> u32 {
    match msg {
        ToWorker::Init { id, .. }
        | ToWorker::LoadModel { id, .. }
        | ToWorker::Embed { id, .. }
        | ToWorker::Start { id, .. }
        | ToWorker::Stop { id, .. }
        | ToWorker::Stats { id }
        | ToWorker::Token { id, .. } => *id,
    }
}

/// Handles one message from the page and resolves to the reply (a `FromWorker` object).
///
/// Besides the [`ToWorker`] requests, the adapter answers `{type: "cancel", target}` (the page's
/// `AbortSignal` fired for request `target`), reads `progress: true` on `loadModel` / `embed`
/// (post `{type: "progress", id, phase, loaded, total}` events while it runs) and `settle: true`
/// on `embed` (one result or error per text). Error replies carry `retryable`, and a download's
/// its `url`.
#[wasm_bindgen]
pub async fn handle(data: JsValue) -> JsValue {
    let field = |k: &str| js_sys::Reflect::get(&data, &JsValue::from_str(k)).ok();
    if field("type").and_then(|t| t.as_string()).as_deref() == Some("cancel") {
        if let Some(target) = field("target").and_then(|t| t.as_f64()) {
            cancel::cancel(target as u32);
        }
        return JsValue::NULL;
    }
    let progress = field("progress").is_some_and(|p| p.is_truthy());
    let settle = field("settle").is_some_and(|p| p.is_truthy());
    let msg: Result<ToWorker, _> = serde_wasm_bindgen::from_value(data);
    if let (true, Ok(ToWorker::Embed { id, texts })) = (settle, &msg) {
        return match embed_texts(*id, texts, progress, true).await {
            Ok(items) => items_to_js(*id, items.iter().map(Result::as_ref)),
            Err(e) => error_to_js(*id, &e),
        };
    }
    match msg {
        Err(e) => error_to_js(0, &WorkerError::BadMessage(e.to_string())),
        Ok(msg) => {
            let id = request_id(&msg);
            match dispatch(msg, progress).await {
                Ok(r) => to_js(&r).unwrap_or(JsValue::NULL),
                Err(e) => error_to_js(id, &e),
            }
        }
    }
}

/// The `error` reply for request `id`, with `retryable` and (for a download) `url` beside the
/// code and message.
fn error_to_js(id: u32, e: &WorkerError) -> JsValue {
    let reply = FromWorker::Error {
        id,
        code: e.code(),
        message: e.to_string(),
    };
    let v = to_js(&reply).unwrap_or(JsValue::NULL);
    let _ = js_sys::Reflect::set(
        &v,
        &JsValue::from_str("retryable"),
        &JsValue::from_bool(e.is_retryable()),
    );
    if let Some(url) = e.url() {
        let _ = js_sys::Reflect::set(&v, &JsValue::from_str("url"), &JsValue::from_str(url));
    }
    v
}

/// Embeds `texts` in order through the pipeline (request `id`, cancellable between texts).
/// With `settle`, a text that fails is an `Err` item and the rest go on; without, the first
/// failure fails the whole request. A cancellation always fails the whole request.
async fn embed_texts(
    id: u32,
    texts: &[String],
    progress: bool,
    settle: bool,
) -> Result<Vec<Result<Embedding, WorkerError>>, WorkerError> {
    let p = pipeline()?;
    let cancel = cancel::register(id);
    let mut items = Vec::with_capacity(texts.len());
    let total = texts.len();
    // One batch through the pipeline per chunk (one IndexedDB read and one write transaction
    // each); the chunk bounds what one cancel or one failure wastes.
    for (c, part) in texts.chunks(EMBED_CHUNK).enumerate() {
        let done = c * EMBED_CHUNK;
        cancel.check(&format!("embed after {done} of {total} texts"))?;
        let mut finished = done as u64;
        let results = p
            .resolve_many(part, None, |_, _| {
                finished += 1;
                if progress {
                    post_progress(id, "embed", finished, Some(total as u64));
                }
            })
            .await;
        for r in results {
            match r {
                Ok(r) => items.push(Ok(Embedding {
                    vector: r.vector,
                    source: r.source,
                })),
                Err(e) if settle => items.push(Err(WorkerError::Core(e))),
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(items)
}

/// Texts of one `embed` request resolved as one batch.
const EMBED_CHUNK: usize = 256;

/// Posts a progress event for request `id` to the page (nothing where there is no page).
fn post_progress(id: u32, phase: &str, loaded: u64, total: Option<u64>) {
    let Ok(scope) = js_sys::global().dyn_into::<web_sys::DedicatedWorkerGlobalScope>() else {
        return;
    };
    let o = js_sys::Object::new();
    let set = |k: &str, v: JsValue| {
        let _ = js_sys::Reflect::set(&o, &JsValue::from_str(k), &v);
    };
    set("type", JsValue::from_str("progress"));
    set("id", JsValue::from(id));
    set("phase", JsValue::from_str(phase));
    set("loaded", JsValue::from(loaded as f64));
    set(
        "total",
        total.map_or(JsValue::NULL, |t| JsValue::from(t as f64)),
    );
    let _ = scope.post_message(&o);
}

/// Loads a model from bytes into the worker's engine (for pages that fetch it themselves);
/// resolves to its model id.
///
/// # Errors
/// When the bytes are not a valid TERN v1 model.
#[wasm_bindgen(js_name = loadModelBytes)]
pub async fn load_model_bytes(bytes: Vec<u8>) -> Result<String, JsError> {
    let engine = STATE.with(|s| s.borrow().engine.clone());
    engine
        .install(&bytes)
        .await
        .map_err(|e| JsError::new(&e.to_string()))
}

/// Gives the worker the function that starts its engine worker (`www/worker.js` passes one
/// that runs `engine-worker.js`): models loaded from then on run there, unless `init`'s config
/// says `engineWorker: false`.
#[wasm_bindgen(js_name = setEngineWorkerFactory)]
pub fn set_engine_worker_factory(factory: js_sys::Function) {
    STATE.with(|s| s.borrow_mut().factory = Some(factory));
}

async fn dispatch(msg: ToWorker, progress: bool) -> Result<FromWorker, WorkerError> {
    match msg {
        ToWorker::Init {
            id,
            server,
            config,
            db_name,
            max_local_entries,
        } => {
            if STATE.with(|s| s.borrow().running.is_some()) {
                // Replacing the pipeline under the running loop would orphan it (and `stop`
                // would then wait forever): the page stops first, then re-inits.
                return Err(WorkerError::BadMessage(
                    "the queue is running: stop it before changing the server or settings".into(),
                ));
            }
            let (cfg, adapter) = parse_config(config)?;
            let (engine, factory) =
                STATE.with(|s| (s.borrow().engine.clone(), s.borrow().factory.clone()));
            // Models loaded from now on run in the engine worker, unless the page said not to.
            engine.set_worker_factory(factory.filter(|_| adapter.engine_worker));
            let db = db_name.unwrap_or_else(|| DEFAULT_DB.to_owned());
            let max_local = max_local_entries.unwrap_or(DEFAULT_MAX_LOCAL);
            let p = browser_pipeline_bounded(
                server.as_ref(),
                engine.clone(),
                cfg,
                &db,
                max_local,
                adapter.memory_cache_bytes,
            )
            .await?;
            p.adapters.source.set_timeout_ms(adapter.request_timeout_ms);
            // A re-init (`start({server})`) keeps the worker's counters.
            if let Some(old) = STATE.with(|s| s.borrow().pipeline.clone()) {
                p.metrics.take_over(&old.metrics);
            }
            STATE.with(|s| {
                let mut s = s.borrow_mut();
                s.adapter = adapter;
                s.pipeline = Some(Rc::new(p));
                s.db = Some((db, max_local));
            });
            Ok(FromWorker::Ready {
                id,
                model_id: ternflow_core::ports::Embedder::model_id(&engine),
            })
        }
        ToWorker::LoadModel { id, url, sha256 } => {
            let cancel = cancel::register(id);
            let (engine, adapter) = STATE.with(|s| (s.borrow().engine.clone(), s.borrow().adapter));
            let on_progress = |loaded, total| {
                if progress {
                    post_progress(id, "model", loaded, total);
                }
            };
            let opts = FetchOptions {
                timeout_ms: adapter.model_timeout_ms,
                cancel: Some(&cancel),
                on_progress: &on_progress,
            };
            let model_id = load_model_from(&engine, &url, sha256.as_deref(), &opts).await?;
            Ok(FromWorker::Ready {
                id,
                model_id: Some(model_id),
            })
        }
        ToWorker::Embed { id, texts } => {
            let embeddings = embed_texts(id, &texts, progress, false)
                .await?
                .into_iter()
                .collect::<Result<Vec<_>, _>>()?;
            Ok(FromWorker::Embedded { id, embeddings })
        }
        ToWorker::Start { id, concurrency } => {
            start(concurrency).await?;
            Ok(FromWorker::Started { id })
        }
        ToWorker::Stop { id, deadline_ms } => {
            let summary = stop(deadline_ms.unwrap_or(10_000)).await?;
            Ok(FromWorker::Stopped { id, summary })
        }
        ToWorker::Token { id, token } => {
            apply_token(&token);
            Ok(FromWorker::TokenUpdated { id })
        }
        ToWorker::Stats { id } => {
            let p = pipeline()?;
            update_gauges(&p);
            Ok(FromWorker::Stats {
                id,
                metrics: p.metrics.snapshot(&p.cfg.worker_id, BrowserClock.now_ms()),
            })
        }
    }
}

async fn start(concurrency: Option<u32>) -> Result<(), WorkerError> {
    if STATE.with(|s| s.borrow().running.is_some()) {
        return Err(WorkerError::BadMessage("already started".into()));
    }
    let mut p = pipeline()?;
    if let Some(c) = concurrency {
        // A new concurrency needs a new pipeline (the loop reads it once).
        let cfg = Config {
            concurrency: c,
            ..p.cfg.clone()
        };
        p = rebuild(&p, cfg).await?;
    }
    let Some(base) = p.adapters.source.base() else {
        return Err(WorkerError::BadMessage("queue mode needs a server".into()));
    };
    let inval = Rc::downgrade(&p);
    let client = p.adapters.source.clone();
    let token: Rc<dyn Fn() -> String> = Rc::new(move || client.token());
    let resync = inval.clone();
    let wake = Rc::new(SseWakeups::open(
        &base,
        token,
        move |keys| {
            if let Some(p) = inval.upgrade() {
                wasm_bindgen_futures::spawn_local(async move { p.invalidate(&keys).await });
            }
        },
        move || {
            if let Some(p) = resync.upgrade() {
                wasm_bindgen_futures::spawn_local(async move { p.resync().await });
            }
        },
    ));
    let (tx, rx) = oneshot::channel();
    let (lp, lw) = (p.clone(), wake.clone());
    wasm_bindgen_futures::spawn_local(async move {
        let sum = lp.run_queue(&*lw).await;
        let _ = tx.send(sum);
    });
    let mp = p.clone();
    wasm_bindgen_futures::spawn_local(async move {
        while !mp.stop.is_stopped() {
            BrowserClock.sleep(METRICS_INTERVAL_MS).await;
            push_metrics(&mp).await;
        }
        push_metrics(&mp).await;
    });
    STATE.with(|s| {
        s.borrow_mut().running = Some(Running { done: rx, wake });
    });
    Ok(())
}

/// The breakers' gauges, where the model runs, and the wasm memory of both instances.
fn update_gauges(p: &Pipeline<Browser>) {
    use ternflow_core::metrics::gauges;
    p.update_breaker_gauges();
    let engine = &p.adapters.engine;
    let in_worker = engine.thread() == EngineThread::Worker;
    p.metrics
        .set_gauge(gauges::ENGINE_IN_WORKER, if in_worker { 1.0 } else { 0.0 });
    p.metrics.set_gauge(
        gauges::WASM_MEMORY_BYTES,
        crate::engine_api::wasm_memory_bytes(),
    );
    p.metrics.set_gauge(
        gauges::ENGINE_WORKER_MEMORY_BYTES,
        engine.worker_memory_bytes().unwrap_or(0.0),
    );
}

async fn push_metrics(p: &Pipeline<Browser>) {
    update_gauges(p);
    let snap = p.metrics.snapshot(&p.cfg.worker_id, BrowserClock.now_ms());
    post_to_page(&FromWorker::Metrics {
        metrics: snap.clone(),
    });
    let _ = p.adapters.source.push_metrics(&snap).await;
}

async fn stop(deadline_ms: u64) -> Result<RunSummary, WorkerError> {
    let p = pipeline()?;
    let running = STATE.with(|s| s.borrow_mut().running.take());
    let Some(running) = running else {
        return Ok(RunSummary::default());
    };
    p.stop.stop(BrowserClock.now_ms() + deadline_ms);
    let summary = running.done.await.unwrap_or_default();
    running.wake.close();
    // A stopped pipeline cannot be restarted: replace it with a fresh one (same settings).
    rebuild(&p, p.cfg.clone()).await?;
    Ok(summary)
}

/// A new pipeline on `p`'s server, engine and database with settings `cfg`, made current.
async fn rebuild(p: &Pipeline<Browser>, cfg: Config) -> Result<Rc<Pipeline<Browser>>, WorkerError> {
    let server = p.adapters.source.base().map(|url| ServerOptions {
        url,
        token: p.adapters.source.token(),
        renewable: p.adapters.source.is_renewable(),
    });
    let engine = STATE.with(|s| s.borrow().engine.clone());
    let (db, max_local) = db_settings();
    let fresh = Rc::new(browser_pipeline(server.as_ref(), engine, cfg, &db, max_local).await?);
    // The worker's metrics, not the pipeline's: counters keep counting across stop and start.
    fresh.metrics.take_over(&p.metrics);
    fresh
        .adapters
        .source
        .set_timeout_ms(STATE.with(|s| s.borrow().adapter.request_timeout_ms));
    STATE.with(|s| s.borrow_mut().pipeline = Some(fresh.clone()));
    Ok(fresh)
}
