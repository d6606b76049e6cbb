//! The labelled families an operator's alerts are written on (`deploy/prometheus/alerts.yml`),
//! typed and rendered by the `prometheus` crate: store operation latency and errors by
//! operation, lock waits and waiters per contended key (the stampede signal), nacks and dead
//! letters by reason, SSE clients and disconnects, claims waiting in long polls.
//!
//! Every label value comes from a closed set (a store operation's name, an [`ErrorCode`], an
//! outcome): never a job id, a text, a key or a worker's free-form word.
//!
//! Why the `prometheus` crate and not `prometheus-client`: the latter writes only OpenMetrics
//! text, whose counter families (`# TYPE x counter` over samples `x_total`) Prometheus 2.42's
//! `promtool check metrics` misreads as untyped ones without help (prometheus/client_rust#51);
//! the former writes the classic text format the rest of `/metrics` is in.

use prometheus::{
    Encoder as _, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    Opts, Registry, TextEncoder,
};
use ternflow_core::ErrorCode;

use super::contention::{Contention, Ended};

/// Store operation latency buckets (seconds): a local SQLite write is tens of µs, a Redis round
/// trip a few hundred, a sick store seconds.
const STORE_BUCKETS: [f64; 14] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];
/// Lock wait buckets (seconds): first refusal on a key → its next grant.
const WAIT_BUCKETS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Waiters per contended key.
const WAITER_BUCKETS: [f64; 10] = [1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0];

/// What became of a nack, for [`Families::nacked`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NackOutcome {
    /// Re-queued with a backoff.
    Retry,
    /// Dead-lettered.
    Dead,
    /// The server embedded the job itself.
    Done,
}

impl NackOutcome {
    fn as_str(self) -> &'static str {
        match self {
            NackOutcome::Retry => "retry",
            NackOutcome::Dead => "dead",
            NackOutcome::Done => "done",
        }
    }
}

/// A worker-sent error code as a label: one of the protocol's [`ErrorCode`]s, else `other`
/// (a worker's word is free-form; a label set must stay closed).
pub fn reason_label(code: &str) -> &'static str {
    ErrorCode::ALL
        .iter()
        .map(|c| c.as_str())
        .find(|c| *c == code)
        .unwrap_or("other")
}

/// See the [module docs](self).
#[derive(Debug)]
pub struct Families {
    registry: Registry,
    store_seconds: HistogramVec,
    store_errors: IntCounterVec,
    lock_wait: Histogram,
    lock_waiters: Histogram,
    lock_waiters_now: IntGauge,
    lock_keys_contended: IntGauge,
    nacks: IntCounterVec,
    dead_letters: IntCounterVec,
    sse_clients: IntGauge,
    sse_disconnects: IntCounter,
    long_polls: IntGauge,
    /// The open contention episodes.
    pub contention: Contention,
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace("ternflow")
}

fn hist(name: &str, help: &str, buckets: &[f64]) -> HistogramOpts {
    HistogramOpts::new(name, help)
        .namespace("ternflow")
        .buckets(buckets.to_vec())
}

