//! The job deliveries this server traces. While spans are exported (`ternflow serve` with an
//! OTLP endpoint), a job's trace holds, besides the spans of the requests made for it:
//!
//! - a `deliver job` span per delivery, opened by the claim that hands the job out (linked to
//!   the claim's own span, which is in the worker's trace) and ended by the ack, nack or release
//!   that ends the delivery; its parent is the enqueue request's span, whose id is kept with the
//!   job's trace id ([`stored_trace`]). The claim's `traceparent` names it, so the worker's
//!   requests for the job (heartbeats, cache, locks, the ack) are its children;
//! - the worker's own steps (cache reads, lock waits, engine or backend calls), reported with
//!   the ack ([`JobTiming`]) and exported as children of the delivery, placed back from the
//!   ack's arrival (durations only: no clock has to agree with another).
//!
//! A worker's report is untrusted: it is taken only with an ack the store accepted (the
//! caller held the lease) and only under the delivery this server opened for that very job
//! (tenant, job id and the exact `traceparent` it handed out), so a worker can place spans in no
//! trace but its own job's; steps are bounded in number and inside the run, which is bounded
//! by the delivery's span. Open deliveries are bounded (an LRU of [`MAX_OPEN`]); one claimed
//! through another server, or before a restart, has its report dropped.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use lru::LruCache;
use opentelemetry::global::BoxedSpan;
use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags,
    TraceId, TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use ternflow_core::protocol::JobTiming;

/// Deliveries open at once, at most (each an unfinished span: about a kilobyte).
pub(crate) const MAX_OPEN: usize = 16_384;

/// The tracer of every span this module exports.
const TRACER: &str = "ternflow-server";

/// This request's span, when it is exported: an OpenTelemetry layer is installed and the span
/// is sampled.
pub(crate) fn traced() -> Option<SpanContext> {
    let cx = tracing_opentelemetry::OpenTelemetrySpanExt::context(&tracing::Span::current());
    let sc = cx.span().span_context().clone();
    (sc.is_valid() && sc.is_sampled()).then_some(sc)
}

/// What an enqueue keeps as a job's trace: the trace id, and (`-`) the enqueue request's span
/// id when that span is exported, the delivery spans' parent. Stores keep it as it is.
pub(crate) fn stored_trace(trace_id: &str, enqueue_span: Option<&SpanContext>) -> String {
    match enqueue_span {
        Some(sc) => format!("{trace_id}-{}", sc.span_id()),
        None => trace_id.to_owned(),
    }
}

/// A stored trace's trace id and enqueue span id ([`stored_trace`]).
pub(crate) fn split_trace(stored: &str) -> (&str, Option<&str>) {
    match stored.split_once('-') {
        Some((t, e)) => (t, Some(e)),
        None => (stored, None),
    }
}

/// How a delivery ended, for its span's `outcome` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Acked (the result is taken, or counted towards agreement).
    Acked,
    /// Nacked: delivered again later.
    Retried,
    /// Nacked past its attempts, or as not retryable: a dead letter.
    DeadLettered,
    /// Nacked, and the server embedded the text itself.
    DoneByServer,
    /// Handed back by a stopping worker.
    Released,
    /// Finished by the claim from the remote cache (never reaches the worker's pipeline).
    ResolvedAtClaim,
}

impl Ending {
    fn as_str(self) -> &'static str {
        match self {
            Ending::Acked => "acked",
            Ending::Retried => "retried",
            Ending::DeadLettered => "dead_lettered",
            Ending::DoneByServer => "done_by_server",
            Ending::Released => "released",
            Ending::ResolvedAtClaim => "resolved_at_claim",
        }
    }
}

struct Open {
    span: BoxedSpan,
    /// The `traceparent` the claim handed out for this delivery.
    traceparent: String,
    opened: SystemTime,
}

/// The deliveries open on this server, by (tenant, job id).
pub(crate) struct Deliveries {
    open: Mutex<LruCache<(String, String), Open>>,
    /// Whether any was ever opened (no lock taken on an ack while nothing is traced).
    any: AtomicBool,
}

impl Default for Deliveries {
    fn default() -> Self {
        Deliveries {
            open: Mutex::new(LruCache::new(
                NonZeroUsize::new(MAX_OPEN).expect("a positive bound"),
            )),
            any: AtomicBool::new(false),
        }
    }
}

impl std::fmt::Debug for Deliveries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.open.lock().map_or(0, |o| o.len());
        f.debug_struct("Deliveries").field("open", &n).finish()
    }
}

/// A claimed job, as a delivery span names it.
pub(crate) struct Claim<'a> {
    pub tenant: &'a str,
    pub job: &'a str,
    pub attempt: u32,
    pub worker: &'a str,
    /// The job's stored trace ([`stored_trace`]).
    pub trace: &'a str,
}

