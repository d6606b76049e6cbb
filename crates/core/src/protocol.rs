//! The HTTP protocol types shared by the server and the worker.
//!
//! Every body is JSON. Times are Unix milliseconds (`u64`). Vectors are [`Vector`]s: base64 of
//! little-endian `f32` bytes (see [`crate::codec`]). Optional fields may be omitted on input and
//! are omitted on output when empty. `docs/protocol.md` walks through the routes; this module is
//! the source of truth for the shapes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::codec::Vector;

/// Default number of jobs a claim asks for.
pub const DEFAULT_CLAIM_MAX: u32 = 1;

fn default_claim_max() -> u32 {
    DEFAULT_CLAIM_MAX
}

fn default_true() -> bool {
    true
}

// ----------------------------------------------------------------------------------------------
// Enqueue
// ----------------------------------------------------------------------------------------------

/// One job as a producer submits it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewJob {
    /// Job id; defaults to [`crate::keys::job_id`] of (model id, text) so duplicates collapse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The text to embed.
    pub text: String,
    /// Model the vector must come from; defaults to the server's model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_id: Option<String>,
    /// Higher is claimed first (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Do not deliver before this many milliseconds have passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Opaque producer data, returned with the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
}

impl NewJob {
    /// A job with only its text set.
    pub fn text(text: impl Into<String>) -> Self {
        NewJob {
            id: None,
            text: text.into(),
            model_id: None,
            priority: None,
            delay_ms: None,
            meta: None,
        }
    }
}

/// `POST /v1/jobs` body: one job, or `{ "jobs": [...] }`.
///
/// Read in one pass by a hand-written [`Deserialize`]: `#[serde(untagged)]` would first copy the
/// whole body (a thousand jobs) into serde's generic content tree and then try each variant on
/// it, and answer a malformed body with "did not match any variant" instead of what is wrong.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum EnqueueRequest {
    /// A batch.
    Batch {
        /// The jobs, in order.
        jobs: Vec<NewJob>,
    },
    /// A single job.
    One(NewJob),
}

impl<'de> Deserialize<'de> for EnqueueRequest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = EnqueueRequest;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a job object or {\"jobs\": [...]}")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<EnqueueRequest, A::Error> {
                use serde::de::Error as _;
                let mut jobs: Option<Vec<NewJob>> = None;
                let mut one = NewJob::text(String::new());
                let mut text = false;
                while let Some(k) = m.next_key::<std::borrow::Cow<'de, str>>()? {
                    match &*k {
                        "jobs" => jobs = Some(m.next_value()?),
                        "text" => {
                            one.text = m.next_value()?;
                            text = true;
                        }
                        "id" => one.id = m.next_value()?,
                        "model_id" => one.model_id = m.next_value()?,
                        "priority" => one.priority = m.next_value()?,
                        "delay_ms" => one.delay_ms = m.next_value()?,
                        "meta" => one.meta = m.next_value()?,
                        // Unknown fields are ignored, as everywhere in the protocol.
                        _ => {
                            m.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                match (jobs, text) {
                    (Some(jobs), false) => Ok(EnqueueRequest::Batch { jobs }),
                    (Some(_), true) => Err(A::Error::custom(
                        "a body is one job or {\"jobs\": [...]}, not both",
                    )),
                    (None, true) => Ok(EnqueueRequest::One(one)),
                    (None, false) => Err(A::Error::missing_field("text")),
                }
            }
        }
        d.deserialize_map(V)
    }
}

impl EnqueueRequest {
    /// The jobs, in submission order.
    pub fn into_jobs(self) -> Vec<NewJob> {
        match self {
            EnqueueRequest::Batch { jobs } => jobs,
            EnqueueRequest::One(job) => vec![job],
        }
    }
}

/// What happened to one submitted job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enqueued {
    /// The job's id (given or derived).
    pub id: String,
    /// `false` when a job with this id already existed (in any state, done included): nothing changed.
    pub new: bool,
}

