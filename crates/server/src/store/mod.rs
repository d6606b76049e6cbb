//! The [`Store`] traits: everything the server keeps (jobs, dead letters, cache entries, locks,
//! fences, events, shared budgets, usage counters), split by capability ([`QueueStore`],
//! [`CacheStore`], [`LockStore`], [`EventBus`], [`ResultScan`], [`IntegrityStore`],
//! [`BudgetStore`], [`UsageStore`]; a [`Store`] is all eight), with three
//! implementations that pass the same [`conformance`] suite (the in-process two number their
//! events with [`local_events`]):
//!
//! - [`sqlite::SqliteStore`] (the default, `--store embedded`): one SQLite database in WAL mode,
//!   one transaction per operation, group-committed on a thread of its own: one process,
//!   nothing else to run, and operators can open it with `sqlite3`;
//! - [`memory::MemoryStore`]: the same semantics in memory only (tests, benchmarks);
//! - [`redis::RedisStore`]: Redis or Redis Cluster (hashes, sorted sets, Lua scripts, a stream
//!   of events), so many servers share one queue.
//!
//! The server wraps each of them in [`timed::Timed`], which times every operation by name.
//!
//! Time is always passed in (`now`, Unix ms) from the server's injected clock, so stores have no
//! clock of their own and tests drive expiry with a fake one. Leases expire lazily: an expired
//! lease stays valid for its holder until a claim re-delivers the job (which invalidates the old
//! token); locks and cache entries expire strictly at `expires_at`.

use async_trait::async_trait;
use ternflow_core::protocol::{
    Attempt, CacheEntry, ClaimedJob, DlqEntry, Enqueued, JobError, JobResult, JobStatus, Lease,
    LockGrant, NackResponse, QueueDepth, ServerEvent,
};
use tokio::sync::broadcast;

use crate::error::Result;

#[cfg(any(test, feature = "testing"))]
pub mod conformance;
pub mod local_events;
pub mod memory;
pub mod redis;
pub mod sqlite;
pub mod timed;

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

/// One ack of a batch, as the store takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct AckInput {
    /// Job id.
    pub id: String,
    /// Lease token.
    pub token: String,
    /// The result.
    pub result: JobResult,
}

/// What a release did ([`QueueStore::release`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// One of the job's free releases: the attempt is not counted and the job is ready at once.
    Free,
    /// Past the free releases: the attempt counts (a `released` entry joins the history) and the
    /// job is ready again.
    Counted,
    /// Past the free releases on its last allowed attempt: dead-lettered with `released`.
    Dead,
    /// The token does not hold the lease.
    NotHeld,
}

/// Outcome of an ack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckOutcome {
    /// First ack: the job is done. Carries what a write-through needs: the lease's fence and
    /// the hash of the job's text ([`ternflow_core::keys::text_hash`]).
    Done {
        /// The fence of the lease that acked.
        fence: u64,
        /// The job text's hash, the cache key's part after `model_id:`.
        text_hash: String,
    },
    /// The same lease holder acked again (idempotent).
    Repeated,
    /// The token does not hold the lease.
    Stale,
    /// No such job.
    Missing,
    /// Refused, nothing changed (the lease is still held): the result names another model
    /// than the job's.
    WrongModel {
        /// The job's model.
        expected: String,
    },
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
    /// Refused: no live lock on the key carries this fence (the server never issued it for
    /// this key, or a newer holder took the lock).
    Unfenced,
}

/// Who vouches for a cache write's fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// A client's `PUT`: the fence must be the one of a live lock on the key.
    ByLock,
    /// An ack's write-through: the store checked the lease, and the fence is the lease's.
    ByLease,
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

