//! The worker's metrics registry: counters, gauges and latency histograms, snapshotted into the
//! protocol's [`WorkerMetrics`] for the page (`postMessage`) and the server (`POST /v1/metrics`).
//!
//! Single-threaded by design (the worker runs on one thread): interior mutability with `RefCell`.

use std::cell::RefCell;
use std::collections::BTreeMap;

use crate::protocol::WorkerMetrics;

/// Counter names, so producers and dashboards agree on spelling.
pub mod names {
    /// Jobs claimed from the queue.
    pub const JOBS_CLAIMED: &str = "jobs_claimed";
    /// Jobs acked.
    pub const JOBS_DONE: &str = "jobs_done";
    /// Jobs handed back for a later re-delivery (transient failure).
    pub const JOBS_NACKED: &str = "jobs_nacked";
    /// Jobs sent to the dead-letter queue (permanent failure or attempts exhausted).
    pub const JOBS_DEAD: &str = "jobs_dead";
    /// Jobs abandoned because their lease was lost.
    pub const LEASES_LOST: &str = "leases_lost";
    /// Local (IndexedDB) cache hits.
    pub const LOCAL_HITS: &str = "cache_local_hits";
    /// Local cache misses.
    pub const LOCAL_MISSES: &str = "cache_local_misses";
    /// Local cache errors (the job carried on without it).
    pub const LOCAL_ERRORS: &str = "cache_local_errors";
    /// Remote cache hits.
    pub const REMOTE_HITS: &str = "cache_remote_hits";
    /// Remote cache misses.
    pub const REMOTE_MISSES: &str = "cache_remote_misses";
    /// Remote puts refused because a newer fence was stored.
    pub const FENCE_CONFLICTS: &str = "cache_fence_conflicts";
    /// Locks acquired.
    pub const LOCKS_ACQUIRED: &str = "locks_acquired";
    /// Lock attempts that found the lock held elsewhere.
    pub const LOCK_FAILURES: &str = "lock_failures";
    /// Texts embedded by the in-wasm engine.
    pub const ENGINE_EMBEDS: &str = "engine_embeds";
    /// Engine failures.
    pub const ENGINE_ERRORS: &str = "engine_errors";
    /// Backend `/v1/embed` calls.
    pub const BACKEND_CALLS: &str = "backend_calls";
    /// Backend failures.
    pub const BACKEND_ERRORS: &str = "backend_errors";
    /// Backend calls refused locally by the breaker or the rate limiter.
    pub const BACKEND_REFUSED: &str = "backend_refused";
    /// Retries made inside the worker.
    pub const RETRIES: &str = "retries";
    /// Heartbeats sent.
    pub const HEARTBEATS: &str = "heartbeats";
    /// Local entries dropped by `invalidate` events.
    pub const INVALIDATIONS: &str = "invalidations";
    /// `reset` events heard (the event stream had a gap): the local cache was emptied.
    pub const RESETS: &str = "event_resets";
    /// Remote cache reads or writes that failed (the job goes on without them).
    pub const REMOTE_ERRORS: &str = "cache_remote_errors";
    /// Nacks that could not be delivered (the lease expires and the job is re-delivered).
    pub const NACK_FAILURES: &str = "nack_failures";
    /// Batch ack requests sent (`jobs_done / ack_batches` is the mean batch).
    pub const ACK_BATCHES: &str = "ack_batches";
    /// Claims that failed (the server unreachable or refusing); the loop backs off and claims again.
    pub const CLAIM_FAILURES: &str = "claim_failures";
    /// Batch nack requests sent.
    pub const NACK_BATCHES: &str = "nack_batches";
    /// Batched heartbeat requests sent (each extends every lease the worker holds).
    pub const HEARTBEAT_BATCHES: &str = "heartbeat_batches";
    /// Hand-backs that could not be delivered (the lease expires and the job is re-delivered).
    pub const RELEASE_FAILURES: &str = "release_failures";
}