/// `POST /v1/jobs` response, one entry per submitted job, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnqueueResponse {
    /// Per-job outcome.
    pub jobs: Vec<Enqueued>,
}

// ----------------------------------------------------------------------------------------------
// Claim, heartbeat, ack, nack
// ----------------------------------------------------------------------------------------------

/// `POST /v1/jobs/claim` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRequest {
    /// Worker name, for logs, metrics and attempt history.
    pub worker: String,
    /// Most jobs to hand out (the worker's free in-flight slots).
    #[serde(default = "default_claim_max")]
    pub max: u32,
    /// Long-poll: wait up to this long for work when none is ready (0 = answer at once).
    #[serde(default)]
    pub wait_ms: u64,
    /// The model the worker embeds with. A job enqueued without a model id (on a server with
    /// no model of its own) is handed out with this one filled in, so the worker's result and
    /// its cache key name the model that really produced the vector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_id: Option<String>,
}

/// A lease on a job: proof of ownership until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Random token; heartbeat, ack and nack must present it.
    pub token: String,
    /// Monotonically increasing fencing number (never reused, across restarts).
    pub fence: u64,
    /// The job is re-delivered to someone else after this time unless heartbeated.
    pub expires_at: u64,
}

/// A job handed to a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimedJob {
    /// Job id.
    pub id: String,
    /// Text to embed.
    pub text: String,
    /// Model the vector must come from.
    pub model_id: String,
    /// 1 for the first delivery, 2 for the second, …
    pub attempt: u32,
    /// W3C `traceparent` for this delivery (same trace id for every attempt of a job).
    pub traceparent: String,
    /// The lease.
    pub lease: Lease,
    /// Producer data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
    /// Whether the server looked this job's text up in the remote cache when it was claimed
    /// (then `cached` is the answer and the worker needs no `GET /v1/cache/{key}`).
    #[serde(default)]
    pub cache_checked: bool,
    /// The remote cache's live entry for this job's text at claim time, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached: Option<CacheEntry>,
    /// The server already finished this job at claim time with `cached` (result source
    /// `remote`, acked under this lease): the worker only keeps the vector in its local cache
    /// and sends no ack (one sent anyway is answered as a repeat).
    #[serde(default, skip_serializing_if = "is_false")]
    pub resolved: bool,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_false(b: &bool) -> bool {
    !*b
}

/// `POST /v1/jobs/claim` response (empty when the wait ran out).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimResponse {
    /// Claimed jobs.
    pub jobs: Vec<ClaimedJob>,
}

/// `POST /v1/jobs/{id}/heartbeat` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatRequest {
    /// The lease token.
    pub token: String,
}

/// `POST /v1/jobs/heartbeat` body: extends many leases in one request (at most the server's
/// claim limit, 256 by default): a worker sends every lease it holds at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatBatchRequest {
    /// The leases, each answered on its own.
    pub leases: Vec<LeaseRef>,
}

/// A lease named by its job and token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRef {
    /// Job id.
    pub id: String,
    /// The lease token.
    pub token: String,
}

/// One answer of a [`HeartbeatBatchResponse`], in the request's order: the extended lease, or
/// none when the token does not hold it (lost, finished, unknown or forged).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatItem {
    /// Job id.
    pub id: String,
    /// The lease with its new expiry; absent when it is lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
}

/// `POST /v1/jobs/heartbeat` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatBatchResponse {
    /// One answer per lease, in order.
    pub results: Vec<HeartbeatItem>,
}

/// `POST /v1/jobs/nack` body: gives many jobs back in one request (at most the claim limit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NackBatchRequest {
    /// The nacks, each answered on its own.
    pub nacks: Vec<NackItem>,
}

/// One nack of a batch: the job id and what `POST /v1/jobs/{id}/nack` would carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NackItem {
    /// Job id.
    pub id: String,
    /// The nack.
    #[serde(flatten)]
    pub nack: NackRequest,
}

