//! The fake clock: virtual time with its own executor, and wake-ups that never come.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use crate::ports::{Clock, Wakeups};

/// A virtual clock with its own executor: time stands still while any task can make progress
/// and jumps to the next timer when every task is waiting on one (like a paused tokio clock), so
/// leases, TTLs and backoff are tested exactly and instantly. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct FakeClock {
    now: Rc<Cell<u64>>,
    timers: Rc<RefCell<Vec<(u64, Waker)>>>,
}

impl FakeClock {
    /// A clock at `start_ms`.
    pub fn at(start_ms: u64) -> Self {
        FakeClock {
            now: Rc::new(Cell::new(start_ms)),
            timers: Rc::default(),
        }
    }

    /// Moves time forward by `ms`, waking the timers that are due.
    pub fn advance(&self, ms: u64) {
        self.now.set(self.now.get() + ms);
        self.fire();
    }

    fn fire(&self) {
        let now = self.now.get();
        let due: Vec<Waker> = {
            let mut t = self.timers.borrow_mut();
            let (due, keep): (Vec<_>, Vec<_>) = t.drain(..).partition(|(d, _)| *d <= now);
            *t = keep;
            due.into_iter().map(|(_, w)| w).collect()
        };
        for w in due {
            w.wake();
        }
    }

    /// Runs `fut` to completion on the current thread, advancing virtual time whenever nothing
    /// else can run.
    ///
    /// # Panics
    /// When every task waits and no timer is pending (a deadlock in the code under test).
    pub fn run<F: Future>(&self, fut: F) -> F::Output {
        struct Flag(AtomicBool);
        impl Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let flag = Arc::new(Flag(AtomicBool::new(true)));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        let mut fut = std::pin::pin!(fut);
        loop {
            flag.0.store(false, Ordering::SeqCst);
            if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                return v;
            }
            if !flag.0.load(Ordering::SeqCst) {
                let next = self.timers.borrow().iter().map(|(d, _)| *d).min();
                let next = next.expect("deadlock: every task waits and no timer is pending");
                self.now.set(self.now.get().max(next));
                self.fire();
            }
        }
    }
}

/// The future of [`FakeClock`]'s sleep.
#[derive(Debug)]
pub struct FakeSleep {
    clock: FakeClock,
    deadline: u64,
}

impl Future for FakeSleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.clock.now.get() >= self.deadline {
            return Poll::Ready(());
        }
        self.clock
            .timers
            .borrow_mut()
            .push((self.deadline, cx.waker().clone()));
        Poll::Pending
    }
}

impl Clock for FakeClock {
    fn now_ms(&self) -> u64 {
        self.now.get()
    }
    async fn sleep(&self, ms: u64) {
        FakeSleep {
            clock: self.clone(),
            deadline: self.now.get() + ms,
        }
        .await;
    }
}

/// Wake-ups that never come: the watchdog timeout always fires (on the fake clock).
#[derive(Debug, Clone)]
pub struct Watchdog(pub FakeClock);

impl Wakeups for Watchdog {
    async fn next(&self, timeout_ms: u64) -> Option<u64> {
        self.0.sleep(timeout_ms).await;
        None
    }
}
