//! The Web Worker entry: typed page ⇄ worker messages ([`ToWorker`] / [`FromWorker`]) over the
//! pipeline built from the browser adapters ([`crate::browser`]). The worker's state lives in
//! [`crate::state`], the queue run in [`crate::queue_run`], replies to the page in
//! [`crate::page`], page-minted tokens in [`crate::page_token`].
//!
//! `www/worker.js` only forwards: `onmessage = e => handle(e.data).then(r => postMessage(r))`.
//! Metric snapshots are pushed to the page (`postMessage`) and to the server (`POST /v1/metrics`)
//! every few seconds while the queue loop runs.

use std::rc::Rc;

use ternflow_core::messages::{Embedding, FromWorker, ToWorker};
use ternflow_core::ports::Clock;
use ternflow_core::trace::TraceParent;
use ternflow_core::ResolveOptions;
use wasm_bindgen::prelude::*;

pub use crate::browser::Browser;
use crate::cancel;
use crate::clock::BrowserClock;
use crate::error::WorkerError;
use crate::model_fetch::{load_model_from, FetchOptions};
use crate::page::{error_to_js, items_to_js, post_progress, to_js};
use crate::page_token::apply_token;
use crate::queue_run::{start, stop, update_gauges};
use crate::settings::parse_config;
pub use crate::state::{browser_pipeline, browser_pipeline_bounded};
use crate::state::{pipeline, DEFAULT_DB, DEFAULT_MAX_LOCAL, STATE};

/// Handles one message from the page and resolves to the reply (a [`FromWorker`] object; `null`
/// for a cancel). Error replies carry `retryable`, and a download's its `url`.
#[wasm_bindgen]
pub async fn handle(data: JsValue) -> JsValue {
    let msg = match serde_wasm_bindgen::from_value::<ToWorker>(data) {
        Ok(msg) => msg,
        Err(e) => return error_to_js(0, &WorkerError::BadMessage(e.to_string())),
    };
    let Some(id) = msg.id() else {
        match msg {
            ToWorker::Cancel { target } => {
                cancel::cancel(target);
            }
            ToWorker::Pause { paused } => crate::queue_run::pause(paused),
            ToWorker::Session { session } => crate::queue_run::set_session(Some(session)),
            _ => {}
        }
        return JsValue::NULL;
    };
    if let ToWorker::Embed {
        texts,
        progress,
        settle: true,
        info,
        max_tokens,
        traceparent,
        ..
    } = &msg
    {
        let ask = match ask(*max_tokens, *info, traceparent.as_deref()) {
            Ok(ask) => ask,
            Err(e) => return error_to_js(id, &e),
        };
        return match embed_texts(id, texts, *progress, true, ask).await {
            Ok(items) => items_to_js(id, items.iter().map(Result::as_ref)),
            Err(e) => error_to_js(id, &e),
        };
    }
    match dispatch(msg).await {
        Ok(r) => to_js(&r),
        Err(e) => error_to_js(id, &e),
    }
}

/// What an `embed` message asks besides its texts: `maxTokens` at least 1, and a `traceparent`
/// that parses as W3C's (a page that passes one wants its trace continued, not a new one).
fn ask(
    max_tokens: Option<u32>,
    info: bool,
    traceparent: Option<&str>,
) -> Result<ResolveOptions, WorkerError> {
    if max_tokens == Some(0) {
        return Err(WorkerError::BadMessage(
            "maxTokens must be at least 1".into(),
        ));
    }
    let trace = match traceparent {
        None => None,
        Some(t) => Some(TraceParent::parse(t).ok_or_else(|| {
            WorkerError::BadMessage(format!(
                "traceparent {:?} is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, \
                 lowercase, not all zeros)",
                t.chars().take(64).collect::<String>()
            ))
        })?),
    };
    Ok(ResolveOptions {
        max_tokens,
        info,
        trace,
    })
}

/// Embeds `texts` in order through the pipeline (request `id`, cancellable between texts).
/// With `settle`, a text that fails is an `Err` item and the rest go on; without, the first
/// failure fails the whole request. A cancellation always fails the whole request.
async fn embed_texts(
    id: u32,
    texts: &[String],
    progress: bool,
    settle: bool,
    ask: ResolveOptions,
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
        let batch = p
            .resolve_many_with(part, None, ask.clone(), |_, _| {
                finished += 1;
                if progress {
                    post_progress(id, "embed", finished, Some(total as u64));
                }
            })
            .await;
        // What each vector covers, counted by the engine once for the chunk (a cached vector's
        // text is counted again, not remembered).
        let counted = batch.info;
        for (i, r) in batch.results.into_iter().enumerate() {
            match r {
                Ok(r) => items.push(Ok(Embedding {
                    vector: r.vector,
                    source: r.source,
                    info: counted.as_ref().and_then(|c| c.get(i).copied()),
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

/// Gives the worker the function that starts its engine worker (`www/worker.js` passes one
/// that runs `engine-worker.js`): models loaded from then on run there, unless `init`'s config
/// says `engineWorker: false`.
#[wasm_bindgen(js_name = setEngineWorkerFactory)]
pub fn set_engine_worker_factory(factory: js_sys::Function) {
    STATE.with(|s| s.borrow_mut().factory = Some(factory));
}

async fn dispatch(msg: ToWorker) -> Result<FromWorker, WorkerError> {
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
        ToWorker::LoadModel {
            id,
            url,
            sha256,
            progress,
        } => {
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
        ToWorker::LoadModelBytes { id, bytes } => {
            let engine = STATE.with(|s| s.borrow().engine.clone());
            let model_id = engine.install(&bytes).await?;
            Ok(FromWorker::Ready {
                id,
                model_id: Some(model_id),
            })
        }
        ToWorker::Embed {
            id,
            texts,
            progress,
            settle: _,
            info,
            max_tokens,
            traceparent,
        } => {
            let ask = ask(max_tokens, info, traceparent.as_deref())?;
            let embeddings = embed_texts(id, &texts, progress, false, ask)
                .await?
                .into_iter()
                .collect::<Result<Vec<_>, _>>()?;
            Ok(FromWorker::Embedded { id, embeddings })
        }
        ToWorker::Start {
            id,
            concurrency,
            cpu_share,
            session,
        } => {
            if session.is_some() {
                crate::queue_run::set_session(session);
            }
            start(concurrency, cpu_share).await?;
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
        ToWorker::Cancel { .. } | ToWorker::Pause { .. } | ToWorker::Session { .. } => Err(
            WorkerError::BadMessage("a cancel, pause or session has no reply".into()),
        ),
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