/// One answer of a [`NackBatchResponse`], in the request's order: what the single nack would
/// have answered, or `lease_lost` / `missing`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum NackItemOutcome {
    /// Re-delivered at or after `available_at`.
    Retry {
        /// Earliest re-delivery.
        available_at: u64,
    },
    /// Moved to the dead-letter queue.
    Dead,
    /// The token does not hold the lease.
    LeaseLost,
    /// No such job.
    Missing,
}

/// One answer of a [`NackBatchResponse`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NackItemResult {
    /// Job id.
    pub id: String,
    /// What happened.
    #[serde(flatten)]
    pub outcome: NackItemOutcome,
}

/// `POST /v1/jobs/nack` response: one result per nack, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NackBatchResponse {
    /// The results.
    pub results: Vec<NackItemResult>,
}

/// `POST /v1/jobs/{id}/release` body: hand a lease back without using an attempt (a worker
/// stopping before it finished the job).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseRequest {
    /// The lease token.
    pub token: String,
}

/// `POST /v1/jobs/{id}/heartbeat` response: the extended lease (same token and fence).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatResponse {
    /// The lease, with its new expiry.
    pub lease: Lease,
}

/// Where a vector came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResultSource {
    /// Computed by the engine inside the worker.
    Engine,
    /// Computed by the server (`POST /v1/embed`).
    Backend,
    /// Found in the worker's local cache.
    Local,
    /// Found in the remote cache.
    Remote,
}

/// A finished job's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobResult {
    /// Model that produced the vector.
    pub model_id: String,
    /// The embedding.
    pub vector: Vector,
    /// Where it came from.
    pub source: ResultSource,
    /// Who wrote it, recorded by the server (whatever a client sends here is replaced); shown
    /// to admins only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<Provenance>,
}

/// Who wrote a result or a cache entry: recorded by the server from the caller's verified
/// token, so a liar's writes can be found and undone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// The tenant of the writer's token.
    pub tenant: String,
    /// The writer's identity: a signed token's `sub` (`tok:<digest>` when it has none), or
    /// `static:<digest>` for a static token.
    pub sub: String,
    /// The worker name the writer gave (self-reported, validated, for people to read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// When, Unix ms (the server's clock).
    pub at: u64,
    /// Whether the server recomputed the vector and found it equal before storing it.
    #[serde(default)]
    pub verified: bool,
}

/// `POST /v1/jobs/{id}/ack` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AckRequest {
    /// The lease token.
    pub token: String,
    /// The acking worker's name (recorded in the result's provenance; optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The result.
    pub result: JobResult,
    /// Also store the result in the remote cache (write-through without a second upload of the
    /// vector): the server writes it on the first ack, fenced like `PUT /v1/cache/{key}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<AckCacheWrite>,
}

/// The remote cache write an ack can carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckCacheWrite {
    /// Cache key (`model_id:texthash`; its model prefix must be the result's model).
    pub key: String,
    /// The writer's fence: the lease's, when the lease is the single-flight guard.
    pub fence: u64,
    /// Requested TTL; the server clamps it and adds jitter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

/// A worker-reported failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobError {
    /// Short machine-readable code (`engine_failed`, `lease_expired`, …).
    pub code: String,
    /// Human-readable detail.
    pub message: String,
    /// `false` sends the job straight to the dead-letter queue.
    #[serde(default = "default_true")]
    pub retryable: bool,
}

/// `POST /v1/jobs/{id}/nack` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NackRequest {
    /// The lease token.
    pub token: String,
    /// Why.
    pub error: JobError,
}

/// One delivery of a job that did not end in success.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// Attempt number (1-based).
    pub attempt: u32,
    /// Worker that held the lease.
    pub worker: String,
    /// When the lease was granted.
    pub leased_at: u64,
    /// When it ended (nack or expiry).
    pub ended_at: u64,
    /// The error (a `lease_expired` error for an expired lease).
    pub error: JobError,
}

