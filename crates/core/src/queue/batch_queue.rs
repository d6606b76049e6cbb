//! Acks and nacks batched across jobs: jobs that finish within [`Config::ack_linger_ms`] of
//! each other share one `POST /v1/jobs/ack` (or `POST /v1/jobs/nack`), so the worker pays one
//! request for many jobs instead of one each.
//!
//! A finished job puts its ack (or nack) in a [`BatchQueue`] and waits for its own answer. The
//! queue loop (`Pipeline::run_queue`, which is never dropped while it runs) sees the queue become
//! non-empty, waits the linger time for more to join, and sends up to
//! [`Config::ack_batch_max`] in one request; each job then gets its own outcome (done, lease
//! lost, refused; retry or dead). A failed request fails every item in it with the same
//! (retryable) error, and each job's retry loop sends its ack again: acks are idempotent per
//! lease token, so nothing is acked twice and nothing is lost (a nack that cannot be delivered
//! leaves the lease to expire, and the server re-delivers). Outside the queue loop (no loop to
//! flush) they go out one by one, as before.
//!
//! [`Config::ack_linger_ms`]: crate::config::Config::ack_linger_ms
//! [`Config::ack_batch_max`]: crate::config::Config::ack_batch_max

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use futures_channel::oneshot;

use crate::error::{Error, Result};
use crate::protocol::{AckRequest, NackRequest, NackResponse};

struct Pending<I, R> {
    id: String,
    item: I,
    reply: oneshot::Sender<Result<R>>,
}

/// Acks waiting for their batch request.
pub type AckQueue = BatchQueue<AckRequest, ()>;
/// Nacks waiting for their batch request.
pub type NackQueue = BatchQueue<NackRequest, NackResponse>;

/// Items (acks or nacks) waiting for one batch request, each with whom to answer. See the
/// [module docs](self).
pub struct BatchQueue<I, R> {
    pending: RefCell<Vec<Pending<I, R>>>,
    waker: RefCell<Option<Waker>>,
    driven: Cell<bool>,
    /// Acks pushed and not yet answered (waiting here or in a request on its way).
    outstanding: Cell<usize>,
    /// Acks pushed so far, and who waits for the next one (the queue loop: a job waiting on its
    /// ack no longer needs a working slot, so the loop may claim more).
    pushes: Cell<u64>,
    push_waker: RefCell<Option<Waker>>,
}

impl<I, R> Default for BatchQueue<I, R> {
    fn default() -> Self {
        BatchQueue {
            pending: RefCell::default(),
            waker: RefCell::default(),
            driven: Cell::default(),
            outstanding: Cell::default(),
            pushes: Cell::default(),
            push_waker: RefCell::default(),
        }
    }
}

impl<I, R> std::fmt::Debug for BatchQueue<I, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchQueue")
            .field("pending", &self.pending.borrow().len())
            .field("driven", &self.driven.get())
            .finish()
    }
}

impl<I, R> BatchQueue<I, R> {
    /// Whether a queue loop flushes this queue (else acks go out one by one).
    pub(crate) fn is_driven(&self) -> bool {
        self.driven.get()
    }

    pub(crate) fn set_driven(&self, on: bool) {
        self.driven.set(on);
        if !on {
            // Nobody will flush these: their jobs were handed back or dropped.
            let dropped: Vec<Pending<I, R>> = self.pending.borrow_mut().drain(..).collect();
            self.outstanding
                .set(self.outstanding.get().saturating_sub(dropped.len()));
            for p in dropped {
                let _ = p.reply.send(Err(Error::Stopped));
            }
        }
    }

    /// Queues an item; the receiver gets its outcome once a batch carrying it was answered.
    pub(crate) fn push(&self, id: &str, item: I) -> oneshot::Receiver<Result<R>> {
        let (reply, rx) = oneshot::channel();
        self.pending.borrow_mut().push(Pending {
            id: id.to_owned(),
            item,
            reply,
        });
        self.outstanding.set(self.outstanding.get() + 1);
        self.pushes.set(self.pushes.get() + 1);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
        if let Some(w) = self.push_waker.borrow_mut().take() {
            w.wake();
        }
        rx
    }

