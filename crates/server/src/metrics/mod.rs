//! The server's metrics registry: counters, the embed latency histogram and the ack rate
//! (the workers' own snapshots are per tenant, `crate::workers`), rendered as Prometheus text
//! (exposition format 0.0.4), and the labelled families alerts are written on.
//!
//! # Layout
//! - `mod.rs`: [`Metrics`], the counters and the two latency histograms, written by hand (moving
//!   them onto the `prometheus` crate's types, as `families` is, keeps their names).
//! - `families`: [`Families`], the operator's alert signals as typed families of the
//!   `prometheus` crate (store latency, lock waits and waiters, nacks and dead letters by
//!   reason, SSE clients, long polls).
//! - `contention`: [`Contention`], the open lock-contention episodes per key behind the
//!   stampede signal.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use ternflow_core::protocol::{QueueDepth, ResultSource};

mod contention;
mod families;

pub use contention::{Contention, Ended};
pub use families::{reason_label, Families, GaugeGuard, NackOutcome};

pub use crate::workers::{WorkerRow, WORKER_QUIET_MS};

macro_rules! counters {
    ($($name:ident: $help:literal,)*) => {
        /// Monotonic server counters.
        #[derive(Debug, Default)]
        pub struct Counters {
            $(#[doc = $help] pub $name: AtomicU64,)*
        }

        impl Counters {
            /// `(name, help, value)` for every counter.
            pub fn list(&self) -> Vec<(&'static str, &'static str, u64)> {
                vec![$((stringify!($name), $help, self.$name.load(Ordering::Relaxed)),)*]
            }
        }
    };
}

counters! {
    jobs_enqueued: "Jobs accepted as new.",
    jobs_duplicate: "Submitted jobs that already existed.",
    jobs_claimed: "Leases handed out.",
    jobs_acked: "Jobs finished.",
    jobs_resolved_at_claim: "Jobs finished by the claim itself from the remote cache (no worker ack).",
    jobs_nacked: "Nacks received.",
    jobs_retried: "Jobs scheduled for re-delivery after a nack.",
    jobs_dead: "Jobs moved to the dead-letter queue.",
    jobs_done_by_server: "Jobs a worker nacked for good (or on their last attempt) that the server embedded itself.",
    nacks_overruled: "Nacks sent as permanent for a model the server cannot run, retried instead (a worker alone does not dead-letter a job).",
    jobs_redriven: "Dead letters re-queued.",
    leases_expired: "Leases that expired and were re-delivered.",
    leases_lost: "Heartbeats, acks and nacks refused for a stale token.",
    leases_released: "Leases handed back by stopping workers.",
    releases_counted: "Releases past a job's free ones, counted as an attempt (a worker cannot keep a job by releasing and claiming it again).",
    cache_hits: "Remote cache hits.",
    cache_misses: "Remote cache misses.",
    cache_puts: "Remote cache writes.",
    cache_stale_puts: "Remote cache writes refused for an older fence.",
    cache_unfenced_puts: "Remote cache writes refused because the server never issued their fence for that key.",
    cache_swept: "Expired cache entries and locks removed by the sweeper.",
    requests_limited: "Requests refused by the per-token rate limit.",
    streams_refused: "SSE streams refused because the token had too many open.",
    connections_refused: "Connections closed at once because the connection limit was reached.",
    lock_acquired: "Locks granted.",
    lock_contended: "Lock requests refused because the lock was held.",
    lock_released: "Locks released by their holder.",
    lock_leaked: "Locks that expired without being released.",
    locks_broken: "Locks an admin broke for a holder that was gone (POST /v1/locks/{key}/break).",
    embed_requests: "Backend embed requests served.",
    embed_texts: "Texts embedded by the backend.",
    embed_rejected: "Backend embed requests refused because the queue was full.",
    results_refused: "Acks and cache writes refused by the shape checks (bad_result, model_mismatch).",
    results_verified: "Results and cache writes the server recomputed and found equal.",
    results_unverifiable: "Results of a model the server cannot run, accepted unverified.",
    results_pending_agreement: "Results of a model the server cannot run held until enough identities agree (k-of-n), the job given back.",
    results_mismatched: "Results and cache writes the server recomputed and found different (the writer is quarantined).",
    verify_micros: "Engine CPU time spent recomputing workers' results (microseconds of thread CPU time; each engine batch's shared out by texts).",
    quarantines: "Writers quarantined.",
    quarantines_lifted: "Quarantines lifted by an admin.",
    undone_results: "Finished jobs re-queued because their writer was quarantined.",
    undone_cache_entries: "Cache entries deleted because their writer was quarantined.",
    quarantined_refusals: "Requests refused because the caller is quarantined.",
}

/// Upper bounds (ms) of the embed latency histogram buckets.
pub const LATENCY_BUCKETS_MS: [f64; 12] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1_000.0, 2_000.0, 5_000.0,
];

