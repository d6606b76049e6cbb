//! The leases a queue loop holds, kept alive by one batched heartbeat for all of them.
//!
//! Each claimed job is entered with its token and expiry. The queue loop's heartbeat round
//! sends every held lease in one `POST /v1/jobs/heartbeat` (a third of the shortest lease
//! left, at the latest), records the new expiries, and marks a lease the server no longer
//! honours as lost, which wakes its job so it stops without acking. A round that cannot reach
//! the server changes nothing until a lease's own expiry passes; then that lease counts as
//! lost too (the server re-delivers it to someone else). The board also answers which jobs to
//! hand back at the stop deadline. It lives in the pipeline, for the queue loop; what it
//! holds reaches an adapter only as the changes its [`LeaseJournal`] records.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use super::lease_journal::LeaseJournal;

struct Held {
    token: String,
    expires_at: u64,
    lost: bool,
    waker: Option<Waker>,
}

/// See the [module docs](self).
#[derive(Default)]
pub(crate) struct LeaseBoard {
    held: RefCell<BTreeMap<String, Held>>,
    /// Who waits for the first lease (the heartbeat round, while none is held).
    idle_waker: RefCell<Option<Waker>>,
    /// Every lease taken and given up, for an adapter's mirror.
    pub(crate) journal: LeaseJournal,
}

impl std::fmt::Debug for LeaseBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens.
        f.debug_struct("LeaseBoard")
            .field("held", &self.held.borrow().len())
            .finish_non_exhaustive()
    }
}

impl LeaseBoard {
    /// Enters a claimed job's lease.
    pub(crate) fn hold(&self, id: &str, token: &str, expires_at: u64) {
        self.held.borrow_mut().insert(
            id.to_owned(),
            Held {
                token: token.to_owned(),
                expires_at,
                lost: false,
                waker: None,
            },
        );
        self.journal.held(id, token);
        if let Some(w) = self.idle_waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// Forgets a finished job's lease.
    pub(crate) fn forget(&self, id: &str) {
        self.held.borrow_mut().remove(id);
        self.journal.gone(id);
    }

    /// Every lease still held (not lost): `(job id, token)`.
    pub(crate) fn snapshot(&self) -> Vec<(String, String)> {
        self.held
            .borrow()
            .iter()
            .filter(|(_, h)| !h.lost)
            .map(|(id, h)| (id.clone(), h.token.clone()))
            .collect()
    }

    /// Takes every lease out (the stop deadline hands them back).
    pub(crate) fn drain(&self) -> Vec<(String, String)> {
        let out = self.snapshot();
        for id in std::mem::take(&mut *self.held.borrow_mut()).into_keys() {
            self.journal.gone(&id);
        }
        out
    }

    /// The server extended `id`'s lease (for this token) to `expires_at`.
    pub(crate) fn extended(&self, id: &str, token: &str, expires_at: u64) {
        if let Some(h) = self.held.borrow_mut().get_mut(id) {
            if h.token == token {
                h.expires_at = expires_at;
            }
        }
    }

    /// The lease of `id` is gone: wake its job.
    pub(crate) fn lose(&self, id: &str) {
        if let Some(h) = self.held.borrow_mut().get_mut(id) {
            h.lost = true;
            if let Some(w) = h.waker.take() {
                w.wake();
            }
        }
    }

    /// Marks every lease whose expiry has passed as lost; returns how many.
    pub(crate) fn lose_expired(&self, now: u64) -> usize {
        let expired: Vec<String> = self
            .held
            .borrow()
            .iter()
            .filter(|(_, h)| !h.lost && h.expires_at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            self.lose(id);
        }
        expired.len()
    }

    /// How long the next heartbeat round may wait: a third of the shortest lease left, within
    /// `[20 ms, cap_ms]`; `None` while no lease is held.
    pub(crate) fn next_beat_in(&self, now: u64, cap_ms: u64) -> Option<u64> {
        self.held
            .borrow()
            .values()
            .filter(|h| !h.lost)
            .map(|h| h.expires_at.saturating_sub(now) / 3)
            .min()
            .map(|d| d.clamp(20, cap_ms.max(20)))
    }

    /// Resolves when the lease of `id` is lost (never, for a job not on the board).
    pub(crate) fn lost<'a>(&'a self, id: &'a str) -> Lost<'a> {
        Lost { board: self, id }
    }

    /// Resolves once a lease is held.
    pub(crate) fn any_held(&self) -> AnyHeld<'_> {
        AnyHeld { board: self }
    }
}

/// The future of [`LeaseBoard::lost`].
pub(crate) struct Lost<'a> {
    board: &'a LeaseBoard,
    id: &'a str,
}

impl Future for Lost<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.board.held.borrow_mut().get_mut(self.id) {
            Some(h) if h.lost => Poll::Ready(()),
            Some(h) => {
                h.waker = Some(cx.waker().clone());
                Poll::Pending
            }
            None => Poll::Pending,
        }
    }
}

/// The future of [`LeaseBoard::any_held`].
pub(crate) struct AnyHeld<'a> {
    board: &'a LeaseBoard,
}

impl Future for AnyHeld<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.board.held.borrow().values().any(|h| !h.lost) {
            Poll::Ready(())
        } else {
            *self.board.idle_waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beats_at_a_third_of_the_shortest_lease_and_loses_what_expired() {
        let b = LeaseBoard::default();
        assert_eq!(b.next_beat_in(0, 30_000), None);
        b.hold("a", "ta", 3_000);
        b.hold("b", "tb", 9_000);
        assert_eq!(b.next_beat_in(0, 30_000), Some(1_000));
        b.extended("a", "stale-token", 99_000);
        assert_eq!(
            b.next_beat_in(0, 30_000),
            Some(1_000),
            "a stale token extends nothing"
        );
        b.extended("a", "ta", 12_000);
        assert_eq!(b.next_beat_in(0, 30_000), Some(3_000));
        assert_eq!(b.lose_expired(9_000), 1);
        assert_eq!(b.snapshot(), [("a".to_string(), "ta".to_string())]);
        b.forget("a");
        assert!(b.drain().is_empty());
    }
}