    /// Acks pushed and not yet answered.
    pub(crate) fn outstanding(&self) -> usize {
        self.outstanding.get()
    }

    /// Acks pushed so far (for [`AckQueue::pushed_after`]).
    pub(crate) fn pushes(&self) -> u64 {
        self.pushes.get()
    }

    /// Resolves once an ack was pushed after the `seen`-th.
    pub(crate) fn pushed_after(&self, seen: u64) -> PushedAfter<'_, I, R> {
        PushedAfter { queue: self, seen }
    }

    /// Resolves once an ack is waiting.
    pub(crate) fn waiting(&self) -> Waiting<'_, I, R> {
        self.at_least(1)
    }

    /// Resolves once `n` acks are waiting (every job in flight has finished: nobody else can
    /// join the batch, so lingering longer would only add latency).
    pub(crate) fn at_least(&self, n: usize) -> Waiting<'_, I, R> {
        Waiting {
            queue: self,
            n: n.max(1),
        }
    }

    /// Takes up to `max` waiting acks for one request.
    pub(crate) fn take(&self, max: usize) -> Batch<'_, I, R> {
        let mut p = self.pending.borrow_mut();
        let n = p.len().min(max.max(1));
        Batch {
            items: p.drain(..n).collect(),
            queue: self,
        }
    }

    /// Acks waiting now.
    pub(crate) fn len(&self) -> usize {
        self.pending.borrow().len()
    }
}

/// Items taken for one request.
pub(crate) struct Batch<'a, I, R> {
    items: Vec<Pending<I, R>>,
    queue: &'a BatchQueue<I, R>,
}

impl<I, R> Drop for Batch<'_, I, R> {
    fn drop(&mut self) {
        // Answered or dropped unanswered (their jobs see `Stopped`): no longer outstanding.
        let n = self.items.len();
        let q = self.queue;
        q.outstanding.set(q.outstanding.get().saturating_sub(n));
    }
}

impl<I: Clone, R> Batch<'_, I, R> {
    /// `(job id, item)` pairs, in order.
    pub(crate) fn items(&self) -> Vec<(String, I)> {
        self.items
            .iter()
            .map(|p| (p.id.clone(), p.item.clone()))
            .collect()
    }

    /// Hands every job its outcome: one per item, or the request's error for all.
    pub(crate) fn answer(mut self, outcome: Result<Vec<Result<R>>>) {
        let items = std::mem::take(&mut self.items);
        let q = self.queue;
        q.outstanding
            .set(q.outstanding.get().saturating_sub(items.len()));
        match outcome {
            Ok(results) if results.len() == items.len() => {
                for (p, r) in items.into_iter().zip(results) {
                    let _ = p.reply.send(r);
                }
            }
            Ok(results) => {
                let e = Error::Protocol(format!(
                    "the batch request answered {} results for {} items",
                    results.len(),
                    items.len()
                ));
                for p in items {
                    let _ = p.reply.send(Err(e.clone()));
                }
            }
            Err(e) => {
                for p in items {
                    let _ = p.reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// The future of [`BatchQueue::pushed_after`].
pub(crate) struct PushedAfter<'a, I, R> {
    queue: &'a BatchQueue<I, R>,
    seen: u64,
}

impl<I, R> Future for PushedAfter<'_, I, R> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.queue.pushes.get() > self.seen {
            Poll::Ready(())
        } else {
            *self.queue.push_waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

/// The future of [`BatchQueue::waiting`].
pub(crate) struct Waiting<'a, I, R> {
    queue: &'a BatchQueue<I, R>,
    n: usize,
}

impl<I, R> Future for Waiting<'_, I, R> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.queue.len() >= self.n {
            Poll::Ready(())
        } else {
            *self.queue.waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}