/// Upper bounds (ms) of the job latency histogram: claim → ack, as this server saw both.
pub const JOB_LATENCY_BUCKETS_MS: [f64; 16] = [
    5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 300.0, 500.0, 750.0, 1_000.0, 1_500.0, 2_000.0, 3_000.0,
    5_000.0, 10_000.0, 30_000.0,
];
/// Most claims whose time is remembered for the job latency (a job acked on another server, or
/// never acked, is forgotten after [`CLAIM_MEMORY_MS`] once the table is full).
const MAX_TRACKED_CLAIMS: usize = 200_000;
/// How long a remembered claim time is worth keeping when the table is full (ms).
const CLAIM_MEMORY_MS: u64 = 15 * 60_000;
/// The result sources, in the order of [`Metrics::acked_by_source`].
pub const SOURCES: [ResultSource; 4] = [
    ResultSource::Engine,
    ResultSource::Backend,
    ResultSource::Local,
    ResultSource::Remote,
];

/// See the [module docs](self).
#[derive(Debug, Default)]
pub struct Metrics {
    /// Counters.
    pub counters: Counters,
    latency_buckets: [AtomicU64; 12],
    latency_count: AtomicU64,
    latency_sum_us: AtomicU64,
    acks_per_second: Mutex<VecDeque<(u64, u64)>>,
    /// Job id → when this server leased it (for the job latency).
    claimed_at: Mutex<HashMap<String, u64>>,
    /// Cumulative job latency counts per [`JOB_LATENCY_BUCKETS_MS`] bucket, plus overflow.
    job_latency: [AtomicU64; JOB_LATENCY_BUCKETS_MS.len() + 1],
    /// Sum of the job latencies counted in `job_latency`, in milliseconds.
    job_latency_sum_ms: AtomicU64,
    /// Acked jobs by where their vector came from, in [`SOURCES`] order.
    acked_by_source: [AtomicU64; 4],
    /// The labelled families (store latency, contention, reasons, streams).
    pub families: Families,
}

/// The runtime a `User-Agent` names: browser and version, Node, workerd, or `native` (a Rust
/// client, or no header).
pub fn runtime_of(user_agent: &str) -> String {
    for (token, name) in [
        ("HeadlessChrome/", "HeadlessChrome"),
        ("Edg/", "Edge"),
        ("Chrome/", "Chrome"),
        ("Firefox/", "Firefox"),
        ("Version/", "Safari"),
    ] {
        if let Some(rest) = user_agent.split(token).nth(1) {
            let major = rest.split(['.', ' ']).next().unwrap_or("");
            return format!("{name} {major}");
        }
    }
    let lower = user_agent.to_ascii_lowercase();
    if lower.contains("cloudflare-workers") || lower.contains("workerd") {
        "workerd".to_owned()
    } else if lower == "node" || lower.starts_with("node") || lower.contains("undici") {
        "Node".to_owned()
    } else if user_agent.is_empty() || lower.starts_with("reqwest") {
        "native".to_owned()
    } else {
        user_agent.chars().take(40).collect()
    }
}