/// Gauge names.
pub mod gauges {
    /// Jobs in flight in this worker.
    pub const IN_FLIGHT: &str = "in_flight";
    /// The last queue depth the server reported.
    pub const QUEUE_DEPTH: &str = "queue_depth";
    /// Backend breaker: 0 closed, 1 open, 2 half-open.
    pub const BACKEND_BREAKER: &str = "backend_breaker";
    /// Engine breaker: 0 closed, 1 open, 2 half-open.
    pub const ENGINE_BREAKER: &str = "engine_breaker";
    /// Where the browser worker's model runs: 1 in an engine worker of its own, 0 on the
    /// pipeline's thread (no nested workers, or that worker failed).
    pub const ENGINE_IN_WORKER: &str = "engine_in_worker";
    /// Bytes of wasm memory of this worker's instance.
    pub const WASM_MEMORY_BYTES: &str = "wasm_memory_bytes";
    /// Bytes of wasm memory of the engine worker's instance (0 when there is none).
    pub const ENGINE_WORKER_MEMORY_BYTES: &str = "engine_worker_memory_bytes";
    /// Local-cache reads a browser worker answered "miss" from the IndexedDB keys it keeps in
    /// memory, without a request, since the worker started.
    pub const LOCAL_READS_SKIPPED: &str = "local_reads_skipped";
    /// 1 while the queue loop is paused (a hidden tab, save-data, a low battery, `pause()`).
    pub const PAUSED: &str = "paused";
    /// 1 when the local cache is in memory only (no IndexedDB here, or it refused to open:
    /// private browsing, a blocked database, no storage granted), else 0.
    pub const LOCAL_CACHE_MEMORY_ONLY: &str = "local_cache_memory_only";
    /// The CPU budget's share of wall time for the engine (1: none).
    pub const CPU_SHARE: &str = "cpu_share";
    /// Engine busy time measured by the CPU budget since the pipeline started, ms.
    pub const ENGINE_BUSY_MS: &str = "engine_busy_ms";
}

/// Latency histogram names (each reported as `<name>_p50_ms`, `_p99_ms`, `_mean_ms`).
pub mod histograms {
    /// One engine embed.
    pub const ENGINE_LATENCY: &str = "engine_latency";
}

/// Upper bounds (ms) of the latency histogram buckets; a last bucket catches the rest.
pub const LATENCY_BUCKETS_MS: [f64; 14] = [
    0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 25.0, 50.0, 100.0, 250.0,
];

/// A fixed-bucket latency histogram.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    counts: [u64; LATENCY_BUCKETS_MS.len() + 1],
    sum_ms: f64,
    n: u64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&mut self, ms: f64) {
        let i = LATENCY_BUCKETS_MS
            .iter()
            .position(|&b| ms <= b)
            .unwrap_or(LATENCY_BUCKETS_MS.len());
        self.counts[i] += 1;
        self.sum_ms += ms;
        self.n += 1;
    }

    /// Observations recorded.
    pub fn count(&self) -> u64 {
        self.n
    }

    /// Mean, ms (0 when empty).
    pub fn mean_ms(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum_ms / self.n as f64
        }
    }

    /// Quantile `q` (0..=1) by [`quantile`]'s rule; 0 when empty.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        quantile(&LATENCY_BUCKETS_MS, &self.counts, q).unwrap_or(0.0)
    }
}

/// The `q` quantile (0..=1) of a histogram with upper `bounds` and `counts` (one more than the
/// bounds: the overflow), interpolated linearly inside its bucket as Prometheus'
/// `histogram_quantile` does (the last finite bound for the overflow bucket); `None` when empty.
/// The one rule for every latency quantile ternflow shows: the worker's gauges, the server's
/// dashboard and its job-latency samples.
pub fn quantile(bounds: &[f64], counts: &[u64], q: f64) -> Option<f64> {
    let n: u64 = counts.iter().sum();
    if n == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * n as f64;
    let mut seen = 0u64;
    for (i, &c) in counts.iter().enumerate() {
        if c > 0 && (seen + c) as f64 >= rank {
            let lo = if i == 0 { 0.0 } else { bounds[i - 1] };
            let Some(&hi) = bounds.get(i) else {
                return bounds.last().copied();
            };
            return Some(lo + (hi - lo) * ((rank - seen as f64) / c as f64).clamp(0.0, 1.0));
        }
        seen += c;
    }
    bounds.last().copied()
}