/// A job's state, as `GET /v1/jobs/{id}` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum JobState {
    /// Waiting to be claimed (at or after `available_at`).
    Queued {
        /// Earliest delivery time.
        available_at: u64,
    },
    /// Held by a worker.
    Leased {
        /// Lease expiry.
        expires_at: u64,
        /// Worker holding it.
        worker: String,
    },
    /// Finished.
    Done {
        /// The result.
        result: JobResult,
    },
    /// Dead-lettered.
    Dead {
        /// The last error.
        error: JobError,
        /// Every failed attempt.
        history: Vec<Attempt>,
    },
}

/// `GET /v1/jobs/{id}` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobStatus {
    /// Job id.
    pub id: String,
    /// Deliveries so far.
    pub attempt: u32,
    /// State.
    #[serde(flatten)]
    pub state: JobState,
}

/// `POST /v1/jobs/{id}/nack` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub enum NackResponse {
    /// Re-delivered at or after `available_at`.
    Retry {
        /// Earliest re-delivery.
        available_at: u64,
    },
    /// Moved to the dead-letter queue.
    Dead,
}

/// `POST /v1/jobs/{id}/ack` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckResponse {
    /// Job id.
    pub id: String,
    /// `false` when this was a repeated ack by the same lease holder (idempotent).
    pub first: bool,
}

/// One ack of a [`AckBatchRequest`]: the single ack's body plus the job id.
///
/// Read through `AckItemWire` (the same JSON, flat): `#[serde(flatten)]` on the read side
/// buffers every item through serde's generic content tree, which cost the server a measurable
/// share of each batch ack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "AckItemWire")]
pub struct AckItem {
    /// Job id.
    pub id: String,
    /// The ack, as `POST /v1/jobs/{id}/ack` takes it.
    #[serde(flatten)]
    pub ack: AckRequest,
}

/// [`AckItem`] as it is read: its fields side by side.
#[derive(Deserialize)]
struct AckItemWire {
    id: String,
    token: String,
    #[serde(default)]
    worker: Option<String>,
    result: JobResult,
    #[serde(default)]
    cache: Option<AckCacheWrite>,
}

impl From<AckItemWire> for AckItem {
    fn from(w: AckItemWire) -> Self {
        AckItem {
            id: w.id,
            ack: AckRequest {
                token: w.token,
                worker: w.worker,
                result: w.result,
                cache: w.cache,
            },
        }
    }
}

/// `POST /v1/jobs/ack` body: many acks in one request (at most 256).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AckBatchRequest {
    /// The acks, each answered on its own.
    pub acks: Vec<AckItem>,
    /// The acking worker's name, for every ack that names none (recorded in provenance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
}

/// How one ack of a batch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckItemOutcome {
    /// The job is done (the first ack).
    Done,
    /// The same lease holder acked before (idempotent).
    Repeated,
    /// The token does not hold the lease.
    LeaseLost,
    /// No such job.
    Missing,
    /// The ack itself is malformed (an empty vector, no model id, a bad id); see `error`.
    Refused,
    /// Taken as one of the k results that must agree before the job is final (a model the
    /// server cannot recompute, k-of-n agreement on): the lease is over, the job goes to
    /// another worker; nothing to do for this one.
    Pending,
}

/// One answer of a [`AckBatchResponse`], in the request's order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AckItemResult {
    /// Job id.
    pub id: String,
    /// What happened.
    pub outcome: AckItemOutcome,
    /// Why a `refused` ack was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}

/// `POST /v1/jobs/ack` response: one result per ack, in order. A lost lease or a bad ack never
/// affects the others.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AckBatchResponse {
    /// The results.
    pub results: Vec<AckItemResult>,
}

/// The submitted job, as kept in the dead-letter queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Job id.
    pub id: String,
    /// Text.
    pub text: String,
    /// Model.
    pub model_id: String,
    /// Priority.
    pub priority: i32,
    /// Producer data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
}

/// A dead letter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DlqEntry {
    /// The job.
    pub job: JobSpec,
    /// The last error.
    pub error: JobError,
    /// Every failed attempt, oldest first.
    pub history: Vec<Attempt>,
    /// When it was dead-lettered.
    pub dead_at: u64,
}