/// The one latency-quantile rule (core's, shared with the workers' gauges).
pub use ternflow_core::metrics::quantile;

fn inc(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Metrics {
    /// Adds `n` to a counter.
    pub fn add(&self, counter: impl Fn(&Counters) -> &AtomicU64, n: u64) {
        inc(counter(&self.counters), n);
    }

    /// A counter's value by its name (0 for an unknown name).
    pub fn counter_value(&self, name: &str) -> u64 {
        self.counters
            .list()
            .into_iter()
            .find(|(n, _, _)| *n == name)
            .map_or(0, |(_, _, v)| v)
    }

    /// Records one embed batch's latency.
    pub fn observe_embed(&self, ms: f64) {
        for (i, le) in LATENCY_BUCKETS_MS.iter().enumerate() {
            if ms <= *le {
                inc(&self.latency_buckets[i], 1);
            }
        }
        inc(&self.latency_count, 1);
        inc(&self.latency_sum_us, (ms * 1_000.0) as u64);
    }

    /// Records `n` acks at `now_ms` (for the processing rate).
    pub fn record_acks(&self, now_ms: u64, n: u64) {
        let sec = now_ms / 1_000;
        let mut q = self
            .acks_per_second
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match q.back_mut() {
            Some((s, c)) if *s == sec => *c += n,
            _ => q.push_back((sec, n)),
        }
        while q.front().is_some_and(|(s, _)| *s + 60 < sec) {
            q.pop_front();
        }
    }

    /// Acks per second over the last 60 s.
    pub fn ack_rate(&self, now_ms: u64) -> f64 {
        let sec = now_ms / 1_000;
        let q = self
            .acks_per_second
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let n: u64 = q
            .iter()
            .filter(|(s, _)| *s + 60 > sec)
            .map(|(_, c)| *c)
            .sum();
        n as f64 / 60.0
    }

    /// Remembers when this server leased `ids` (the start of their job latency).
    pub fn jobs_claimed<'a>(&self, ids: impl IntoIterator<Item = &'a str>, now_ms: u64) {
        let mut m = self.claimed_at.lock().unwrap_or_else(|p| p.into_inner());
        for id in ids {
            if m.len() >= MAX_TRACKED_CLAIMS && !m.contains_key(id) {
                m.retain(|_, at| at.saturating_add(CLAIM_MEMORY_MS) > now_ms);
                if m.len() >= MAX_TRACKED_CLAIMS {
                    return;
                }
            }
            m.insert(id.to_owned(), now_ms);
        }
    }

    /// Counts a first ack by its result's source and, when this server leased the job,
    /// records its claim → ack latency.
    pub fn job_acked(&self, id: &str, source: ResultSource, now_ms: u64) {
        let i = SOURCES.iter().position(|s| *s == source).unwrap_or(0);
        inc(&self.acked_by_source[i], 1);
        let started = self
            .claimed_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        if let Some(at) = started {
            let ms = now_ms.saturating_sub(at) as f64;
            let b = JOB_LATENCY_BUCKETS_MS
                .iter()
                .position(|le| ms <= *le)
                .unwrap_or(JOB_LATENCY_BUCKETS_MS.len());
            inc(&self.job_latency[b], 1);
            inc(&self.job_latency_sum_ms, ms as u64);
        }
    }

    /// Cumulative job latency counts (per [`JOB_LATENCY_BUCKETS_MS`] bucket, then overflow).
    pub fn job_latency_counts(&self) -> Vec<u64> {
        self.job_latency
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }

    /// Acked jobs by source since start, in [`SOURCES`] order.
    pub fn acked_by_source(&self) -> [u64; 4] {
        std::array::from_fn(|i| self.acked_by_source[i].load(Ordering::Relaxed))
    }

    /// `n` jobs were dead-lettered, their last failure's code `code`: counted in
    /// `jobs_dead` and by reason.
    pub fn dead_lettered(&self, code: &str, n: u64) {
        self.add(|c| &c.jobs_dead, n);
        self.families.dead_lettered(code, n);
    }

    /// Prometheus text exposition. `depth` is `None` when the store could not say in time: the
    /// queue's four gauges are then left out (absent, not zero) and everything else is there.
    pub fn render(&self, depth: Option<QueueDepth>, locks_held: u64, now_ms: u64) -> String {
        let mut out = String::with_capacity(4_096);
        let mut gauge = |name: &str, help: &str, v: f64| {
            let _ = writeln!(out, "# HELP ternflow_{name} {help}");
            let _ = writeln!(out, "# TYPE ternflow_{name} gauge");
            let _ = writeln!(out, "ternflow_{name} {v}");
        };
        if let Some(depth) = depth {
            gauge("queue_ready", "Jobs ready to claim.", depth.ready as f64);
            gauge(
                "queue_delayed",
                "Jobs waiting for a delay or backoff.",
                depth.delayed as f64,
            );
            gauge(
                "jobs_in_flight",
                "Jobs leased to workers.",
                depth.leased as f64,
            );
            gauge(
                "dead_letters",
                "Jobs in the dead-letter queue.",
                depth.dead as f64,
            );
        }
        gauge(
            "locks_held",
            "Locks granted and not yet released or expired.",
            locks_held as f64,
        );
        gauge(
            "processing_rate",
            "Jobs acked per second over the last minute.",
            self.ack_rate(now_ms),
        );
        for (name, help, v) in self.counters.list() {
            let _ = writeln!(out, "# HELP ternflow_{name}_total {help}");
            let _ = writeln!(out, "# TYPE ternflow_{name}_total counter");
            let _ = writeln!(out, "ternflow_{name}_total {v}");
        }
        let _ = writeln!(
            out,
            "# HELP ternflow_embed_latency_seconds Backend embed batch latency."
        );
        let _ = writeln!(out, "# TYPE ternflow_embed_latency_seconds histogram");
        for (i, le) in LATENCY_BUCKETS_MS.iter().enumerate() {
            let _ = writeln!(
                out,
                "ternflow_embed_latency_seconds_bucket{{le=\"{}\"}} {}",
                le / 1_000.0,
                self.latency_buckets[i].load(Ordering::Relaxed)
            );
        }
        let count = self.latency_count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "ternflow_embed_latency_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "ternflow_embed_latency_seconds_sum {}",
            self.latency_sum_us.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "ternflow_embed_latency_seconds_count {count}");
        let _ = writeln!(
            out,
            "# HELP ternflow_jobs_acked_by_source_total Jobs finished, by where their vector came from."
        );
        let _ = writeln!(out, "# TYPE ternflow_jobs_acked_by_source_total counter");
        for (s, v) in SOURCES.iter().zip(self.acked_by_source()) {
            let name = serde_json::to_value(s)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "ternflow_jobs_acked_by_source_total{{source=\"{name}\"}} {v}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP ternflow_job_latency_seconds Claim to ack, for jobs this server leased and acked."
        );
        let _ = writeln!(out, "# TYPE ternflow_job_latency_seconds histogram");
        let counts = self.job_latency_counts();
        let mut cum = 0;
        for (le, c) in JOB_LATENCY_BUCKETS_MS.iter().zip(&counts) {
            cum += c;
            let _ = writeln!(
                out,
                "ternflow_job_latency_seconds_bucket{{le=\"{}\"}} {cum}",
                le / 1_000.0
            );
        }
        let total: u64 = counts.iter().sum();
        let _ = writeln!(
            out,
            "ternflow_job_latency_seconds_bucket{{le=\"+Inf\"}} {total}"
        );
        let _ = writeln!(
            out,
            "ternflow_job_latency_seconds_sum {}",
            self.job_latency_sum_ms.load(Ordering::Relaxed) as f64 / 1e3
        );
        let _ = writeln!(out, "ternflow_job_latency_seconds_count {total}");
        self.families.render_into(&mut out, now_ms);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.add(|c| &c.jobs_acked, 3);
        m.observe_embed(3.0);
        let text = m.render(
            Some(QueueDepth {
                ready: 4,
                ..Default::default()
            }),
            1,
            0,
        );
        assert!(text.contains("ternflow_queue_ready 4\n"));
        assert!(text.contains("ternflow_jobs_acked_total 3\n"));
        // A store that could not say: the queue's gauges are absent, the rest is there.
        let blind = m.render(None, 1, 0);
        assert!(!blind.contains("ternflow_queue_ready"), "{blind}");
        assert!(!blind.contains("ternflow_dead_letters"), "{blind}");
        assert!(blind.contains("ternflow_jobs_acked_total 3\n"));
        assert!(blind.contains("ternflow_locks_held 1\n"));
        assert!(text.contains("ternflow_embed_latency_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("ternflow_embed_latency_seconds_bucket{le=\"0.002\"} 0\n"));
    }

    #[test]
    fn job_latency_and_sources() {
        let m = Metrics::default();
        m.jobs_claimed(["a", "b", "c"], 1_000);
        m.job_acked("a", ResultSource::Engine, 1_004);
        m.job_acked("b", ResultSource::Local, 1_400);
        // Acked here but leased elsewhere: counted by source, no latency.
        m.job_acked("x", ResultSource::Remote, 1_400);
        assert_eq!(m.acked_by_source(), [1, 0, 1, 1]);
        let counts = m.job_latency_counts();
        assert_eq!(counts.iter().sum::<u64>(), 2);
        assert_eq!(counts[0], 1, "4 ms is in the first bucket (≤ 5 ms)");
        assert_eq!(counts[7], 1, "400 ms is in the ≤ 500 ms bucket");
        let text = m.render(Some(QueueDepth::default()), 0, 2_000);
        assert!(text.contains("ternflow_jobs_acked_by_source_total{source=\"local\"} 1\n"));
        assert!(text.contains("ternflow_job_latency_seconds_bucket{le=\"0.5\"} 2\n"));
        assert!(
            text.contains("ternflow_job_latency_seconds_sum 0.404\n"),
            "{text}"
        );
        assert!(
            text.contains("ternflow_job_latency_seconds_count 2\n"),
            "{text}"
        );
    }

    #[test]
    fn quantiles_interpolate_inside_a_bucket() {
        let bounds = [10.0, 20.0, 40.0];
        assert_eq!(quantile(&bounds, &[0, 0, 0, 0], 0.5), None);
        // 10 observations in (10, 20]: the median is halfway through that bucket.
        assert_eq!(quantile(&bounds, &[0, 10, 0, 0], 0.5), Some(15.0));
        let p99 = quantile(&bounds, &[5, 5, 0, 0], 0.99).unwrap();
        assert!((p99 - 19.8).abs() < 1e-9, "{p99}");
        // The overflow bucket answers the last bound.
        assert_eq!(quantile(&bounds, &[0, 0, 0, 3], 0.5), Some(40.0));
    }

    #[test]
    fn runtimes_from_user_agents() {
        let ua = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) \
                  HeadlessChrome/156.0.7000.0 Safari/537.36";
        assert_eq!(runtime_of(ua), "HeadlessChrome 156");
        assert_eq!(runtime_of("node"), "Node");
        assert_eq!(runtime_of(""), "native");
        assert_eq!(runtime_of("reqwest/0.12"), "native");
    }

    #[test]
    fn ack_rate_window() {
        let m = Metrics::default();
        m.record_acks(1_000, 60);
        m.record_acks(30_000, 60);
        assert_eq!(m.ack_rate(31_000), 2.0);
        assert_eq!(m.ack_rate(70_000), 1.0);
        assert_eq!(m.ack_rate(200_000), 0.0);
    }
}
