//! The long-running worker (`wasmtime run`): core's queue loop over the WASI adapters, a stop
//! controller (run time, idle time or the end of standard input, then a drain deadline after
//! which unfinished jobs are handed back), and metrics pushed to `POST /v1/metrics`.
//!
//! Standard output carries one JSON line when the instance is ready (`"event": "ready"`, with
//! its model and linear memory) and one when it stopped (`"event": "stopped"`, with the run's
//! summary and counters); the tests and `scripts/wasi-figures.sh` read them.

use futures_util::future::{self, Either};
use futures_util::pin_mut;
use serde_json::json;
use ternflow_core::messages::RunSummary;
use ternflow_core::metrics::{gauges, names};
use ternflow_core::ports::{Clock, Wakeups};
use ternflow_core::Pipeline;

use crate::app::{self, memory_bytes, Wasi};
use crate::clock::WasiClock;
use crate::settings::{RunControl, Settings};

/// How often metrics are pushed while they change, ms.
const METRICS_INTERVAL_MS: u64 = 2_000;

/// The queue loop's wake-ups. The component has no `EventSource`: the claim's own long poll
/// (`claimWaitMs`) is what waits for work, so after an empty claim the loop only pauses briefly
/// (a floor against a server that answers empty at once) before claiming again.
#[derive(Debug, Clone, Copy)]
pub struct LongPoll;

/// The pause after an empty claim, ms.
const EMPTY_CLAIM_PAUSE_MS: u64 = 50;

impl Wakeups for LongPoll {
    async fn next(&self, timeout_ms: u64) -> Option<u64> {
        WasiClock.sleep(timeout_ms.min(EMPTY_CLAIM_PAUSE_MS)).await;
        None
    }
}

/// Runs the worker until its stop condition and drain; returns the run's summary.
///
/// # Errors
/// A message when there is no server or the pipeline cannot be built (model missing or bad).
pub async fn run(settings: Settings) -> Result<RunSummary, String> {
    if settings.server.is_none() {
        return Err("the worker needs TERNFLOW_SERVER (the queue)".into());
    }
    let (p, started) = app::build(&settings, "wasi").await?;
    println!("{}", json!({"event": "ready", "started": started}));
    let queue = p.run_queue(&LongPoll);
    let side = future::join(stop_when(&p, settings.run), push_metrics_while_changing(&p));
    pin_mut!(queue, side);
    let summary: RunSummary = match future::select(queue, side).await {
        Either::Left((sum, _)) => sum,
        Either::Right(_) => unreachable!("the stop controller and the metrics loop never end"),
    };
    push_metrics(&p).await;
    let counters = p
        .metrics
        .snapshot(&p.cfg.worker_id, WasiClock.now_ms())
        .counters;
    println!(
        "{}",
        json!({"event": "stopped", "worker": p.cfg.worker_id, "summary": summary,
               "counters": counters, "memory_bytes": memory_bytes()})
    );
    Ok(summary)
}

/// Raises the stop signal when `run` says so, then waits forever (the queue loop ends the run).
async fn stop_when(p: &Pipeline<Wasi>, run: RunControl) {
    let deadline = async {
        match run.run_ms {
            Some(ms) => WasiClock.sleep(ms).await,
            None => future::pending().await,
        }
    };
    let idle = async {
        match run.idle_exit_ms {
            Some(ms) => idle_for(p, ms).await,
            None => future::pending().await,
        }
    };
    let eof = async {
        if run.stop_on_eof {
            stdin_closed().await
        } else {
            future::pending().await
        }
    };
    pin_mut!(deadline, idle, eof);
    future::select(deadline, future::select(idle, eof)).await;
    p.stop.stop(WasiClock.now_ms() + run.drain_ms);
    future::pending::<()>().await;
}

/// Resolves once no job was claimed for `ms` and nothing is in flight.
async fn idle_for(p: &Pipeline<Wasi>, ms: u64) {
    let step = (ms / 4).clamp(10, 500);
    let (mut claimed, mut since) = (p.metrics.counter(names::JOBS_CLAIMED), WasiClock.now_ms());
    loop {
        WasiClock.sleep(step).await;
        let now = WasiClock.now_ms();
        let c = p.metrics.counter(names::JOBS_CLAIMED);
        let busy = p.metrics.gauge(gauges::IN_FLIGHT).unwrap_or(0.0) > 0.0;
        if c != claimed || busy {
            (claimed, since) = (c, now);
        } else if now.saturating_sub(since) >= ms {
            return;
        }
    }
}

/// Resolves when standard input reaches its end (or fails).
#[cfg(feature = "p2")]
async fn stdin_closed() {
    use wstd::io::AsyncRead;
    let mut stdin = wstd::io::stdin();
    let mut buf = [0u8; 256];
    while let Ok(n) = stdin.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
}

/// Resolves when standard input reaches its end (or fails): WASI 0.3's stdin is a
/// `stream<u8>`, read (and dropped) until the host closes it.
#[cfg(feature = "p3")]
async fn stdin_closed() {
    use wasip3::wit_bindgen::StreamResult;
    let (mut stdin, _done) = wasip3::cli::stdin::read_via_stream();
    while let (StreamResult::Complete(_), _) = stdin.read(Vec::with_capacity(256)).await {}
}

/// Pushes a snapshot every [`METRICS_INTERVAL_MS`] while the counters change (an idle worker
/// sends nothing); never returns.
async fn push_metrics_while_changing(p: &Pipeline<Wasi>) {
    let mut last = None;
    loop {
        WasiClock.sleep(METRICS_INTERVAL_MS).await;
        let counters = p
            .metrics
            .snapshot(&p.cfg.worker_id, WasiClock.now_ms())
            .counters;
        if last.as_ref() != Some(&counters) {
            push_metrics(p).await;
            last = Some(counters);
        }
    }
}

async fn push_metrics(p: &Pipeline<Wasi>) {
    p.update_breaker_gauges();
    let snap = p.metrics.snapshot(&p.cfg.worker_id, WasiClock.now_ms());
    // Best effort: a server that is down misses a snapshot, not a job.
    let _ = p.adapters.source.push_metrics(&snap).await;
}
