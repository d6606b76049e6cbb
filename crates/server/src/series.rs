//! The dashboard's history: a ring of stats samples, one every
//! [`Config::stats_sample_ms`](crate::Config::stats_sample_ms), so that charts have the last
//! minutes on load, and the alerts raised between samples (leaked locks, dead letters, breakers
//! opening).
//!
//! Every figure of a sample is over the interval since the previous one, from what this server
//! saw: its acks (jobs/s; local and remote hits and engine vs backend by each ack's result
//! source; claim → ack latency of the jobs it leased and acked), the queue depth of the default
//! tenant's store (shared by every server on one Redis), and the snapshots its workers pushed
//! (in flight, engine latency).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde::Serialize;
use ternflow_core::protocol::QueueDepth;

use crate::metrics::{quantile, Metrics, WorkerRow, JOB_LATENCY_BUCKETS_MS};

/// Alerts kept (the oldest are dropped).
pub const MAX_ALERTS: usize = 100;

/// One point of every chart.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Sample {
    /// When it was taken (Unix ms).
    pub t: u64,
    /// Jobs ready to claim.
    pub ready: u64,
    /// Jobs waiting for a delay or a retry backoff.
    pub delayed: u64,
    /// Jobs leased to workers.
    pub leased: u64,
    /// Dead letters.
    pub dead: u64,
    /// Jobs acked through this server per second over the interval.
    pub jobs_per_s: f64,
    /// Share of the interval's acks whose vector came from the worker's local cache.
    pub local_hit_ratio: Option<f64>,
    /// Share of the interval's acks whose vector came from the remote cache.
    pub remote_hit_ratio: Option<f64>,
    /// Of the interval's acks that were embedded (not cache hits), the share the worker's own
    /// engine computed; the rest came from the backend (`POST /v1/embed`).
    pub engine_share: Option<f64>,
    /// Claim → ack latency, median over the interval (ms).
    pub job_p50_ms: Option<f64>,
    /// Claim → ack latency, 99th percentile over the interval (ms).
    pub job_p99_ms: Option<f64>,
    /// Engine latency median, averaged over the workers that embedded (their histograms, ms).
    pub engine_p50_ms: Option<f64>,
    /// Engine latency 99th percentile, averaged the same way (ms).
    pub engine_p99_ms: Option<f64>,
    /// Workers heard from.
    pub workers: usize,
    /// Jobs in flight inside those workers.
    pub in_flight: f64,
    /// Locks granted here and still live.
    pub locks_held: u64,
}

/// Something an operator should look at.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Alert {
    /// When it was noticed (Unix ms).
    pub t: u64,
    /// `lock_leak`, `dead_letters`, `breaker_open` or `quarantine`.
    pub kind: &'static str,
    /// What happened, in words.
    pub message: String,
}

/// Cumulative values at the previous sample.
#[derive(Debug, Default)]
struct Prev {
    t: u64,
    acked: u64,
    by_source: [u64; 4],
    latency: Vec<u64>,
    lock_leaked: u64,
    dead: u64,
    /// Worker → (engine breaker, backend breaker) gauges.
    breakers: HashMap<String, (f64, f64)>,
}

#[derive(Debug, Default)]
struct Inner {
    samples: VecDeque<Sample>,
    alerts: VecDeque<Alert>,
    prev: Option<Prev>,
}

/// See the [module docs](self).
#[derive(Debug)]
pub struct Series {
    cap: usize,
    inner: Mutex<Inner>,
}

fn ratio(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut n, mut sum) = (0usize, 0.0);
    for x in v {
        n += 1;
        sum += x;
    }
    (n > 0).then(|| sum / n as f64)
}

impl Series {
    /// An empty ring holding at most `cap` samples.
    pub fn new(cap: usize) -> Self {
        Series {
            cap: cap.max(1),
            inner: Mutex::default(),
        }
    }