/// `GET /v1/dlq` response (oldest first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DlqList {
    /// Dead letters.
    pub entries: Vec<DlqEntry>,
}

// ----------------------------------------------------------------------------------------------
// Cache and locks
// ----------------------------------------------------------------------------------------------

/// A remote cache entry (`GET /v1/cache/{key}` response; `PUT` conflict body).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheEntry {
    /// Model that produced the vector.
    pub model_id: String,
    /// The vector.
    pub vector: Vector,
    /// Fence of the lock holder that wrote it.
    pub fence: u64,
    /// Expiry (TTL with jitter applied).
    pub expires_at: u64,
    /// Who wrote it (admins only; see [`Provenance`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<Provenance>,
}

/// `PUT /v1/cache/{key}` body. Refused with 409 when the stored entry has a newer fence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachePut {
    /// Model that produced the vector.
    pub model_id: String,
    /// The vector.
    pub vector: Vector,
    /// The writer's fence (from its lock grant).
    pub fence: u64,
    /// Requested TTL; the server clamps it and adds jitter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// The text the vector embeds: the server checks that it hashes to the key and may
    /// recompute the vector (required from workers the server verifies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The writing worker's name (recorded in the entry's provenance; optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
}

/// `POST /v1/locks/{key}` body (may be empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRequest {
    /// Requested TTL; the server clamps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

/// A lock grant (acquire and renew responses).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockGrant {
    /// Random token; renew and release must present it.
    pub token: String,
    /// Fencing number; pass it to `PUT /v1/cache/{key}`.
    pub fence: u64,
    /// The lock frees itself at this time unless renewed.
    pub expires_at: u64,
}

/// `POST /v1/locks/{key}/renew` and `DELETE /v1/locks/{key}` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockToken {
    /// The grant's token.
    pub token: String,
    /// New TTL (renew only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

// ----------------------------------------------------------------------------------------------
// Embed
// ----------------------------------------------------------------------------------------------

/// `POST /v1/embed` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmbedRequest {
    /// Texts to embed.
    pub texts: Vec<String>,
}

/// `POST /v1/embed` response, one vector per text, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbedResponse {
    /// The server's model id.
    pub model_id: String,
    /// Vectors.
    pub vectors: Vec<Vector>,
}

// ----------------------------------------------------------------------------------------------
// Errors, events, metrics
// ----------------------------------------------------------------------------------------------

/// The error body every non-2xx response carries: `{ "error": { "code", "message" } }`, plus
/// what a conflict has to say: the stored cache `entry` of a refused `PUT` (`stale_fence`), and
/// the current holder's `expires_at` of a `lock_held`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
    /// `stale_fence`: the newer entry that is stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<CacheEntry>,
    /// `lock_held`: when the current holder's lock runs out (unless renewed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
}

/// Inside [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Machine-readable code (`bad_request`, `lease_lost`, `queue_full`, …).
    pub code: String,
    /// Human-readable detail.
    pub message: String,
}

/// `jobs` SSE event data: work is available.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobsEvent {
    /// Jobs ready to claim when the event was sent.
    pub depth: u64,
}

/// `invalidate` SSE event data: drop these cache keys locally.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvalidateEvent {
    /// Cache keys.
    pub keys: Vec<String>,
}

/// An SSE event: the variant name is the SSE `event:` field, the content its `data:` JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", content = "data", rename_all = "lowercase")]
pub enum ServerEvent {
    /// Work available.
    Jobs(JobsEvent),
    /// Cache keys to drop.
    Invalidate(InvalidateEvent),
    /// Jobs that finished (for producers waiting on results).
    Finished(FinishedEvent),
    /// The stream has a gap: events may have been missed (see [`ResetEvent`]).
    Reset(ResetEvent),
}