#[derive(Debug, Default)]
struct Inner {
    counters: BTreeMap<&'static str, u64>,
    gauges: BTreeMap<&'static str, f64>,
    histograms: BTreeMap<&'static str, Histogram>,
    /// (time ms, jobs_done) samples for the processing rate.
    done_samples: Vec<(u64, u64)>,
}

/// The registry.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: RefCell<Inner>,
}

/// Window over which the processing rate is computed.
pub const RATE_WINDOW_MS: u64 = 10_000;

impl Metrics {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `n` to counter `name`.
    pub fn add(&self, name: &'static str, n: u64) {
        *self.inner.borrow_mut().counters.entry(name).or_default() += n;
    }

    /// Adds one to counter `name`.
    pub fn inc(&self, name: &'static str) {
        self.add(name, 1);
    }

    /// A counter's value.
    pub fn counter(&self, name: &str) -> u64 {
        self.inner.borrow().counters.get(name).copied().unwrap_or(0)
    }

    /// Sets gauge `name`.
    pub fn set_gauge(&self, name: &'static str, v: f64) {
        self.inner.borrow_mut().gauges.insert(name, v);
    }

    /// A gauge's value.
    pub fn gauge(&self, name: &str) -> Option<f64> {
        self.inner.borrow().gauges.get(name).copied()
    }

    /// Records a latency in histogram `name`.
    pub fn observe_ms(&self, name: &'static str, ms: f64) {
        self.inner
            .borrow_mut()
            .histograms
            .entry(name)
            .or_default()
            .observe(ms);
    }

    /// A copy of histogram `name`.
    pub fn histogram(&self, name: &str) -> Histogram {
        self.inner
            .borrow()
            .histograms
            .get(name)
            .cloned()
            .unwrap_or_default()
    }

    /// Moves everything `from` recorded into this registry (which must be new), leaving `from`
    /// empty: a worker's counters outlive the pipeline they were counted in (`stop()` replaces
    /// the pipeline, and `stats()` afterwards must still see the run's totals).
    pub fn take_over(&self, from: &Metrics) {
        let taken = std::mem::take(&mut *from.inner.borrow_mut());
        *self.inner.borrow_mut() = taken;
    }

    /// Jobs done per second over the last [`RATE_WINDOW_MS`], as of `now_ms`.
    pub fn processing_rate(&self, now_ms: u64) -> f64 {
        let mut inner = self.inner.borrow_mut();
        let done = inner.counters.get(names::JOBS_DONE).copied().unwrap_or(0);
        inner.done_samples.push((now_ms, done));
        let cutoff = now_ms.saturating_sub(RATE_WINDOW_MS);
        // Keep one sample at or before the window start as the baseline.
        while inner.done_samples.len() > 2 && inner.done_samples[1].0 <= cutoff {
            inner.done_samples.remove(0);
        }
        let (t0, d0) = inner.done_samples[0];
        if now_ms <= t0 {
            return 0.0;
        }
        (done - d0) as f64 * 1000.0 / (now_ms - t0) as f64
    }

    fn ratio(&self, hits: &str, misses: &str) -> f64 {
        let (h, m) = (self.counter(hits), self.counter(misses));
        if h + m == 0 {
            0.0
        } else {
            h as f64 / (h + m) as f64
        }
    }