    /// Takes a sample at `now` from `metrics`, the queue `depth` and the live `locks_held`,
    /// and raises the alerts the change since the previous sample calls for.
    pub fn record(
        &self,
        now: u64,
        depth: QueueDepth,
        metrics: &Metrics,
        workers: Vec<crate::workers::WorkerRow>,
        locks_held: u64,
    ) {
        let counters: HashMap<&str, u64> = metrics
            .counters
            .list()
            .into_iter()
            .map(|(k, _, v)| (k, v))
            .collect();
        let acked = counters.get("jobs_acked").copied().unwrap_or(0);
        let lock_leaked = counters.get("lock_leaked").copied().unwrap_or(0);
        let by_source = metrics.acked_by_source();
        let latency = metrics.job_latency_counts();
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let prev = g.prev.take().unwrap_or(Prev {
            t: now,
            acked,
            by_source,
            latency: latency.clone(),
            lock_leaked,
            dead: depth.dead,
            breakers: HashMap::new(),
        });
        let d: [u64; 4] = std::array::from_fn(|i| by_source[i].saturating_sub(prev.by_source[i]));
        let window: Vec<u64> = latency
            .iter()
            .zip(prev.latency.iter().chain(std::iter::repeat(&0)))
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        let secs = now.saturating_sub(prev.t) as f64 / 1_000.0;
        let total = d.iter().sum();
        let gauge = |w: &WorkerRow, k: &str| w.snapshot.gauges.get(k).copied();
        let embedding =
            |w: &&WorkerRow| w.snapshot.counters.get("engine_embeds").unwrap_or(&0) > &0;
        let sample = Sample {
            t: now,
            ready: depth.ready,
            delayed: depth.delayed,
            leased: depth.leased,
            dead: depth.dead,
            jobs_per_s: if secs > 0.0 {
                acked.saturating_sub(prev.acked) as f64 / secs
            } else {
                0.0
            },
            local_hit_ratio: ratio(d[2], total),
            remote_hit_ratio: ratio(d[3], total),
            engine_share: ratio(d[0], d[0] + d[1]),
            job_p50_ms: quantile(&JOB_LATENCY_BUCKETS_MS, &window, 0.5),
            job_p99_ms: quantile(&JOB_LATENCY_BUCKETS_MS, &window, 0.99),
            engine_p50_ms: mean(
                workers
                    .iter()
                    .filter(embedding)
                    .filter_map(|w| gauge(w, "engine_latency_p50_ms")),
            ),
            engine_p99_ms: mean(
                workers
                    .iter()
                    .filter(embedding)
                    .filter_map(|w| gauge(w, "engine_latency_p99_ms")),
            ),
            workers: workers.len(),
            in_flight: workers.iter().filter_map(|w| gauge(w, "in_flight")).sum(),
            locks_held,
        };
        let mut alerts = Vec::new();
        if lock_leaked > prev.lock_leaked {
            alerts.push(Alert {
                t: now,
                kind: "lock_leak",
                message: format!(
                    "{} lock(s) expired without being released: their holder died or stalled \
                     (the key's next writer needs a new lock; a cache write with the old fence \
                     is refused)",
                    lock_leaked - prev.lock_leaked
                ),
            });
        }
        if depth.dead > prev.dead {
            alerts.push(Alert {
                t: now,
                kind: "dead_letters",
                message: format!(
                    "{} job(s) dead-lettered ({} in the dead-letter queue)",
                    depth.dead - prev.dead,
                    depth.dead
                ),
            });
        }
        let mut breakers = HashMap::new();
        for w in &workers {
            let now_b = (
                gauge(w, "engine_breaker").unwrap_or(0.0),
                gauge(w, "backend_breaker").unwrap_or(0.0),
            );
            let was = prev.breakers.get(&w.snapshot.worker).copied();
            for (name, is, before) in [
                ("engine", now_b.0, was.map(|b| b.0)),
                ("backend", now_b.1, was.map(|b| b.1)),
            ] {
                if is == 1.0 && before != Some(1.0) {
                    alerts.push(Alert {
                        t: now,
                        kind: "breaker_open",
                        message: format!("worker {}: {name} breaker open", w.snapshot.worker),
                    });
                }
            }
            breakers.insert(w.snapshot.worker.clone(), now_b);
        }
        for a in alerts {
            tracing::warn!(kind = a.kind, message = %a.message, "alert");
            g.alerts.push_back(a);
        }
        while g.alerts.len() > MAX_ALERTS {
            g.alerts.pop_front();
        }
        g.samples.push_back(sample);
        while g.samples.len() > self.cap {
            g.samples.pop_front();
        }
        g.prev = Some(Prev {
            t: now,
            acked,
            by_source,
            latency,
            lock_leaked,
            dead: depth.dead,
            breakers,
        });
    }

