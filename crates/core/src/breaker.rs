//! A circuit breaker: closed → open → half-open → closed.
//!
//! Closed: calls go through; `failure_threshold` consecutive failures open it. Open: calls are
//! refused at once for `open_ms`. Half-open: one trial call at a time is let through; its success
//! closes the breaker, its failure opens it again. Time comes from the caller, so the logic is
//! tested without waiting.

use std::cell::Cell;

/// The breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through.
    Closed,
    /// Calls are refused until the cool-down ends.
    Open,
    /// One trial call is allowed.
    HalfOpen,
}

impl BreakerState {
    /// As a number for gauges: 0 closed, 1 open, 2 half-open.
    pub fn as_gauge(self) -> f64 {
        match self {
            BreakerState::Closed => 0.0,
            BreakerState::Open => 1.0,
            BreakerState::HalfOpen => 2.0,
        }
    }
}

/// A circuit breaker (single-threaded: the worker runs on one thread).
#[derive(Debug)]
pub struct Breaker {
    failure_threshold: u32,
    open_ms: u64,
    failures: Cell<u32>,
    opened_at: Cell<Option<u64>>,
    trial_in_flight: Cell<bool>,
}

impl Breaker {
    /// A closed breaker that opens after `failure_threshold` consecutive failures and stays open
    /// for `open_ms`.
    pub fn new(failure_threshold: u32, open_ms: u64) -> Self {
        Breaker {
            failure_threshold: failure_threshold.max(1),
            open_ms,
            failures: Cell::new(0),
            opened_at: Cell::new(None),
            trial_in_flight: Cell::new(false),
        }
    }

    /// The state at time `now_ms`.
    pub fn state(&self, now_ms: u64) -> BreakerState {
        match self.opened_at.get() {
            None => BreakerState::Closed,
            Some(t) if now_ms < t.saturating_add(self.open_ms) => BreakerState::Open,
            Some(_) => BreakerState::HalfOpen,
        }
    }

    /// Asks to make a call at `now_ms`; `false` means refused (open, or half-open with the trial
    /// already out). A `true` must be followed by [`Breaker::success`] or [`Breaker::failure`].
    pub fn try_acquire(&self, now_ms: u64) -> bool {
        match self.state(now_ms) {
            BreakerState::Closed => true,
            BreakerState::Open => false,
            BreakerState::HalfOpen => !self.trial_in_flight.replace(true),
        }
    }

    /// Records a successful call: closes the breaker.
    pub fn success(&self) {
        self.failures.set(0);
        self.opened_at.set(None);
        self.trial_in_flight.set(false);
    }

    /// Gives back a call allowed by [`Breaker::try_acquire`] that was never made (neither a
    /// success nor a failure of the guarded service).
    pub fn release_trial(&self) {
        self.trial_in_flight.set(false);
    }

    /// Records a failed call at `now_ms`.
    pub fn failure(&self, now_ms: u64) {
        self.trial_in_flight.set(false);
        if self.opened_at.get().is_some() {
            // A failed half-open trial: open again for a full cool-down.
            self.opened_at.set(Some(now_ms));
            return;
        }
        let n = self.failures.get() + 1;
        self.failures.set(n);
        if n >= self.failure_threshold {
            self.opened_at.set(Some(now_ms));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_threshold_and_half_opens_after_cooldown() {
        let b = Breaker::new(3, 1_000);
        for t in 0..2 {
            assert!(b.try_acquire(t));
            b.failure(t);
        }
        assert_eq!(b.state(2), BreakerState::Closed);
        assert!(b.try_acquire(2));
        b.failure(2);
        assert_eq!(b.state(3), BreakerState::Open);
        assert!(!b.try_acquire(500));
        assert_eq!(b.state(1_002), BreakerState::HalfOpen);
        assert!(b.try_acquire(1_002), "one trial");
        assert!(!b.try_acquire(1_003), "only one trial at a time");
        b.success();
        assert_eq!(b.state(1_004), BreakerState::Closed);
    }

    #[test]
    fn failed_trial_reopens_for_a_full_cooldown() {
        let b = Breaker::new(1, 100);
        assert!(b.try_acquire(0));
        b.failure(0);
        assert!(b.try_acquire(150));
        b.failure(150);
        assert_eq!(b.state(200), BreakerState::Open);
        assert_eq!(b.state(250), BreakerState::HalfOpen);
    }

    #[test]
    fn success_resets_the_failure_count() {
        let b = Breaker::new(2, 100);
        b.failure(0);
        b.success();
        b.failure(1);
        assert_eq!(b.state(2), BreakerState::Closed);
    }
}
