//! What changed in the held leases since an adapter last looked: the browser mirrors them on
//! the page, which can still send one request when the page goes away (`pagehide`, a closed
//! tab) while its worker is torn down mid-job, so the jobs are claimable again at once instead
//! of after their leases.
//!
//! It records nothing until an adapter asks for it ([`LeaseJournal::watch`]): a pipeline
//! without a page (WASI, native) keeps no history of its leases.
//!
//! The journal is the difference to apply in order, `gone` first, then `held`: a lease held and
//! finished between two looks is only `gone` (the mirror may never have seen it), and a job
//! finished then claimed again is only `held`, with its new token.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// The changes since the last [`LeaseJournal::take`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseChanges {
    /// Leases taken since, `(job id, token)`: the mirror sets them.
    pub held: Vec<(String, String)>,
    /// Jobs whose lease this worker no longer holds (finished, handed back): the mirror drops
    /// them. Applied before `held`.
    pub gone: Vec<String>,
}

impl LeaseChanges {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty() && self.gone.is_empty()
    }
}

/// See the [module docs](self).
#[derive(Default)]
pub(crate) struct LeaseJournal {
    watched: Cell<bool>,
    changes: RefCell<LeaseChanges>,
    waker: RefCell<Option<Waker>>,
}

impl std::fmt::Debug for LeaseJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens.
        let c = self.changes.borrow();
        f.debug_struct("LeaseJournal")
            .field("watched", &self.watched.get())
            .field("held", &c.held.len())
            .field("gone", &c.gone.len())
            .finish_non_exhaustive()
    }
}

impl LeaseJournal {
    /// Starts recording (for good).
    pub(crate) fn watch(&self) {
        self.watched.set(true);
    }

    /// `id` is held under `token` now.
    pub(crate) fn held(&self, id: &str, token: &str) {
        if !self.watched.get() {
            return;
        }
        let mut c = self.changes.borrow_mut();
        c.gone.retain(|g| g != id);
        c.held.retain(|(h, _)| h != id);
        c.held.push((id.to_owned(), token.to_owned()));
        drop(c);
        self.wake();
    }

    /// `id`'s lease is no longer this worker's.
    pub(crate) fn gone(&self, id: &str) {
        if !self.watched.get() {
            return;
        }
        let mut c = self.changes.borrow_mut();
        c.held.retain(|(h, _)| h != id);
        if !c.gone.iter().any(|g| g == id) {
            c.gone.push(id.to_owned());
        }
        drop(c);
        self.wake();
    }

    /// The changes since the last call; the journal starts afresh.
    pub(crate) fn take(&self) -> LeaseChanges {
        std::mem::take(&mut *self.changes.borrow_mut())
    }

    /// Resolves once there is a change to take.
    pub(crate) fn changed(&self) -> Changed<'_> {
        Changed { journal: self }
    }

    fn wake(&self) {
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }
}

/// The future of [`LeaseJournal::changed`].
pub(crate) struct Changed<'a> {
    journal: &'a LeaseJournal,
}

impl Future for Changed<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.journal.changes.borrow().is_empty() {
            *self.journal.waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Applies `c` to a mirror as the page does: `gone` first, then `held`.
    fn apply(mirror: &mut std::collections::BTreeMap<String, String>, c: LeaseChanges) {
        for id in c.gone {
            mirror.remove(&id);
        }
        mirror.extend(c.held);
    }

    #[test]
    fn the_mirror_ends_with_exactly_the_leases_held_whatever_happened_between_looks() {
        let j = LeaseJournal::default();
        j.held("x", "tx");
        assert!(j.take().is_empty(), "nothing recorded before watch");
        j.watch();
        let mut mirror = std::collections::BTreeMap::new();
        j.held("a", "ta");
        j.held("b", "tb");
        apply(&mut mirror, j.take());
        assert_eq!(mirror.len(), 2);
        // Between two looks: a finished; c held and finished; b finished and claimed again.
        j.gone("a");
        j.held("c", "tc");
        j.gone("c");
        j.gone("b");
        j.held("b", "tb2");
        let c = j.take();
        assert_eq!(c.held, [("b".to_owned(), "tb2".to_owned())]);
        apply(&mut mirror, c);
        assert_eq!(
            mirror.into_iter().collect::<Vec<_>>(),
            [("b".to_owned(), "tb2".to_owned())]
        );
        assert!(j.take().is_empty(), "taken once");
    }

    #[test]
    fn changed_resolves_only_with_something_to_take() {
        use futures_util::FutureExt;
        let j = LeaseJournal::default();
        j.watch();
        assert!(j.changed().now_or_never().is_none());
        j.held("a", "ta");
        assert!(j.changed().now_or_never().is_some());
        j.take();
        assert!(j.changed().now_or_never().is_none());
    }
}