    /// The samples taken after `t` (all of them for 0), oldest first.
    pub fn since(&self, t: u64) -> Vec<Sample> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.samples.iter().filter(|s| s.t > t).cloned().collect()
    }

    /// Raises an alert now (a quarantine), not waiting for the next sample.
    pub fn alert(&self, t: u64, kind: &'static str, message: String) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.alerts.push_back(Alert { t, kind, message });
        while g.alerts.len() > MAX_ALERTS {
            g.alerts.pop_front();
        }
    }

    /// The alerts kept, oldest first.
    pub fn alerts(&self) -> Vec<Alert> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.alerts.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ternflow_core::protocol::{ResultSource, WorkerMetrics};

    fn depth(ready: u64, dead: u64) -> QueueDepth {
        QueueDepth {
            ready,
            dead,
            ..Default::default()
        }
    }

    #[test]
    fn samples_are_over_the_interval_and_the_ring_is_bounded() {
        let m = Metrics::default();
        let s = Series::new(3);
        s.record(1_000, depth(10, 0), &m, Vec::new(), 0);
        let ids: Vec<String> = (0..10).map(|i| format!("j{i}")).collect();
        m.jobs_claimed(ids.iter().map(String::as_str), 1_000);
        for (i, id) in ids.iter().enumerate() {
            let src = match i {
                0..=5 => ResultSource::Engine,
                6 => ResultSource::Backend,
                7 => ResultSource::Local,
                _ => ResultSource::Remote,
            };
            m.add(|c| &c.jobs_acked, 1);
            m.job_acked(id, src, 1_015);
        }
        s.record(3_000, depth(0, 0), &m, Vec::new(), 2);
        let last = s.since(1_000);
        assert_eq!(last.len(), 1);
        let x = &last[0];
        assert_eq!(x.jobs_per_s, 5.0, "10 acks in 2 s");
        assert_eq!(x.local_hit_ratio, Some(0.1));
        assert_eq!(x.remote_hit_ratio, Some(0.2));
        assert_eq!(x.engine_share, Some(6.0 / 7.0));
        let p50 = x.job_p50_ms.unwrap();
        assert!((10.0..=20.0).contains(&p50), "15 ms latencies: {p50}");
        assert_eq!(x.locks_held, 2);
        // The next interval has no acks: no ratios, no latency.
        s.record(4_000, depth(0, 0), &m, Vec::new(), 0);
        let x = s.since(3_000).pop().unwrap();
        assert_eq!(
            (x.jobs_per_s, x.local_hit_ratio, x.job_p50_ms),
            (0.0, None, None)
        );
        s.record(5_000, depth(0, 0), &m, Vec::new(), 0);
        assert_eq!(s.since(0).len(), 3, "the ring keeps 3");
    }

    #[test]
    fn alerts_for_leaked_locks_dead_letters_and_open_breakers() {
        let m = Metrics::default();
        let s = Series::new(10);
        s.record(1_000, depth(0, 0), &m, Vec::new(), 0);
        assert!(s.alerts().is_empty());
        m.add(|c| &c.lock_leaked, 2);
        let mut snap = WorkerMetrics {
            worker: "w1".into(),
            ..Default::default()
        };
        snap.gauges.insert("backend_breaker".into(), 1.0);
        let table = crate::workers::WorkerTable::default();
        table
            .push(snap, "", "v1", 1_500, crate::workers::Bounds::fleet(10))
            .unwrap();
        s.record(2_000, depth(0, 3), &m, table.rows(2_000), 0);
        let kinds: Vec<_> = s.alerts().iter().map(|a| a.kind).collect();
        assert_eq!(kinds, ["lock_leak", "dead_letters", "breaker_open"]);
        assert!(s.alerts()[0].message.starts_with("2 lock(s)"));
        // Nothing new: no new alert (the breaker stays open, and was reported once).
        s.record(3_000, depth(0, 3), &m, table.rows(3_000), 0);
        assert_eq!(s.alerts().len(), 3);
    }
}