/// `reset` SSE event data, sent to every role: events before this one may have been missed (the
/// client resumed from an id older than the server still holds, the server restarted without
/// a clean shutdown, or its event subscription was lost). A client cannot learn which: it
/// resynchronises. A worker drops its local cache (it may have missed `invalidate` events); a
/// producer asks `POST /v1/jobs/status` for the jobs it waits on (it may have missed
/// `finished` events). The event's id is where the stream resumes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResetEvent {
    /// Why (for logs): `resumed_too_late`, `server_restarted`, `subscription_lost`,
    /// `server_fell_behind`, `ids_went_backwards`.
    pub reason: String,
}

/// `finished` SSE event data: jobs that were just done or dead-lettered. Producers subscribe
/// to these (`GET /v1/events` with a producer token) and fetch the results with
/// `POST /v1/jobs/status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinishedEvent {
    /// Jobs done.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub done: Vec<String>,
    /// Jobs dead-lettered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dead: Vec<String>,
}

/// `POST /v1/jobs/status` body: the status of many jobs at once (at most 1000 ids).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusRequest {
    /// Job ids.
    pub ids: Vec<String>,
    /// Whether done jobs carry their vectors (default `true`); `false` answers states and result
    /// sources only, a cheap poll for a producer waiting on many jobs.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub vectors: bool,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// `POST /v1/jobs/status` response: the status of every known id, in the request's order, and
/// the ids the server does not know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusList {
    /// Known jobs, in order.
    pub jobs: Vec<JobStatus>,
    /// Unknown ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
}

impl ServerEvent {
    /// The SSE `event:` name.
    pub fn name(&self) -> &'static str {
        match self {
            ServerEvent::Jobs(_) => "jobs",
            ServerEvent::Invalidate(_) => "invalidate",
            ServerEvent::Finished(_) => "finished",
            ServerEvent::Reset(_) => "reset",
        }
    }

    /// The SSE `data:` JSON.
    pub fn data_json(&self) -> String {
        let r = match self {
            ServerEvent::Jobs(e) => serde_json::to_string(e),
            ServerEvent::Invalidate(e) => serde_json::to_string(e),
            ServerEvent::Finished(e) => serde_json::to_string(e),
            ServerEvent::Reset(e) => serde_json::to_string(e),
        };
        r.unwrap_or_else(|_| "{}".to_owned())
    }
}

/// `POST /v1/metrics` body: a worker's metrics snapshot (cumulative counters, current gauges).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerMetrics {
    /// Worker id.
    pub worker: String,
    /// Monotonic counters (`jobs_done`, `cache_hits_local`, …).
    #[serde(default)]
    pub counters: BTreeMap<String, u64>,
    /// Gauges (`in_flight`, `breaker_open`, …).
    #[serde(default)]
    pub gauges: BTreeMap<String, f64>,
}

/// Queue depth by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueDepth {
    /// Claimable now.
    pub ready: u64,
    /// Waiting for a delay or a retry backoff.
    pub delayed: u64,
    /// Leased to workers.
    pub leased: u64,
    /// In the dead-letter queue.
    pub dead: u64,
}

