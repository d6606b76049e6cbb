//! The metrics registry: counters, the embed latency histogram, the ack rate and worker-pushed
//! snapshots, rendered as Prometheus text (exposition format 0.0.4) by hand.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use ternflow_core::protocol::{QueueDepth, WorkerMetrics};

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
    jobs_nacked: "Nacks received.",
    jobs_retried: "Jobs scheduled for re-delivery after a nack.",
    jobs_dead: "Jobs moved to the dead-letter queue.",
    jobs_redriven: "Dead letters re-queued.",
    leases_expired: "Leases that expired and were re-delivered.",
    leases_lost: "Heartbeats, acks and nacks refused for a stale token.",
    leases_released: "Leases handed back by stopping workers (no attempt used).",
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
    embed_requests: "Backend embed requests served.",
    embed_texts: "Texts embedded by the backend.",
    embed_rejected: "Backend embed requests refused because the queue was full.",
}

/// Upper bounds (ms) of the embed latency histogram buckets.
pub const LATENCY_BUCKETS_MS: [f64; 12] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1_000.0, 2_000.0, 5_000.0,
];

const MAX_WORKERS: usize = 1_000;
/// A worker that has not reported for this long drops out of the table (ms).
pub const WORKER_QUIET_MS: u64 = 5 * 60_000;
const MAX_SERIES_PER_WORKER: usize = 64;

/// See the [module docs](self).
#[derive(Debug, Default)]
pub struct Metrics {
    /// Counters.
    pub counters: Counters,
    latency_buckets: [AtomicU64; 12],
    latency_count: AtomicU64,
    latency_sum_us: AtomicU64,
    acks_per_second: Mutex<VecDeque<(u64, u64)>>,
    /// Worker name → (latest snapshot, when it arrived).
    workers: Mutex<BTreeMap<String, (WorkerMetrics, u64)>>,
}

fn inc(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Metrics {
    /// Adds `n` to a counter.
    pub fn add(&self, counter: impl Fn(&Counters) -> &AtomicU64, n: u64) {
        inc(counter(&self.counters), n);
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

    /// Folds in a worker's snapshot (replacing its previous one). Bounded: at most 1 000
    /// workers and 64 series each; names are reduced to `[a-z0-9_]`. Snapshots older than
    /// [`WORKER_QUIET_MS`] are dropped; when the table is still full, the worker heard from
    /// least recently makes room, so a new worker is never refused.
    pub fn push_worker(&self, mut snap: WorkerMetrics, now_ms: u64) {
        snap.worker = snap.worker.chars().take(64).collect();
        snap.counters = snap
            .counters
            .into_iter()
            .take(MAX_SERIES_PER_WORKER)
            .map(|(k, v)| (metric_name(&k), v))
            .collect();
        snap.gauges = snap
            .gauges
            .into_iter()
            .filter(|(_, v)| v.is_finite())
            .take(MAX_SERIES_PER_WORKER)
            .map(|(k, v)| (metric_name(&k), v))
            .collect();
        let mut w = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        if w.len() >= MAX_WORKERS && !w.contains_key(&snap.worker) {
            w.retain(|_, (_, seen)| seen.saturating_add(WORKER_QUIET_MS) > now_ms);
            if w.len() >= MAX_WORKERS {
                let oldest = w
                    .iter()
                    .min_by_key(|(_, (_, seen))| *seen)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    w.remove(&k);
                }
            }
        }
        w.insert(snap.worker.clone(), (snap, now_ms));
    }

    /// The latest snapshot of every worker heard from within [`WORKER_QUIET_MS`].
    pub fn workers(&self, now_ms: u64) -> BTreeMap<String, WorkerMetrics> {
        let mut w = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        w.retain(|_, (_, seen)| seen.saturating_add(WORKER_QUIET_MS) > now_ms);
        w.iter().map(|(k, (m, _))| (k.clone(), m.clone())).collect()
    }

    /// Prometheus text exposition.
    pub fn render(&self, depth: QueueDepth, locks_held: u64, now_ms: u64) -> String {
        let mut out = String::with_capacity(4_096);
        let mut gauge = |name: &str, help: &str, v: f64| {
            let _ = writeln!(out, "# HELP ternflow_{name} {help}");
            let _ = writeln!(out, "# TYPE ternflow_{name} gauge");
            let _ = writeln!(out, "ternflow_{name} {v}");
        };
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
        let workers = self.workers(now_ms);
        if !workers.is_empty() {
            let _ = writeln!(
                out,
                "# HELP ternflow_worker_counter Counters pushed by workers."
            );
            let _ = writeln!(out, "# TYPE ternflow_worker_counter counter");
            for w in workers.values() {
                for (k, v) in &w.counters {
                    let _ = writeln!(
                        out,
                        "ternflow_worker_counter{{worker=\"{}\",name=\"{k}\"}} {v}",
                        label(&w.worker)
                    );
                }
            }
            let _ = writeln!(
                out,
                "# HELP ternflow_worker_gauge Gauges pushed by workers."
            );
            let _ = writeln!(out, "# TYPE ternflow_worker_gauge gauge");
            for w in workers.values() {
                for (k, v) in &w.gauges {
                    let _ = writeln!(
                        out,
                        "ternflow_worker_gauge{{worker=\"{}\",name=\"{k}\"}} {v}",
                        label(&w.worker)
                    );
                }
            }
        }
        out
    }
}

fn metric_name(s: &str) -> String {
    let n: String = s
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if n.is_empty() {
        "_".to_owned()
    } else {
        n
    }
}

fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.add(|c| &c.jobs_acked, 3);
        m.observe_embed(3.0);
        let mut snap = WorkerMetrics {
            worker: "w\"1".into(),
            ..Default::default()
        };
        snap.counters.insert("Jobs Done".into(), 7);
        snap.gauges.insert("in_flight".into(), 2.0);
        m.push_worker(snap, 0);
        let text = m.render(
            QueueDepth {
                ready: 4,
                ..Default::default()
            },
            1,
            0,
        );
        assert!(text.contains("ternflow_queue_ready 4\n"));
        assert!(text.contains("ternflow_jobs_acked_total 3\n"));
        assert!(text.contains("ternflow_embed_latency_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("ternflow_embed_latency_seconds_bucket{le=\"0.002\"} 0\n"));
        assert!(text.contains("ternflow_worker_counter{worker=\"w\\\"1\",name=\"jobs_done\"} 7\n"));
        assert!(text.contains("ternflow_worker_gauge{worker=\"w\\\"1\",name=\"in_flight\"} 2\n"));
    }

    #[test]
    fn worker_table_is_bounded_and_forgets_quiet_workers() {
        let m = Metrics::default();
        let snap = |name: String| WorkerMetrics {
            worker: name,
            ..Default::default()
        };
        for i in 0..MAX_WORKERS {
            m.push_worker(snap(format!("w{i}")), i as u64);
        }
        // The 1 001st worker is accepted; the one heard from least recently makes room.
        m.push_worker(snap("late".into()), 5_000);
        let w = m.workers(5_000);
        assert_eq!(w.len(), MAX_WORKERS);
        assert!(w.contains_key("late"));
        assert!(!w.contains_key("w0"));
        // After a quiet period only the workers still reporting are listed.
        m.push_worker(snap("late".into()), 10 * WORKER_QUIET_MS);
        let w = m.workers(10 * WORKER_QUIET_MS);
        assert_eq!(w.keys().collect::<Vec<_>>(), ["late"]);
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
