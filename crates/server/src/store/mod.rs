//! The [`Store`] trait: everything the server keeps (jobs, dead letters, cache entries, locks,
//! fences, events), behind one async interface with two implementations that pass the same
//! [`conformance`] suite:
//!
//! - [`embedded::EmbeddedStore`] (the default): in-memory state with an append-only journal file,
//!   replayed on start: one process, nothing else to run;
//! - [`redis::RedisStore`]: Redis (hashes, sorted sets, Lua scripts, Pub/Sub), so many servers
//!   share one queue.
//!
//! Time is always passed in (`now`, Unix ms) from the server's injected clock, so stores have no
//! clock of their own and tests drive expiry with a fake one. Leases expire lazily: an expired
//! lease stays valid for its holder until a claim re-delivers the job (which invalidates the old
//! token); locks and cache entries expire strictly at `expires_at`.

use async_trait::async_trait;
use ternflow_core::protocol::{
    CacheEntry, ClaimedJob, DlqEntry, Enqueued, JobError, JobResult, JobStatus, Lease, LockGrant,
    NackResponse, QueueDepth, ServerEvent,
};
use tokio::sync::broadcast;

use crate::error::Result;

pub mod conformance;
pub mod embedded;
pub mod redis;

/// Priorities are clamped to this range (both stores order by priority, then FIFO).
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = -1_000..=1_000;

/// A job as the server hands it to a store (id and model resolved, delay turned into a time).
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    /// Job id.
    pub id: String,
    /// Text.
    pub text: String,
    /// Model id.
    pub model_id: String,
    /// Priority (higher first), within [`PRIORITY_RANGE`].
    pub priority: i32,
    /// Earliest delivery.
    pub available_at: u64,
    /// Producer data.
    pub meta: Option<serde_json::Value>,
    /// W3C trace id (32 hex) shared by every delivery.
    pub trace_id: String,
}

/// What a claim returned.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Claimed {
    /// Leased jobs (`traceparent` holds just the trace id; the server adds a span id).
    pub jobs: Vec<ClaimedJob>,
    /// Jobs whose lease had expired and were dead-lettered by this claim.
    pub dead: Vec<String>,
    /// Jobs whose lease had expired and were re-queued by this claim.
    pub expired: Vec<String>,
}

/// Outcome of an ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    /// First ack: the job is done.
    Done,
    /// The same lease holder acked again (idempotent).
    Repeated,
    /// The token does not hold the lease.
    Stale,
    /// No such job.
    Missing,
}

/// Outcome of a cache `PUT`.
#[derive(Debug, Clone, PartialEq)]
pub enum PutOutcome {
    /// Written; `replaced` when a live entry was overwritten.
    Stored {
        /// Whether a live entry was replaced.
        replaced: bool,
    },
    /// Refused: the stored entry has a newer fence.
    Stale(CacheEntry),
}

/// Outcome of a lock acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockOutcome {
    /// Acquired.
    Granted(LockGrant),
    /// Held by someone else until `expires_at`.
    Held {
        /// When the current holder's lock runs out (unless renewed).
        expires_at: u64,
    },
}

/// An event with its id.
pub type NumberedEvent = (u64, ServerEvent);

/// The persistence and coordination interface. All methods are atomic with respect to each other.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// Adds jobs that do not exist yet (by id, in any state); reports which were new.
    async fn enqueue(&self, jobs: Vec<JobRecord>, now: u64) -> Result<Vec<Enqueued>>;

    /// Leases up to `max` ready jobs (highest priority, then oldest) to `worker` for `lease_ms`.
    /// First moves due delayed jobs to ready and re-queues jobs whose lease expired (or
    /// dead-letters them when they used `max_attempts`).
    async fn claim(
        &self,
        worker: &str,
        max: u32,
        lease_ms: u64,
        max_attempts: u32,
        now: u64,
    ) -> Result<Claimed>;

    /// Extends the lease held with `token`; `None` when it is not held (lost or stale).
    async fn heartbeat(
        &self,
        id: &str,
        token: &str,
        lease_ms: u64,
        now: u64,
    ) -> Result<Option<Lease>>;

    /// Finishes the job held with `token`.
    async fn ack(&self, id: &str, token: &str, result: JobResult, now: u64) -> Result<AckOutcome>;

    /// Gives the job back with an error: re-queued at `retry_at`, or dead-lettered when it is not
    /// retryable or used `max_attempts`. `None` when the token does not hold the lease.
    async fn nack(
        &self,
        id: &str,
        token: &str,
        error: JobError,
        retry_at: u64,
        max_attempts: u32,
        now: u64,
    ) -> Result<Option<NackResponse>>;

    /// Hands a lease back without counting the attempt (graceful shutdown). `false` when not held.
    async fn release(&self, id: &str, token: &str, now: u64) -> Result<bool>;

    /// A job's status.
    async fn status(&self, id: &str) -> Result<Option<JobStatus>>;

    /// Up to `limit` dead letters, oldest first.
    async fn dlq(&self, limit: usize) -> Result<Vec<DlqEntry>>;

    /// Re-queues a dead job with a fresh attempt count. `false` when it is not dead.
    async fn redrive(&self, id: &str, now: u64) -> Result<bool>;

    /// Queue depth (delayed jobs already due count as ready).
    async fn depth(&self, now: u64) -> Result<QueueDepth>;

    /// A live cache entry.
    async fn cache_get(&self, key: &str, now: u64) -> Result<Option<CacheEntry>>;

    /// Writes `entry` unless a live entry with a newer fence is stored.
    async fn cache_put(&self, key: &str, entry: CacheEntry, now: u64) -> Result<PutOutcome>;

    /// Deletes an entry; `true` when one existed.
    async fn cache_delete(&self, key: &str) -> Result<bool>;

    /// Takes the lock on `key` unless a live one is held; a grant carries a new fence.
    async fn lock_acquire(&self, key: &str, ttl_ms: u64, now: u64) -> Result<LockOutcome>;

    /// Extends a live lock held with `token`.
    async fn lock_renew(
        &self,
        key: &str,
        token: &str,
        ttl_ms: u64,
        now: u64,
    ) -> Result<Option<LockGrant>>;

    /// Deletes the lock if `token` holds it (compare-and-delete).
    async fn lock_release(&self, key: &str, token: &str) -> Result<bool>;

    /// Numbers `event` and delivers it to every subscriber (on every server sharing the store).
    async fn publish(&self, event: ServerEvent) -> Result<u64>;

    /// Receives published events, in id order.
    fn subscribe(&self) -> broadcast::Receiver<NumberedEvent>;
}

/// A fresh random token (128 bits, hex).
pub fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}
