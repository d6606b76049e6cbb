//! What each running job's steps took on this worker (cache reads, lock waits, engine or backend
//! calls), sent with its ack as [`JobTiming`] for a tracing server to export as spans. Keyed by
//! the delivery's `traceparent`, which every step of the job is handed anyway; a text resolved
//! outside a queue job (a page's `embed()`) has no entry and records nothing.

use std::cell::RefCell;
use std::collections::HashMap;

use crate::protocol::{JobTiming, Step, StepTiming};

/// One job's steps so far.
#[derive(Debug)]
struct Open {
    start_us: u64,
    steps: Vec<StepTiming>,
}

/// The steps of the jobs running now (at most the loop's concurrency).
#[derive(Debug, Default)]
pub(crate) struct StepLog {
    open: RefCell<HashMap<String, Open>>,
}

impl StepLog {
    /// Starts recording the job whose requests carry `trace`.
    pub(crate) fn begin(&self, trace: &str, now_us: u64) {
        self.open.borrow_mut().insert(
            trace.to_owned(),
            Open {
                start_us: now_us,
                steps: Vec::new(),
            },
        );
    }

    /// Records a step of `trace`'s job from `start_us` to `end_us` (no-op for a trace not
    /// begun, and past [`JobTiming::MAX_STEPS`]).
    pub(crate) fn record(&self, trace: &str, step: Step, start_us: u64, end_us: u64, ok: bool) {
        if let Some(o) = self.open.borrow_mut().get_mut(trace) {
            if o.steps.len() < JobTiming::MAX_STEPS {
                o.steps.push(StepTiming {
                    step,
                    start_us: start_us.saturating_sub(o.start_us),
                    us: end_us.saturating_sub(start_us),
                    failed: !ok,
                });
            }
        }
    }

    /// Whether `trace`'s job is being recorded (a step not recorded need not read the clock).
    pub(crate) fn is_open(&self, trace: &str) -> bool {
        self.open.borrow().contains_key(trace)
    }

    /// The job's account up to `now_us`, for its ack; `traceparent` is the delivery's.
    pub(crate) fn timing(&self, trace: &str, traceparent: &str, now_us: u64) -> Option<JobTiming> {
        self.open.borrow().get(trace).map(|o| JobTiming {
            traceparent: traceparent.to_owned(),
            run_us: now_us.saturating_sub(o.start_us),
            steps: o.steps.clone(),
        })
    }

    /// Forgets `trace`'s job (it ended, however).
    pub(crate) fn end(&self, trace: &str) {
        self.open.borrow_mut().remove(trace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_relative_to_the_job_s_start_and_bounded() {
        let log = StepLog::default();
        log.record("t", Step::Engine, 5, 9, true); // not begun: nothing
        assert!(log.timing("t", "tp", 10).is_none());
        log.begin("t", 1_000);
        log.record("t", Step::LocalCache, 1_010, 1_012, true);
        log.record("t", Step::Engine, 1_020, 4_020, false);
        let t = log.timing("t", "tp", 5_000).unwrap();
        assert_eq!(t.run_us, 4_000);
        assert_eq!(t.traceparent, "tp");
        assert_eq!(
            t.steps,
            [
                StepTiming {
                    step: Step::LocalCache,
                    start_us: 10,
                    us: 2,
                    failed: false
                },
                StepTiming {
                    step: Step::Engine,
                    start_us: 20,
                    us: 3_000,
                    failed: true
                },
            ]
        );
        for _ in 0..40 {
            log.record("t", Step::Lock, 1_100, 1_200, true);
        }
        assert_eq!(
            log.timing("t", "tp", 5_000).unwrap().steps.len(),
            JobTiming::MAX_STEPS
        );
        log.end("t");
        assert!(!log.is_open("t"));
    }
}
