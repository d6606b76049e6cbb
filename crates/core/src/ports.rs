//! The traits the adapters implement: where jobs come from, the two cache levels, the lock
//! service, the embedders and the clock.
//!
//! They are `async fn` traits without `Send` bounds: the browser worker is single-threaded and its
//! futures hold JS values. Every method that causes a network request takes the job's
//! `traceparent` header value and sends it.
#![allow(async_fn_in_trait)]

use crate::error::{Error, Result};
use crate::protocol::{
    AckRequest, CacheEntry, CachePut, ClaimedJob, Lease, LockGrant, NackRequest, NackResponse,
    TextInfo,
};

/// Time: the wall clock in Unix milliseconds, and a way to wait.
pub trait Clock {
    /// Now, Unix ms.
    fn now_ms(&self) -> u64;
    /// Now in microseconds, for timing a job's steps (only differences are used): as fine as
    /// the platform's clock gives; the default is [`Clock::now_ms`]'s.
    fn now_us(&self) -> u64 {
        self.now_ms().saturating_mul(1000)
    }
    /// Resolves after `ms` milliseconds.
    async fn sleep(&self, ms: u64);
}

/// The job queue (the server's `/v1/jobs` routes).
pub trait JobSource {
    /// Claims up to `max` jobs, waiting up to `wait_ms` for one to be ready.
    async fn claim(&self, max: u32, wait_ms: u64) -> Result<Vec<ClaimedJob>>;
    /// Extends a lease. [`Error::LeaseLost`](crate::Error::LeaseLost) when it is gone.
    async fn heartbeat(&self, job_id: &str, token: &str, trace: &str) -> Result<Lease>;
    /// Extends many leases in one request, one result per `(job id, token)` in order (a lost
    /// lease is that lease's [`Error::LeaseLost`](crate::Error::LeaseLost)); `Err` when the
    /// request as a whole failed. The default sends them one by one.
    async fn heartbeat_many(&self, leases: &[(String, String)]) -> Result<Vec<Result<Lease>>> {
        let mut out = Vec::with_capacity(leases.len());
        for (id, token) in leases {
            out.push(self.heartbeat(id, token, "").await);
        }
        Ok(out)
    }
    /// Finishes a job. [`Error::LeaseLost`](crate::Error::LeaseLost) for a stale token.
    async fn ack(&self, job_id: &str, ack: &AckRequest, trace: &str) -> Result<()>;
    /// Finishes many jobs in one request, one result per ack in order (a lost lease is that
    /// ack's [`Error::LeaseLost`](crate::Error::LeaseLost), not the batch's); `Err` when the
    /// request as a whole failed. The default sends them one by one.
    async fn ack_many(&self, acks: &[(String, AckRequest)]) -> Result<Vec<Result<()>>> {
        let mut out = Vec::with_capacity(acks.len());
        for (id, ack) in acks {
            out.push(self.ack(id, ack, "").await);
        }
        Ok(out)
    }
    /// Gives a job back with an error.
    async fn nack(&self, job_id: &str, nack: &NackRequest, trace: &str) -> Result<NackResponse>;
    /// Gives many jobs back in one request, one result per nack in order (a lost lease is that
    /// nack's [`Error::LeaseLost`](crate::Error::LeaseLost)); `Err` when the request as a whole
    /// failed. The default sends them one by one.
    async fn nack_many(
        &self,
        nacks: &[(String, NackRequest)],
    ) -> Result<Vec<Result<NackResponse>>> {
        let mut out = Vec::with_capacity(nacks.len());
        for (id, nack) in nacks {
            out.push(self.nack(id, nack, "").await);
        }
        Ok(out)
    }
    /// Hands a lease back without using an attempt (the worker is stopping).
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) when it is no longer held.
    async fn release(&self, job_id: &str, token: &str, trace: &str) -> Result<()>;
    /// Hands many leases back in one request, one result per `(job id, token)` in order (a lost
    /// lease is that lease's [`Error::LeaseLost`](crate::Error::LeaseLost)); `Err` when the
    /// request as a whole failed. The default sends them one by one.
    async fn release_many(&self, leases: &[(String, String)]) -> Result<Vec<Result<()>>> {
        let mut out = Vec::with_capacity(leases.len());
        for (id, token) in leases {
            out.push(self.release(id, token, "").await);
        }
        Ok(out)
    }
}