impl Default for Families {
    fn default() -> Self {
        // The names and label sets below are fixed and distinct: building them cannot fail.
        let f = Families {
            registry: Registry::new(),
            store_seconds: HistogramVec::new(
                hist(
                    "store_op_duration_seconds",
                    "Store operations' latency, by operation (the store's method name).",
                    &STORE_BUCKETS,
                ),
                &["op"],
            )
            .expect("valid histogram"),
            store_errors: IntCounterVec::new(
                opts(
                    "store_op_errors_total",
                    "Store operations that failed, by operation.",
                ),
                &["op"],
            )
            .expect("valid counter"),
            lock_wait: Histogram::with_opts(hist(
                "lock_wait_seconds",
                "Contended single-flight locks: the first refused request on a key to the key's next grant.",
                &WAIT_BUCKETS,
            ))
            .expect("valid histogram"),
            lock_waiters: Histogram::with_opts(hist(
                "lock_waiters",
                "Contended single-flight locks: distinct callers refused on one key before its next grant.",
                &WAITER_BUCKETS,
            ))
            .expect("valid histogram"),
            lock_waiters_now: IntGauge::with_opts(opts(
                "lock_waiters_max",
                "The most distinct callers waiting on one single-flight lock now (the stampede signal).",
            ))
            .expect("valid gauge"),
            lock_keys_contended: IntGauge::with_opts(opts(
                "lock_keys_contended",
                "Keys whose single-flight lock has callers waiting now.",
            ))
            .expect("valid gauge"),
            nacks: IntCounterVec::new(
                opts(
                    "nacks_by_reason_total",
                    "Nacks applied, by the error code the worker sent (other: not a protocol code) and what became of the job.",
                ),
                &["reason", "outcome"],
            )
            .expect("valid counter"),
            dead_letters: IntCounterVec::new(
                opts(
                    "dead_letters_by_reason_total",
                    "Jobs moved to the dead-letter queue, by the code of their last failure.",
                ),
                &["reason"],
            )
            .expect("valid counter"),
            sse_clients: IntGauge::with_opts(opts(
                "sse_clients",
                "Server-Sent Events streams open now.",
            ))
            .expect("valid gauge"),
            sse_disconnects: IntCounter::with_opts(opts(
                "sse_disconnects_total",
                "Server-Sent Events streams that ended (client gone, lagging, or shutdown).",
            ))
            .expect("valid counter"),
            long_polls: IntGauge::with_opts(opts(
                "claim_long_polls",
                "Claims waiting in a long poll now.",
            ))
            .expect("valid gauge"),
            contention: Contention::default(),
        };
        let r = &f.registry;
        for c in [
            Box::new(f.store_seconds.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(f.store_errors.clone()),
            Box::new(f.lock_wait.clone()),
            Box::new(f.lock_waiters.clone()),
            Box::new(f.lock_waiters_now.clone()),
            Box::new(f.lock_keys_contended.clone()),
            Box::new(f.nacks.clone()),
            Box::new(f.dead_letters.clone()),
            Box::new(f.sse_clients.clone()),
            Box::new(f.sse_disconnects.clone()),
            Box::new(f.long_polls.clone()),
        ] {
            r.register(c).expect("distinct metric names");
        }
        f
    }
}

impl Families {
    /// One store operation took `seconds`; `ok: false` when it failed.
    pub fn store_op(&self, op: &'static str, seconds: f64, ok: bool) {
        self.store_seconds.with_label_values(&[op]).observe(seconds);
        // Made at 0 with the operation's first call, so `rate()` sees its first failure.
        let errors = self.store_errors.with_label_values(&[op]);
        if !ok {
            errors.inc();
        }
    }

    /// A lock request on `key` was refused: see [`Contention::refused`].
    pub fn lock_refused(&self, key: &str, caller: Option<&str>, held_until: u64, now: u64) {
        self.contention.refused(key, caller, held_until, now);
    }

    /// The lock on `key` was released or granted: a contention episode on it ends and is
    /// observed.
    pub fn lock_freed(&self, key: &str, now: u64) {
        if let Some(Ended { wait_ms, waiters }) = self.contention.freed(key, now) {
            self.lock_wait.observe(wait_ms as f64 / 1_000.0);
            self.lock_waiters.observe(waiters as f64);
        }
    }

    /// A nack was applied: its worker-sent `code` and what became of the job.
    pub fn nacked(&self, code: &str, outcome: NackOutcome) {
        self.nacks
            .with_label_values(&[reason_label(code), outcome.as_str()])
            .inc();
    }

    /// `n` jobs were dead-lettered, their last failure's code `code`.
    pub fn dead_lettered(&self, code: &str, n: u64) {
        if n > 0 {
            self.dead_letters
                .with_label_values(&[reason_label(code)])
                .inc_by(n);
        }
    }

    /// An SSE stream opened: the guard counts it until dropped.
    pub fn sse_client(&self) -> GaugeGuard {
        GaugeGuard::new(self.sse_clients.clone(), Some(self.sse_disconnects.clone()))
    }

    /// A claim started to wait: the guard counts it until dropped.
    pub fn long_poll(&self) -> GaugeGuard {
        GaugeGuard::new(self.long_polls.clone(), None)
    }