/// The job queue: enqueue, leases, acks, retries, the dead-letter queue.
#[async_trait]
pub trait QueueStore: Send + Sync + std::fmt::Debug + 'static {
    /// Adds jobs that do not exist yet (by id, in any state); reports which were new.
    async fn enqueue(&self, jobs: Vec<JobRecord>, now: u64) -> Result<Vec<Enqueued>>;

    /// Leases up to `max` ready jobs (highest priority, then oldest) to `worker` for `lease_ms`.
    /// First moves due delayed jobs to ready and re-queues jobs whose lease expired (or
    /// dead-letters them when they used `max_attempts`). `sub`: who claims (the token's writer
    /// identity), kept with the lease and in the history entry of a delivery that fails.
    async fn claim(
        &self,
        worker: &str,
        sub: Option<&str>,
        max: u32,
        lease_ms: u64,
        max_attempts: u32,
        now: u64,
    ) -> Result<Claimed>;

    /// Extends the lease held with `token` to `now + lease_ms`, but never past `hold_ms` after
    /// the delivery began (its `leased_at`): one delivery holds a job at most that long, however
    /// it heartbeats. `None` when it is not held (lost or stale) or its hold is used up.
    async fn heartbeat(
        &self,
        id: &str,
        token: &str,
        lease_ms: u64,
        hold_ms: u64,
        now: u64,
    ) -> Result<Option<Lease>>;

    /// Extends many leases, each as [`QueueStore::heartbeat`] would, one answer per `(id,
    /// token)` in order. A store that can do the batch in one step overrides this; the default
    /// extends them one by one.
    async fn heartbeat_many(
        &self,
        leases: Vec<(String, String)>,
        lease_ms: u64,
        hold_ms: u64,
        now: u64,
    ) -> Result<Vec<Option<Lease>>> {
        let mut out = Vec::with_capacity(leases.len());
        for (id, token) in leases {
            out.push(self.heartbeat(&id, &token, lease_ms, hold_ms, now).await?);
        }
        Ok(out)
    }

    /// Finishes the job held with `token`.
    async fn ack(&self, id: &str, token: &str, result: JobResult, now: u64) -> Result<AckOutcome>;

    /// Finishes many jobs, each as [`QueueStore::ack`] would, one outcome per ack in order. A
    /// store that can do the batch in one step (one transaction) overrides this; the default
    /// acks one by one.
    async fn ack_many(&self, acks: Vec<AckInput>, now: u64) -> Result<Vec<AckOutcome>> {
        let mut out = Vec::with_capacity(acks.len());
        for a in acks {
            out.push(self.ack(&a.id, &a.token, a.result, now).await?);
        }
        Ok(out)
    }

    /// Gives the job back with an error: re-queued at `retry_at`, or dead-lettered when it is not
    /// retryable or used `max_attempts`. `None` when the token does not hold the lease. The
    /// attempt joins the job's history, which keeps the last [`MAX_HISTORY`] attempts.
    async fn nack(
        &self,
        id: &str,
        token: &str,
        error: JobError,
        retry_at: u64,
        max_attempts: u32,
        now: u64,
    ) -> Result<Option<NackResponse>>;

    /// Hands a lease back (a worker stopping) and makes the job ready at once. The job's first
    /// `free` releases do not count the attempt; past them a release is an attempt, as an expired
    /// lease is (a `released` entry joins the history, and on the job's `max_attempts`-th attempt
    /// it is dead-lettered): a worker cannot keep a job by releasing it and claiming it again.
    /// A redrive gives a job its free releases back.
    async fn release(
        &self,
        id: &str,
        token: &str,
        free: u32,
        max_attempts: u32,
        now: u64,
    ) -> Result<Released>;

    /// A job's status.
    async fn status(&self, id: &str) -> Result<Option<JobStatus>>;

    /// Up to `limit` dead letters, oldest first.
    async fn dlq(&self, limit: usize) -> Result<Vec<DlqEntry>>;

    /// Re-queues a dead job with a fresh attempt count. `false` when it is not dead.
    async fn redrive(&self, id: &str, now: u64) -> Result<bool>;

    /// Queue depth (delayed jobs already due count as ready).
    async fn depth(&self, now: u64) -> Result<QueueDepth>;

    /// Makes one small durable write (a `ready_probe` marker holding `now`): what
    /// `GET /readyz` asks of the store, so a full disk or a lost connection reads as not ready.
    async fn probe_write(&self, now: u64) -> Result<()>;
}

/// The remote cache: fenced entries with a TTL.
#[async_trait]
pub trait CacheStore: Send + Sync + std::fmt::Debug + 'static {
    /// A live cache entry.
    async fn cache_get(&self, key: &str, now: u64) -> Result<Option<CacheEntry>>;

    /// The live entries of many keys, in order, in one store step where the store has one (the
    /// claim looks up every job it hands out). By default one [`CacheStore::cache_get`] each.
    async fn cache_get_many(&self, keys: &[String], now: u64) -> Result<Vec<Option<CacheEntry>>> {
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            out.push(self.cache_get(k, now).await?);
        }
        Ok(out)
    }

    /// Writes `entry` unless a live entry with a newer fence is stored. With
    /// [`Fenced::ByLock`], only when a live lock on `key` carries `entry.fence` (the server
    /// issued that fence for this key); otherwise [`PutOutcome::Unfenced`].
    async fn cache_put(
        &self,
        key: &str,
        entry: CacheEntry,
        by: Fenced,
        now: u64,
    ) -> Result<PutOutcome>;

    /// Deletes an entry; `true` when one existed.
    async fn cache_delete(&self, key: &str) -> Result<bool>;

    /// Bytes of the live entries, [`crate::quota::entry_bytes`] each (the `max_cache_bytes`
    /// quota; read every sweep, not on a request's path).
    async fn cache_bytes(&self, now: u64) -> Result<u64>;

    /// Removes expired cache entries and locks (at most `limit` of each); returns how many.
    /// Stores with native expiry (Redis) have nothing to do.
    async fn sweep(&self, now: u64, limit: usize) -> Result<u64>;
}