/// The first cache level, inside the worker (IndexedDB, Cache API or memory).
pub trait LocalCache {
    /// The vector under `key` if present and not expired at `now_ms`.
    async fn get(&self, key: &str, now_ms: u64) -> Result<Option<Vec<f32>>>;
    /// Stores a vector until `expires_at` (Unix ms), evicting the least recently used entries
    /// beyond the store's size bound.
    async fn put(&self, key: &str, vector: &[f32], expires_at: u64, now_ms: u64) -> Result<()>;
    /// Drops these keys (an `invalidate` event).
    async fn remove(&self, keys: &[String]) -> Result<()>;
    /// Drops every entry (a `reset` event: `invalidate` events may have been missed).
    async fn clear(&self) -> Result<()>;
}

/// What a remote cache write did.
#[derive(Debug, Clone, PartialEq)]
pub enum PutOutcome {
    /// Stored.
    Stored,
    /// Refused: the stored entry carries a newer fence; here it is.
    Conflict(CacheEntry),
}

/// The second cache level, shared by all workers (the server's `/v1/cache`).
pub trait RemoteCache {
    /// The entry under `key`, if any.
    async fn get(&self, key: &str, trace: &str) -> Result<Option<CacheEntry>>;
    /// Writes an entry carrying the writer's fence.
    async fn put(&self, key: &str, put: &CachePut, trace: &str) -> Result<PutOutcome>;
}

/// Single-flight locks (the server's `/v1/locks`).
pub trait Locks {
    /// Takes the lock on `key`; `None` when someone else holds it.
    async fn acquire(&self, key: &str, ttl_ms: u64, trace: &str) -> Result<Option<LockGrant>>;
    /// Extends a held lock. [`Error::LeaseLost`](crate::Error::LeaseLost) when it was lost.
    async fn renew(&self, key: &str, token: &str, ttl_ms: u64, trace: &str) -> Result<LockGrant>;
    /// Releases the lock if `token` still holds it (compare-and-delete).
    async fn release(&self, key: &str, token: &str, trace: &str) -> Result<()>;
}

/// Something that turns text into a vector: the in-wasm engine or the backend endpoint.
pub trait Embedder {
    /// The model id this embedder produces vectors for; `None` while it cannot run (no model
    /// loaded, or unknown until its first answer).
    fn model_id(&self) -> Option<String>;
    /// Embeds one text.
    async fn embed(&self, text: &str, trace: &str) -> Result<Vec<f32>>;
    /// Embeds at most `max_tokens` word pieces of `text` (`None`: the whole text, as
    /// [`Embedder::embed`]). The default can only embed whole texts.
    async fn embed_with(
        &self,
        text: &str,
        max_tokens: Option<u32>,
        trace: &str,
    ) -> Result<Vec<f32>> {
        match max_tokens {
            None => self.embed(text, trace).await,
            Some(_) => Err(Error::Engine(
                "this embedder cannot embed part of a text".into(),
            )),
        }
    }
    /// Whether [`Embedder::embed_with`] can embed part of a text now (the pipeline sends a cut
    /// text elsewhere when not, without counting it as this embedder's failure).
    fn cuts(&self) -> bool {
        false
    }
    /// What embedding each of `texts` with `max_tokens` covers, in order (word pieces counted, no
    /// forward pass); `None` where this embedder cannot say without embedding (the backend, an
    /// engine not loaded).
    async fn info(&self, texts: &[&str], max_tokens: Option<u32>) -> Option<Vec<TextInfo>> {
        let _ = (texts, max_tokens);
        None
    }
}

/// What wakes an idle worker: the SSE stream's `jobs` events, or a watchdog timeout so a silent
/// stream never stalls it.
pub trait Wakeups {
    /// Resolves at the next `jobs` event (with the depth it reported) or after `timeout_ms`
    /// (`None`).
    async fn next(&self, timeout_ms: u64) -> Option<u64>;
}