/// `GET /v1/stats` response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Queue depth.
    pub queue: QueueDepth,
    /// Server counters since start (`jobs_enqueued`, `jobs_acked`, …).
    pub counters: BTreeMap<String, u64>,
    /// Jobs acked per second over the last minute.
    pub ack_rate: f64,
    /// Latest snapshot per worker.
    pub workers: BTreeMap<String, WorkerMetrics>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn enqueue_accepts_one_or_batch() {
        let one: EnqueueRequest = serde_json::from_value(json!({"text": "hi"})).unwrap();
        assert_eq!(one.into_jobs(), vec![NewJob::text("hi")]);
        let batch: EnqueueRequest =
            serde_json::from_value(json!({"jobs": [{"text": "a", "priority": 2}, {"text": "b"}]}))
                .unwrap();
        let jobs = batch.into_jobs();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].priority, Some(2));
        assert!(serde_json::from_value::<EnqueueRequest>(json!({"nope": 1})).is_err());
    }

    #[test]
    fn claim_defaults() {
        let c: ClaimRequest = serde_json::from_value(json!({"worker": "w"})).unwrap();
        assert_eq!((c.max, c.wait_ms), (1, 0));
    }

    #[test]
    fn ack_round_trip_and_source_names() {
        let a = AckRequest {
            cache: None,
            token: "t".into(),
            worker: None,
            result: JobResult {
                model_id: "m".into(),
                vector: Vector(vec![1.0]),
                source: ResultSource::Backend,
                by: None,
            },
        };
        let v = serde_json::to_value(&a).unwrap();
        assert_eq!(
            v,
            json!({"token": "t", "result": {"model_id": "m", "vector": "AACAPw==", "source": "backend"}})
        );
        assert_eq!(serde_json::from_value::<AckRequest>(v).unwrap(), a);
    }

    #[test]
    fn job_status_is_tagged_by_state() {
        let s = JobStatus {
            id: "x".into(),
            attempt: 1,
            state: JobState::Queued { available_at: 5 },
        };
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            json!({"id": "x", "attempt": 1, "state": "queued", "available_at": 5})
        );
        let dead = JobStatus {
            id: "x".into(),
            attempt: 3,
            state: JobState::Dead {
                error: JobError {
                    code: "c".into(),
                    message: "m".into(),
                    retryable: false,
                },
                history: vec![],
            },
        };
        let v = serde_json::to_value(&dead).unwrap();
        assert_eq!(v["state"], "dead");
        assert_eq!(serde_json::from_value::<JobStatus>(v).unwrap(), dead);
    }

    #[test]
    fn enqueue_bodies_read_in_one_pass() {
        let one: EnqueueRequest =
            serde_json::from_str(r#"{"text": "a", "priority": 2, "x": [1]}"#).unwrap();
        let mut want = NewJob::text("a");
        want.priority = Some(2);
        assert_eq!(one, EnqueueRequest::One(want));
        let batch: EnqueueRequest =
            serde_json::from_str(r#"{"jobs": [{"text": "a"}, {"text": "b", "id": "j"}]}"#).unwrap();
        let jobs = batch.clone().into_jobs();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[1].id.as_deref(), Some("j"));
        // Written and read back unchanged.
        let back: EnqueueRequest =
            serde_json::from_str(&serde_json::to_string(&batch).unwrap()).unwrap();
        assert_eq!(back, batch);
        let e = serde_json::from_str::<EnqueueRequest>(r#"{"priority": 1}"#).unwrap_err();
        assert!(e.to_string().contains("missing field `text`"), "{e}");
        let e = serde_json::from_str::<EnqueueRequest>(r#"{"jobs": [{"txt": "a"}]}"#).unwrap_err();
        assert!(e.to_string().contains("missing field `text`"), "{e}");
        let e = serde_json::from_str::<EnqueueRequest>(r#"{"text": "a", "jobs": []}"#).unwrap_err();
        assert!(e.to_string().contains("not both"), "{e}");
        assert!(serde_json::from_str::<EnqueueRequest>(r#"{"text": 5}"#).is_err());
        assert!(serde_json::from_str::<EnqueueRequest>("[]").is_err());
    }

    #[test]
    fn nack_error_retryable_defaults_true() {
        let n: NackRequest =
            serde_json::from_value(json!({"token": "t", "error": {"code": "c", "message": "m"}}))
                .unwrap();
        assert!(n.error.retryable);
    }

    #[test]
    fn events() {
        let e = ServerEvent::Jobs(JobsEvent { depth: 3 });
        assert_eq!(e.name(), "jobs");
        assert_eq!(e.data_json(), r#"{"depth":3}"#);
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v, json!({"event": "jobs", "data": {"depth": 3}}));
        assert_eq!(serde_json::from_value::<ServerEvent>(v).unwrap(), e);
    }

    #[test]
    fn error_body_shape() {
        let b = ErrorBody {
            error: ErrorDetail {
                code: "not_found".into(),
                message: "no such job".into(),
            },
            entry: None,
            expires_at: None,
        };
        assert_eq!(
            serde_json::to_value(&b).unwrap(),
            json!({"error": {"code": "not_found", "message": "no such job"}})
        );
    }
}
