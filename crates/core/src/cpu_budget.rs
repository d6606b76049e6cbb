//! The CPU budget: the share of wall time the engine may compute, kept by measuring its busy
//! time and holding back new embeddings until the budget has room again.
//!
//! Busy time is the union of the intervals during which at least one embedding is in the
//! engine (calls overlap: the engine port batches them, and one engine computes one batch at a
//! time). Credit accrues at `share` ms per ms of wall time and busy time spends it; a new
//! embedding waits while the credit is negative, so over any long run busy time stays within
//! `share` of the time that passed, plus one burst. Between batches the engine's thread sleeps:
//! what the visitor's device gives is bounded whatever the queue holds. `share >= 1` is no
//! budget (nothing waits).
//!
//! Embeddings that wait share one timer: one of them sleeps until the credit is back, the others
//! are parked and all go in together when it wakes (one batch for the engine), instead of a
//! timer each firing over and over while the budget is spent.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::ports::Clock;

/// Credit saved while idle, ms: a worker idle for a minute does not then compute flat out for
/// fifteen seconds.
pub const BURST_MS: f64 = 250.0;

/// See the [module docs](self).
#[derive(Debug)]
pub struct CpuBudget {
    share: Cell<f64>,
    credit_ms: Cell<f64>,
    last_ms: Cell<Option<u64>>,
    active: Cell<u32>,
    busy_ms: Cell<u64>,
    /// Whether one waiting embedding sleeps for all of them.
    sleeper: Cell<bool>,
    /// Bumped each time the sleeper wakes (or gives up): parked embeddings look again.
    round: Cell<u64>,
    parked: RefCell<Vec<Waker>>,
}

impl Default for CpuBudget {
    fn default() -> Self {
        CpuBudget {
            share: Cell::new(1.0),
            credit_ms: Cell::new(BURST_MS),
            last_ms: Cell::new(None),
            active: Cell::new(0),
            busy_ms: Cell::new(0),
            sleeper: Cell::new(false),
            round: Cell::new(0),
            parked: RefCell::new(Vec::new()),
        }
    }
}

impl CpuBudget {
    /// Sets the share (clamped to `[0.01, 1]`; 1: no budget).
    pub fn set_share(&self, share: f64) {
        let s = if share.is_finite() { share } else { 1.0 };
        self.share.set(s.clamp(0.01, 1.0));
    }

    /// The share in force.
    pub fn share(&self) -> f64 {
        self.share.get()
    }

    /// Busy time measured so far, ms.
    pub fn busy_ms(&self) -> u64 {
        self.busy_ms.get()
    }

    fn update(&self, now: u64) {
        let Some(last) = self.last_ms.get() else {
            self.last_ms.set(Some(now));
            return;
        };
        let dt = now.saturating_sub(last) as f64;
        self.last_ms.set(Some(now.max(last)));
        let mut credit = self.credit_ms.get() + self.share.get() * dt;
        if self.active.get() > 0 {
            credit -= dt;
            self.busy_ms.set(self.busy_ms.get() + dt as u64);
        }
        self.credit_ms.set(credit.min(BURST_MS));
    }

    /// How long a new embedding must wait at `now` (0: it may start).
    pub fn wait_ms(&self, now: u64) -> u64 {
        self.update(now);
        let credit = self.credit_ms.get();
        if self.share.get() >= 1.0 || credit >= 0.0 {
            return 0;
        }
        // Idle, the credit is back at 0 after -credit/share; busy, later still: look again then.
        ((-credit / self.share.get()).ceil() as u64).clamp(1, 1_000)
    }

    /// Waits until the budget lets a new embedding start, then counts it as in the engine until
    /// [`CpuBudget::end`].
    pub async fn begin<C: Clock>(&self, clock: &C) {
        loop {
            let w = self.wait_ms(clock.now_ms());
            if w == 0 {
                break;
            }
            if self.sleeper.get() {
                Parked {
                    budget: self,
                    round: self.round.get(),
                }
                .await;
            } else {
                let _turn = SleeperTurn::take(self);
                clock.sleep(w).await;
            }
        }
        self.update(clock.now_ms());
        self.active.set(self.active.get() + 1);
    }

    /// An embedding left the engine.
    pub fn end(&self, now: u64) {
        self.update(now);
        self.active.set(self.active.get().saturating_sub(1));
    }
}

/// The one waiting embedding that sleeps for all: when it wakes, or is dropped, every parked
/// one looks again.
struct SleeperTurn<'a>(&'a CpuBudget);

impl<'a> SleeperTurn<'a> {
    fn take(b: &'a CpuBudget) -> Self {
        b.sleeper.set(true);
        SleeperTurn(b)
    }
}

impl Drop for SleeperTurn<'_> {
    fn drop(&mut self) {
        let b = self.0;
        b.sleeper.set(false);
        b.round.set(b.round.get().wrapping_add(1));
        for w in b.parked.borrow_mut().drain(..) {
            w.wake();
        }
    }
}

/// A waiting embedding parked until the sleeper's next round.
struct Parked<'a> {
    budget: &'a CpuBudget,
    round: u64,
}

impl Future for Parked<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.budget.round.get() != self.round {
            Poll::Ready(())
        } else {
            self.budget.parked.borrow_mut().push(cx.waker().clone());
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One engine, embeddings of `cost` ms one after another for `run` ms on a virtual clock:
    /// the busy share measured.
    fn busy_share(share: f64, cost: u64, run: u64) -> f64 {
        let b = CpuBudget::default();
        b.set_share(share);
        let mut now = 1_000;
        let start = now;
        while now - start < run {
            loop {
                let w = b.wait_ms(now);
                if w == 0 {
                    break;
                }
                now += w;
            }
            b.update(now);
            b.active.set(b.active.get() + 1);
            now += cost;
            b.end(now);
        }
        b.busy_ms() as f64 / (now - start) as f64
    }

    #[test]
    fn busy_time_stays_within_the_share_over_a_long_run() {
        for (share, cost) in [(0.25, 5), (0.25, 40), (0.5, 12), (0.1, 3), (0.75, 100)] {
            let got = busy_share(share, cost, 60_000);
            assert!(
                (got - share).abs() < 0.02,
                "share {share}, {cost} ms batches: busy {got:.3}"
            );
        }
    }

    #[test]
    fn no_budget_never_waits_and_idle_time_saves_only_a_burst() {
        assert!((busy_share(1.0, 5, 10_000) - 1.0).abs() < 1e-9);
        let b = CpuBudget::default();
        b.set_share(0.25);
        assert_eq!(b.wait_ms(1_000), 0);
        // Idle a minute: only BURST_MS of credit kept.
        assert_eq!(b.wait_ms(61_000), 0);
        b.update(61_000);
        b.active.set(1);
        b.end(61_350);
        // 350 ms busy against the 250 ms burst and 87.5 ms earned meanwhile: 12.5 ms short,
        // 50 ms at a quarter to earn back.
        assert_eq!(b.wait_ms(61_350), 50);
    }

    #[test]
    fn a_share_out_of_range_is_clamped() {
        let b = CpuBudget::default();
        b.set_share(f64::NAN);
        assert_eq!(b.share(), 1.0);
        b.set_share(0.0);
        assert_eq!(b.share(), 0.01);
        b.set_share(7.0);
        assert_eq!(b.share(), 1.0);
    }
}