    /// A snapshot for `worker` at `now_ms`: every counter and gauge, plus derived gauges
    /// (hit ratios, processing rate, latency quantiles per histogram).
    pub fn snapshot(&self, worker: &str, now_ms: u64) -> WorkerMetrics {
        let rate = self.processing_rate(now_ms);
        let local_ratio = self.ratio(names::LOCAL_HITS, names::LOCAL_MISSES);
        let remote_ratio = self.ratio(names::REMOTE_HITS, names::REMOTE_MISSES);
        let inner = self.inner.borrow();
        let counters = inner
            .counters
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect();
        let mut gauges: BTreeMap<String, f64> = inner
            .gauges
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect();
        gauges.insert("processing_rate".into(), rate);
        gauges.insert("local_hit_ratio".into(), local_ratio);
        gauges.insert("remote_hit_ratio".into(), remote_ratio);
        for (name, h) in &inner.histograms {
            gauges.insert(format!("{name}_p50_ms"), h.quantile_ms(0.5));
            gauges.insert(format!("{name}_p99_ms"), h.quantile_ms(0.99));
            gauges.insert(format!("{name}_mean_ms"), h.mean_ms());
            gauges.insert(format!("{name}_count"), h.count() as f64);
        }
        WorkerMetrics {
            worker: worker.to_owned(),
            counters,
            gauges,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_interpolate_inside_their_bucket() {
        let mut h = Histogram::default();
        for _ in 0..90 {
            h.observe(1.5);
        }
        for _ in 0..10 {
            h.observe(40.0);
        }
        // Interpolated inside the bucket: rank 50 of 90 in (1, 2]; rank 95 is the 5th of 10 in (25, 50].
        assert!((h.quantile_ms(0.5) - (1.0 + 50.0 / 90.0)).abs() < 1e-9);
        assert!((h.quantile_ms(0.95) - 37.5).abs() < 1e-9);
        h.observe(10_000.0);
        assert_eq!(h.quantile_ms(1.0), 250.0);
        assert_eq!(Histogram::default().quantile_ms(0.5), 0.0);
        assert!((h.mean_ms() - (135.0 + 400.0 + 10_000.0) / 101.0).abs() < 1e-9);
    }

    #[test]
    fn take_over_moves_counters_gauges_and_histograms() {
        let old = Metrics::new();
        old.add(names::JOBS_DONE, 7);
        old.set_gauge(gauges::QUEUE_DEPTH, 3.0);
        old.observe_ms(histograms::ENGINE_LATENCY, 2.5);
        let fresh = Metrics::new();
        fresh.take_over(&old);
        assert_eq!(fresh.counter(names::JOBS_DONE), 7);
        assert_eq!(fresh.gauge(gauges::QUEUE_DEPTH), Some(3.0));
        assert_eq!(fresh.histogram(histograms::ENGINE_LATENCY).count(), 1);
        assert_eq!(old.counter(names::JOBS_DONE), 0, "moved, not copied");
        fresh.inc(names::JOBS_DONE);
        assert_eq!(
            fresh.counter(names::JOBS_DONE),
            8,
            "and it goes on counting"
        );
    }

    #[test]
    fn snapshot_carries_counters_ratios_and_rate() {
        let m = Metrics::new();
        m.add(names::LOCAL_HITS, 3);
        m.inc(names::LOCAL_MISSES);
        m.set_gauge(gauges::IN_FLIGHT, 2.0);
        m.observe_ms("engine_latency", 3.0);
        let _ = m.processing_rate(0);
        m.add(names::JOBS_DONE, 50);
        let s = m.snapshot("w1", 5_000);
        assert_eq!(s.worker, "w1");
        assert_eq!(s.counters["cache_local_hits"], 3);
        assert_eq!(s.gauges["local_hit_ratio"], 0.75);
        assert_eq!(s.gauges["in_flight"], 2.0);
        // One observation of 3 ms in the (2, 3] bucket: its median, interpolated, is 2.5.
        assert_eq!(s.gauges["engine_latency_p50_ms"], 2.5);
        assert_eq!(s.gauges["processing_rate"], 10.0);
    }
}
