//! A single-threaded stop signal the worker loop can await.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Raised once by `stop`; every `wait` resolves then.
#[derive(Debug, Default)]
pub struct StopSignal {
    stopped: Cell<bool>,
    deadline_ms: Cell<Option<u64>>,
    wakers: RefCell<Vec<Waker>>,
}

impl StopSignal {
    /// A signal not raised yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Raises the signal: finish in-flight work until `deadline_ms` (Unix ms), then hand it back.
    pub fn stop(&self, deadline_ms: u64) {
        self.deadline_ms.set(Some(deadline_ms));
        self.stopped.set(true);
        for w in self.wakers.borrow_mut().drain(..) {
            w.wake();
        }
    }

    /// Whether [`StopSignal::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.stopped.get()
    }

    /// The drain deadline, once stopped.
    pub fn deadline_ms(&self) -> Option<u64> {
        self.deadline_ms.get()
    }

    /// Resolves when the signal is raised.
    pub fn wait(&self) -> StopWait<'_> {
        StopWait { signal: self }
    }
}

/// The future of [`StopSignal::wait`].
#[derive(Debug)]
pub struct StopWait<'a> {
    signal: &'a StopSignal,
}

impl Future for StopWait<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.signal.stopped.get() {
            Poll::Ready(())
        } else {
            self.signal.wakers.borrow_mut().push(cx.waker().clone());
            Poll::Pending
        }
    }
}
