//! The queue loop in a Web Worker: `start` runs the core loop with SSE wake-ups, pushes
//! metrics to the page and the server every [`METRICS_INTERVAL_MS`], and tells the page which
//! leases it holds (`leases` messages, at most one per [`LEASE_MIRROR_MS`]), so the page can
//! hand them back when it goes away; `stop` drains it by a deadline and leaves a fresh pipeline
//! (same settings) for the next start.

use std::rc::Rc;

use futures_channel::oneshot;
use ternflow_core::messages::{FromWorker, RunSummary, ServerOptions};
use ternflow_core::ports::Clock;
use ternflow_core::{Config, Pipeline};

use crate::browser::Browser;
use crate::clock::BrowserClock;
use crate::engine_port::EngineThread;
use crate::error::WorkerError;
use crate::sse::SseWakeups;
use crate::state::{browser_pipeline, db_settings, pipeline, Running, STATE};

/// How often metrics are pushed while the queue loop runs.
const METRICS_INTERVAL_MS: u64 = 2_000;

/// Lease changes are gathered this long before they are posted to the page: a claim of
/// hundreds of jobs, or a batch of acks, is one message.
const LEASE_MIRROR_MS: u64 = 50;

thread_local! {
    /// Whether the page paused the queue loop: kept here, so a pause holds across the
    /// pipelines that `stop()` and `start()` replace.
    static PAUSED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The page's session for the worker's claims: kept here, so it holds across the
    /// pipelines that `stop()` and `start()` replace.
    static SESSION: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Names `session` in the queue loop's claims, now and for every later start until the page
/// gives another.
pub(crate) fn set_session(session: Option<String>) {
    SESSION.with(|c| c.replace(session.clone()));
    if let Ok(p) = pipeline() {
        p.adapters.source.set_session(session);
    }
}

/// Pauses (no new claims; jobs in hand finish) or resumes the queue loop, now and for every
/// later start until the page says otherwise.
pub(crate) fn pause(paused: bool) {
    PAUSED.with(|c| c.set(paused));
    if let Ok(p) = pipeline() {
        p.pause.set(paused);
    }
}

/// Starts the queue loop (with `concurrency` jobs in flight, and the engine within `cpu_share`
/// of wall time, when given).
pub(crate) async fn start(
    concurrency: Option<u32>,
    cpu_share: Option<f64>,
) -> Result<(), WorkerError> {
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
    if let Some(share) = cpu_share {
        if !(share > 0.0 && share <= 1.0) {
            return Err(WorkerError::BadConfig(format!(
                "budget must be in (0, 1] (a share of one core), not {share}"
            )));
        }
    }
    p.cpu.set_share(cpu_share.unwrap_or(1.0));
    p.pause.set(PAUSED.with(|c| c.get()));
    p.adapters
        .source
        .set_session(SESSION.with(|c| c.borrow().clone()));
    let inval = Rc::downgrade(&p);
    let client = p.adapters.source.clone();
    let token: Rc<dyn Fn() -> String> = Rc::new(move || client.token());
    let client = p.adapters.source.clone();
    let session: Rc<dyn Fn() -> Option<String>> = Rc::new(move || client.session());
    let resync = inval.clone();
    let wake = Rc::new(SseWakeups::open(
        &base,
        token,
        session,
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
    p.watch_leases();
    wasm_bindgen_futures::spawn_local(async move {
        let run = lp.run_queue(&*lw);
        let mirror = mirror_leases(&lp);
        futures_util::pin_mut!(run, mirror);
        let sum = match futures_util::future::select(run, mirror).await {
            futures_util::future::Either::Left((sum, _)) => sum,
            futures_util::future::Either::Right(((), run)) => run.await,
        };
        // The last changes: what the stop handed back is no longer the page's to release.
        post_leases(&lp);
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

/// The breakers' gauges, where the model runs, the wasm memory of both instances, and the local
/// reads answered without IndexedDB.
pub(crate) fn update_gauges(p: &Pipeline<Browser>) {
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
    p.metrics
        .set_gauge(gauges::PAUSED, if p.pause.is_paused() { 1.0 } else { 0.0 });
    let memory_only = p.adapters.local.as_idb().is_none();
    p.metrics.set_gauge(
        gauges::LOCAL_CACHE_MEMORY_ONLY,
        if memory_only { 1.0 } else { 0.0 },
    );
    p.metrics.set_gauge(gauges::CPU_SHARE, p.cpu.share());
    p.metrics
        .set_gauge(gauges::ENGINE_BUSY_MS, p.cpu.busy_ms() as f64);
    if p.adapters.local.as_idb().is_some() {
        p.metrics.set_gauge(
            gauges::LOCAL_READS_SKIPPED,
            crate::idb::IdbCache::skipped_reads_in_thread() as f64,
        );
    }
}

/// Posts the queue loop's lease changes to the page, each batch once it settled (never ends:
/// it runs beside the loop and is dropped with it).
async fn mirror_leases(p: &Pipeline<Browser>) {
    loop {
        p.lease_changes().await;
        BrowserClock.sleep(LEASE_MIRROR_MS).await;
        post_leases(p);
    }
}

/// Posts the lease changes since the last post, if any.
fn post_leases(p: &Pipeline<Browser>) {
    let c = p.take_lease_changes();
    if c.is_empty() {
        return;
    }
    crate::page::post(&FromWorker::Leases {
        held: c
            .held
            .into_iter()
            .map(|(id, token)| ternflow_core::protocol::LeaseRef { id, token })
            .collect(),
        gone: c.gone,
    });
}

async fn push_metrics(p: &Pipeline<Browser>) {
    update_gauges(p);
    let snap = p.metrics.snapshot(&p.cfg.worker_id, BrowserClock.now_ms());
    crate::page::post(&FromWorker::Metrics {
        metrics: snap.clone(),
    });
    let _ = p.adapters.source.push_metrics(&snap).await;
}

/// Stops the loop: in-flight jobs finish until `deadline_ms` from now, the rest go back.
pub(crate) async fn stop(deadline_ms: u64) -> Result<RunSummary, WorkerError> {
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
