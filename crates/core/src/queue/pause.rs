//! Pausing the queue loop without stopping it: while paused it claims nothing (jobs in hand
//! finish), and it claims again as soon as it is resumed. The page pauses it when the tab is
//! hidden, the visitor asked to save data, the battery runs low, or the site says so.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// See the [module docs](self).
#[derive(Debug, Default)]
pub struct PauseSignal {
    paused: Cell<bool>,
    wakers: RefCell<Vec<Waker>>,
}

impl PauseSignal {
    /// Pauses (`true`) or resumes (`false`) the loop.
    pub fn set(&self, paused: bool) {
        self.paused.set(paused);
        if !paused {
            for w in self.wakers.borrow_mut().drain(..) {
                w.wake();
            }
        }
    }

    /// Whether the loop is paused.
    pub fn is_paused(&self) -> bool {
        self.paused.get()
    }

    /// Resolves once the loop is not paused.
    pub fn resumed(&self) -> Resumed<'_> {
        Resumed { signal: self }
    }
}

/// The future of [`PauseSignal::resumed`].
#[derive(Debug)]
pub struct Resumed<'a> {
    signal: &'a PauseSignal,
}

impl Future for Resumed<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.signal.paused.get() {
            self.signal.wakers.borrow_mut().push(cx.waker().clone());
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }
}