/// Single-flight locks; their fences come from the same counter as leases.
#[async_trait]
pub trait LockStore: Send + Sync + std::fmt::Debug + 'static {
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
}

/// Numbered server events, delivered to every server sharing the store.
#[async_trait]
pub trait EventBus: Send + Sync + std::fmt::Debug + 'static {
    /// Numbers `event` and delivers it to every subscriber (on every server sharing the store).
    async fn publish(&self, event: ServerEvent) -> Result<u64>;

    /// Receives published events, in id order.
    fn subscribe(&self) -> broadcast::Receiver<NumberedEvent>;

    /// The id of the last event this store sent to its subscribers, or, before the first, the
    /// id up to which nothing is missing (the event hub's starting point; read after
    /// [`EventBus::subscribe`]: every later event reaches that receiver).
    fn last_event_id(&self) -> u64;
}

/// A finished job as [`ResultScan`] reads it back.
#[derive(Debug, Clone, PartialEq)]
pub struct DoneJob {
    /// Job id.
    pub id: String,
    /// The text that was embedded.
    pub text: String,
    /// Its result.
    pub result: JobResult,
}

/// One page of [`ResultScan::scan_done`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DonePage {
    /// Done jobs of this page.
    pub jobs: Vec<DoneJob>,
    /// The cursor of the next page; `None` when the scan is complete.
    pub next: Option<String>,
}

/// Finished jobs read back in pages: the dashboard's semantic search scores their vectors.
#[async_trait]
pub trait ResultScan: Send + Sync + std::fmt::Debug + 'static {
    /// About `limit` done jobs after `cursor` (`""` starts a scan). A complete scan sees every
    /// job that was done when it started and stayed done; callers dedupe by id all the same
    /// (a store may page by a key that moves).
    async fn scan_done(&self, cursor: &str, limit: usize) -> Result<DonePage>;
}

/// A writer's standing with the server: how many of its results were recomputed and found
/// equal, and whether it is quarantined.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Standing {
    /// Results (and cache writes) of this writer verified equal so far.
    pub verified: u64,
    /// Set while quarantined.
    pub quarantine: Option<Quarantine>,
}

/// Why and since when a writer is quarantined.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Quarantine {
    /// Since, Unix ms.
    pub at: u64,
    /// What was found (job or cache key, and how the vector differed).
    pub reason: String,
}

/// Something a writer wrote, as its provenance index records it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Written {
    /// A job's result.
    Job(String),
    /// A cache entry.
    Cache(String),
}

impl Written {
    /// `j:<id>` or `c:<key>` (how stores keep it).
    pub fn encode(&self) -> String {
        match self {
            Written::Job(id) => format!("j:{id}"),
            Written::Cache(k) => format!("c:{k}"),
        }
    }

    /// The inverse of [`Written::encode`].
    pub fn decode(s: &str) -> Option<Self> {
        match s.split_at_checked(2)? {
            ("j:", id) => Some(Written::Job(id.to_owned())),
            ("c:", k) => Some(Written::Cache(k.to_owned())),
            _ => None,
        }
    }
}

/// What result verification keeps (see `crate::integrity`): each writer's standing, the
/// provenance index (what each writer wrote), and the two steps that undo a writer's work.
#[async_trait]
pub trait IntegrityStore: Send + Sync + std::fmt::Debug + 'static {
    /// `sub`'s standing (a writer never seen has the default).
    async fn standing(&self, sub: &str) -> Result<Standing>;

    /// Adds `n` verified results to `sub`'s count; returns the new count.
    async fn add_verified(&self, sub: &str, n: u64) -> Result<u64>;

    /// Quarantines `sub`; `false` when it already was (the first reason is kept).
    async fn quarantine(&self, sub: &str, q: Quarantine) -> Result<bool>;

    /// Lifts `sub`'s quarantine and starts its probation again; `false` when it was not
    /// quarantined.
    async fn lift_quarantine(&self, sub: &str) -> Result<bool>;

    /// Every quarantined writer (at most `limit`).
    async fn quarantined(&self, limit: usize) -> Result<Vec<(String, Quarantine)>>;

    /// Records that `sub` wrote `items`.
    async fn note_written(&self, sub: &str, items: Vec<Written>) -> Result<()>;

    /// Everything `sub` wrote (that the store still records).
    async fn written_by(&self, sub: &str) -> Result<Vec<Written>>;

    /// The text and model of each job (`None` for an unknown id), in order: what the server
    /// recomputes a result from.
    async fn job_inputs(&self, ids: &[String]) -> Result<Vec<Option<(String, String)>>>;

    /// Puts finished jobs back in the queue (their result dropped, ready at once); returns the
    /// ids that were done and are queued again.
    async fn requeue_done(&self, ids: &[String], now: u64) -> Result<Vec<String>>;

    /// k-of-n agreement: records that `sub` proposes the vector with `digest` for job `id`
    /// (replacing its earlier proposal); returns every identity's proposal for the job.
    async fn propose(&self, id: &str, sub: &str, digest: &str) -> Result<Vec<(String, String)>>;

    /// Forgets job `id`'s proposals (its result is final).
    async fn clear_proposals(&self, id: &str) -> Result<()>;
}