impl Deliveries {
    /// Opens the delivery of `claim` under the claim request's span `claim_span`: the span id
    /// the claim's `traceparent` is to name, or `None` (the job's trace was kept without an
    /// enqueue span, or its ids do not parse) and the claim mints one as before.
    pub(crate) fn open(&self, claim: &Claim<'_>, claim_span: &SpanContext) -> Option<SpanId> {
        let (trace_id, enqueue_span) = split_trace(claim.trace);
        let parent = SpanContext::new(
            TraceId::from_hex(trace_id).ok()?,
            SpanId::from_hex(enqueue_span?).ok()?,
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        if !parent.is_valid() {
            return None;
        }
        let tracer = opentelemetry::global::tracer(TRACER);
        let span = tracer
            .span_builder("deliver job")
            .with_kind(SpanKind::Consumer)
            .with_links(vec![Link::with_context(claim_span.clone())])
            .with_attributes(vec![
                KeyValue::new("job", claim.job.to_owned()),
                KeyValue::new("tenant", claim.tenant.to_owned()),
                KeyValue::new("worker", claim.worker.to_owned()),
                KeyValue::new("attempt", i64::from(claim.attempt)),
            ])
            .start_with_context(&tracer, &Context::new().with_remote_span_context(parent));
        let sc = span.span_context().clone();
        // The no-op tracer (no provider installed) records nothing and echoes the parent.
        if !span.is_recording() || !sc.is_valid() {
            return None;
        }
        let open = Open {
            span,
            traceparent: format!("00-{}-{}-01", sc.trace_id(), sc.span_id()),
            opened: SystemTime::now(),
        };
        self.any.store(true, Ordering::Relaxed);
        let old = self
            .open
            .lock()
            .ok()?
            .push((claim.tenant.to_owned(), claim.job.to_owned()), open);
        // A delivery whose lease ran out (it is claimed again), or the oldest past the bound.
        if let Some((_, mut old)) = old {
            old.span
                .set_attribute(KeyValue::new("outcome", "superseded"));
            old.span.end();
        }
        Some(sc.span_id())
    }

    /// Ends the delivery of `tenant`'s `job` (if this server opened it) as `ending`, with the
    /// worker's `timing` exported under it when it names this very delivery; `reporter`: the
    /// worker's identity, recorded on each reported step.
    pub(crate) fn end(
        &self,
        tenant: &str,
        job: &str,
        ending: Ending,
        timing: Option<&JobTiming>,
        reporter: &str,
    ) {
        if !self.any.load(Ordering::Relaxed) {
            return;
        }
        let Some(mut open) = self
            .open
            .lock()
            .ok()
            .and_then(|mut o| o.pop(&(tenant.to_owned(), job.to_owned())))
        else {
            return;
        };
        let now = SystemTime::now();
        if let Some(t) = timing {
            if t.traceparent == open.traceparent {
                report(&open, t, reporter, now);
                open.span.set_attribute(KeyValue::new(
                    "worker.run_us",
                    i64::try_from(t.run_us).unwrap_or(i64::MAX),
                ));
            } else {
                open.span.set_attribute(KeyValue::new(
                    "worker.timing",
                    "refused: it names another delivery",
                ));
            }
        }
        open.span
            .set_attribute(KeyValue::new("outcome", ending.as_str()));
        open.span.end_with_timestamp(now);
    }
}

/// Exports the worker's steps as children of `open`, the run placed to end at `now` (and to
/// start no earlier than the delivery), each step clamped inside the run.
fn report(open: &Open, t: &JobTiming, reporter: &str, now: SystemTime) {
    let longest = now.duration_since(open.opened).unwrap_or_default();
    let run = Duration::from_micros(t.run_us).min(longest);
    let start = now.checked_sub(run).unwrap_or(now);
    let tracer = opentelemetry::global::tracer(TRACER);
    let parent = Context::new().with_remote_span_context(open.span.span_context().clone());
    for s in t.steps.iter().take(JobTiming::MAX_STEPS) {
        let from = Duration::from_micros(s.start_us).min(run);
        let to = from.saturating_add(Duration::from_micros(s.us)).min(run);
        let mut span = tracer
            .span_builder(s.step.span_name())
            .with_kind(SpanKind::Internal)
            .with_start_time(start + from)
            .with_attributes(vec![
                KeyValue::new("reported_by", reporter.to_owned()),
                KeyValue::new("reported_us", i64::try_from(s.us).unwrap_or(i64::MAX)),
            ])
            .start_with_context(&tracer, &parent);
        if s.failed {
            span.set_status(Status::error("failed on the worker"));
        }
        span.end_with_timestamp(start + to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_trace_splits_back() {
        assert_eq!(split_trace("abc"), ("abc", None));
        assert_eq!(split_trace("abc-def"), ("abc", Some("def")));
    }

    #[test]
    fn nothing_is_opened_or_kept_without_a_tracer_provider() {
        // The global provider is the no-op one here: its spans are invalid, nothing is kept.
        let d = Deliveries::default();
        let claim_span = SpanContext::new(
            TraceId::from_hex("11111111111111111111111111111111").unwrap(),
            SpanId::from_hex("2222222222222222").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        let claim = Claim {
            tenant: "t",
            job: "j",
            attempt: 1,
            worker: "w",
            trace: "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        };
        assert!(d.open(&claim, &claim_span).is_none());
        let no_span = Claim {
            trace: "4bf92f3577b34da6a3ce929d0e0e4736",
            ..claim
        };
        assert!(d.open(&no_span, &claim_span).is_none());
        d.end("t", "j", Ending::Acked, None, "w");
    }
}
