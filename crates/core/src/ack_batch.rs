//! Acks batched across jobs: jobs that finish within [`Config::ack_linger_ms`] of each other
//! share one `POST /v1/jobs/ack`, so the worker pays one request for many jobs instead of one
//! each.
//!
//! A finished job puts its ack in the [`AckQueue`] and waits for its own answer. The queue loop
//! (`Pipeline::run_queue`, which is never dropped while it runs) sees the queue become
//! non-empty, waits the linger time for more acks to join, and sends up to
//! [`Config::ack_batch_max`] in one request; each job then gets its own outcome (done, lease
//! lost, refused). A failed request fails every ack in it with the same (retryable) error, and
//! each job's retry loop sends its ack again: acks are idempotent per lease token, so nothing is
//! acked twice and nothing is lost. Outside the queue loop (no loop to flush) acks go out one by
//! one, as before.
//!
//! [`Config::ack_linger_ms`]: crate::config::Config::ack_linger_ms
//! [`Config::ack_batch_max`]: crate::config::Config::ack_batch_max

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use futures_channel::oneshot;

use crate::error::{Error, Result};
use crate::protocol::AckRequest;

struct Pending {
    id: String,
    ack: AckRequest,
    reply: oneshot::Sender<Result<()>>,
}

/// See the [module docs](self).
#[derive(Default)]
pub struct AckQueue {
    pending: RefCell<Vec<Pending>>,
    waker: RefCell<Option<Waker>>,
    driven: Cell<bool>,
}

impl std::fmt::Debug for AckQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AckQueue")
            .field("pending", &self.pending.borrow().len())
            .field("driven", &self.driven.get())
            .finish()
    }
}

impl AckQueue {
    /// Whether a queue loop flushes this queue (else acks go out one by one).
    pub(crate) fn is_driven(&self) -> bool {
        self.driven.get()
    }

    pub(crate) fn set_driven(&self, on: bool) {
        self.driven.set(on);
        if !on {
            // Nobody will flush these: their jobs were handed back or dropped.
            for p in self.pending.borrow_mut().drain(..) {
                let _ = p.reply.send(Err(Error::Stopped));
            }
        }
    }

    /// Queues an ack; the receiver gets its outcome once a batch carrying it was answered.
    pub(crate) fn push(&self, id: &str, ack: AckRequest) -> oneshot::Receiver<Result<()>> {
        let (reply, rx) = oneshot::channel();
        self.pending.borrow_mut().push(Pending {
            id: id.to_owned(),
            ack,
            reply,
        });
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
        rx
    }

    /// Resolves once an ack is waiting.
    pub(crate) fn waiting(&self) -> Waiting<'_> {
        self.at_least(1)
    }

    /// Resolves once `n` acks are waiting (every job in flight has finished: nobody else can
    /// join the batch, so lingering longer would only add latency).
    pub(crate) fn at_least(&self, n: usize) -> Waiting<'_> {
        Waiting {
            queue: self,
            n: n.max(1),
        }
    }

    /// Takes up to `max` waiting acks for one request.
    pub(crate) fn take(&self, max: usize) -> Batch {
        let mut p = self.pending.borrow_mut();
        let n = p.len().min(max.max(1));
        Batch(p.drain(..n).collect())
    }

    /// Acks waiting now.
    pub(crate) fn len(&self) -> usize {
        self.pending.borrow().len()
    }
}

/// Acks taken for one request.
pub(crate) struct Batch(Vec<Pending>);

impl Batch {
    /// `(job id, ack)` pairs, in order.
    pub(crate) fn items(&self) -> Vec<(String, AckRequest)> {
        self.0
            .iter()
            .map(|p| (p.id.clone(), p.ack.clone()))
            .collect()
    }

    /// Hands every job its outcome: one per ack, or the request's error for all.
    pub(crate) fn answer(self, outcome: Result<Vec<Result<()>>>) {
        match outcome {
            Ok(results) if results.len() == self.0.len() => {
                for (p, r) in self.0.into_iter().zip(results) {
                    let _ = p.reply.send(r);
                }
            }
            Ok(results) => {
                let e = Error::Protocol(format!(
                    "the batch ack answered {} results for {} acks",
                    results.len(),
                    self.0.len()
                ));
                for p in self.0 {
                    let _ = p.reply.send(Err(e.clone()));
                }
            }
            Err(e) => {
                for p in self.0 {
                    let _ = p.reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// The future of [`AckQueue::waiting`].
pub(crate) struct Waiting<'a> {
    queue: &'a AckQueue,
    n: usize,
}

impl Future for Waiting<'_> {
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