/// A rate budget as [`BudgetStore::spend`] takes it: `per_min` units a minute, at most a minute's
/// worth at once (the shape of the server's own `governor` quotas, `Quota::per_minute`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// The budget's name within the store (`embed:tenant`, `embed:tok:{digest}`, …).
    pub name: String,
    /// Units a minute, at least 1.
    pub per_min: u32,
}

/// What [`BudgetStore::spend`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spend {
    /// Every budget paid.
    Spent,
    /// Nothing was taken: budget `budget` (an index into the list) cannot pay yet; it can in
    /// `retry_after_ms`.
    Wait {
        /// Which budget refused.
        budget: usize,
        /// When it can pay.
        retry_after_ms: u64,
    },
    /// Nothing was taken: the cost is more than a minute's worth of budget `budget`.
    Never {
        /// Which budget refused.
        budget: usize,
    },
}

/// Rate budgets a fleet of servers shares: what one token or tenant may spend a minute holds
/// across every server that opens the same store, not per server.
#[async_trait]
pub trait BudgetStore: Send + Sync + std::fmt::Debug + 'static {
    /// Takes `cost` units from every budget of `budgets`, or from none when one of them cannot
    /// pay. `Ok(None)`: the store is one server's own (embedded, memory), and the server's own
    /// buckets are the budgets.
    async fn spend(&self, budgets: &[Budget], cost: u32) -> Result<Option<Spend>> {
        let _ = (budgets, cost);
        Ok(None)
    }
}

/// A tenant's usage counters as its store keeps them: totals over the tenant's life, every
/// server's together (each server adds what it counted, `tenants::TenantUsage::flush`).
#[async_trait]
pub trait UsageStore: Send + Sync + std::fmt::Debug + 'static {
    /// Adds `n` to each named counter.
    async fn add_usage(&self, deltas: &[(String, u64)]) -> Result<()>;

    /// Every counter's total (a counter never added to is absent).
    async fn usage(&self) -> Result<std::collections::BTreeMap<String, u64>>;
}

/// Everything the server keeps. All methods are atomic with respect to each other.
pub trait Store:
    QueueStore
    + CacheStore
    + LockStore
    + EventBus
    + ResultScan
    + IntegrityStore
    + BudgetStore
    + UsageStore
{
}

impl<T> Store for T where
    T: QueueStore
        + CacheStore
        + LockStore
        + EventBus
        + ResultScan
        + IntegrityStore
        + BudgetStore
        + UsageStore
{
}

/// Attempts kept in a job's history (the oldest are dropped).
pub const MAX_HISTORY: usize = 10;

/// The `released` history entry (and dead-letter reason) of a release that counted.
pub(crate) fn released_error(free: u32) -> JobError {
    JobError {
        code: ternflow_core::ErrorCode::Released.as_str().to_owned(),
        message: format!(
            "handed back by release after the job's {free} free releases: counted as an attempt"
        ),
        retryable: true,
    }
}
/// Longest error message kept in a history entry or a dead letter (bytes).
pub const MAX_ERROR_MESSAGE: usize = 4 * 1024;

/// Cuts an error message to [`MAX_ERROR_MESSAGE`] bytes (at a character boundary).
pub fn cap_error(mut e: JobError) -> JobError {
    if e.message.len() > MAX_ERROR_MESSAGE {
        let mut cut = MAX_ERROR_MESSAGE;
        while !e.message.is_char_boundary(cut) {
            cut -= 1;
        }
        e.message.truncate(cut);
        e.message.push('…');
    }
    e
}

/// Appends an attempt, keeping the last [`MAX_HISTORY`].
pub fn push_history(history: &mut Vec<Attempt>, a: Attempt) {
    history.push(a);
    if history.len() > MAX_HISTORY {
        let extra = history.len() - MAX_HISTORY;
        history.drain(..extra);
    }
}

/// A fresh random token (128 bits, hex).
pub fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}