    /// Appends the families in Prometheus text format; the contention gauges are read at
    /// `now`.
    pub fn render_into(&self, out: &mut String, now: u64) {
        let (keys, most) = self.contention.open(now);
        self.lock_keys_contended.set(keys as i64);
        self.lock_waiters_now.set(most as i64);
        let mut buf = Vec::new();
        if TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .is_ok()
        {
            out.push_str(&String::from_utf8_lossy(&buf));
        }
    }
}

/// Holds one unit of a gauge while alive (an open stream, a waiting claim); on drop gives it
/// back and counts the end.
#[derive(Debug)]
pub struct GaugeGuard {
    gauge: IntGauge,
    ended: Option<IntCounter>,
}

impl GaugeGuard {
    fn new(gauge: IntGauge, ended: Option<IntCounter>) -> Self {
        gauge.inc();
        GaugeGuard { gauge, ended }
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.gauge.dec();
        if let Some(c) = &self.ended {
            c.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(f: &Families) -> String {
        let mut s = String::new();
        f.render_into(&mut s, 0);
        s
    }

    #[test]
    fn labels_come_from_closed_sets() {
        assert_eq!(reason_label("lease_expired"), "lease_expired");
        assert_eq!(reason_label("job-12345 failed: out of memory"), "other");
        let f = Families::default();
        f.nacked("engine_failed", NackOutcome::Retry);
        f.nacked("anything a worker likes", NackOutcome::Dead);
        f.dead_lettered("lease_expired", 3);
        f.dead_lettered("lease_expired", 0);
        let text = rendered(&f);
        assert!(
            text.contains("ternflow_nacks_by_reason_total{outcome=\"dead\",reason=\"other\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("ternflow_dead_letters_by_reason_total{reason=\"lease_expired\"} 3\n"),
            "{text}"
        );
    }

    #[test]
    fn guards_count_while_alive_and_ends_after() {
        let f = Families::default();
        let a = f.sse_client();
        let b = f.sse_client();
        let p = f.long_poll();
        let text = rendered(&f);
        assert!(text.contains("ternflow_sse_clients 2\n"), "{text}");
        assert!(text.contains("ternflow_claim_long_polls 1\n"), "{text}");
        drop((a, p));
        let text = rendered(&f);
        assert!(text.contains("ternflow_sse_clients 1\n"), "{text}");
        assert!(
            text.contains("ternflow_sse_disconnects_total 1\n"),
            "{text}"
        );
        assert!(text.contains("ternflow_claim_long_polls 0\n"), "{text}");
        drop(b);
    }

    #[test]
    fn a_contended_key_shows_its_waiters_then_its_wait() {
        let f = Families::default();
        for w in ["a", "b", "c"] {
            f.lock_refused("k", Some(w), 5_000, 1_000);
        }
        let mut text = String::new();
        f.render_into(&mut text, 1_500);
        assert!(text.contains("ternflow_lock_waiters_max 3\n"), "{text}");
        assert!(text.contains("ternflow_lock_keys_contended 1\n"), "{text}");
        f.lock_freed("k", 1_250);
        let mut text = String::new();
        f.render_into(&mut text, 1_500);
        assert!(text.contains("ternflow_lock_waiters_max 0\n"), "{text}");
        assert!(
            text.contains("ternflow_lock_wait_seconds_bucket{le=\"0.25\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("ternflow_lock_waiters_bucket{le=\"3\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("ternflow_lock_waiters_bucket{le=\"2\"} 0\n"),
            "{text}"
        );
    }

    #[test]
    fn store_ops_are_timed_by_operation() {
        let f = Families::default();
        f.store_op("claim", 0.003, true);
        f.store_op("claim", 0.3, false);
        let text = rendered(&f);
        assert!(
            text.contains("ternflow_store_op_duration_seconds_count{op=\"claim\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "ternflow_store_op_duration_seconds_bucket{op=\"claim\",le=\"0.005\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("ternflow_store_op_errors_total{op=\"claim\"} 1\n"),
            "{text}"
        );
    }
}
