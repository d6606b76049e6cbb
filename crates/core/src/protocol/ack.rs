//! Ack: a finished job's result (single and batched), where its vector came from and who wrote it.

use serde::{Deserialize, Serialize};

use super::{ErrorDetail, Vector};

/// Where a vector came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    /// What the worker spent on the job, step by step: exported by a tracing server as spans
    /// in the job's trace (under the delivery its claim opened). Never affects the ack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<JobTiming>,
}

/// A worker's account of one delivery of a job ([`AckRequest::timing`]). Times are durations on
/// the worker's clock, placed by the server before the ack's arrival (so no clock needs to
/// agree with another); a server takes at most [`JobTiming::MAX_STEPS`] steps, inside `run_us`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobTiming {
    /// The delivery's `traceparent`, as the claim handed it out ([`ClaimedJob::traceparent`](super::ClaimedJob::traceparent)):
    /// the server exports the steps only under a delivery it opened for this job.
    pub traceparent: String,
    /// From the job's start on the worker to the ack being sent, in microseconds.
    pub run_us: u64,
    /// The steps, in the order they started.
    #[serde(default)]
    pub steps: Vec<StepTiming>,
}

impl JobTiming {
    /// Steps a server exports of one ack at most (the rest are dropped).
    pub const MAX_STEPS: usize = 16;
}

/// One step of a job on the worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StepTiming {
    /// Which step.
    pub step: Step,
    /// When it started, in microseconds after the job's start.
    pub start_us: u64,
    /// How long it took, in microseconds.
    pub us: u64,
    /// It failed (the next step is what the worker fell back to).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
}

/// A worker's steps on a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// The local cache (IndexedDB in a browser) read.
    LocalCache,
    /// `GET /v1/cache/{key}`.
    RemoteCache,
    /// Waiting for a text's single-flight lock.
    Lock,
    /// The engine's embed.
    Engine,
    /// `POST /v1/embed` (the backend fallback).
    Backend,
}

impl Step {
    /// The span name a server exports the step under.
    pub fn span_name(self) -> &'static str {
        match self {
            Step::LocalCache => "worker local_cache",
            Step::RemoteCache => "worker remote_cache",
            Step::Lock => "worker lock",
            Step::Engine => "worker engine",
            Step::Backend => "worker backend",
        }
    }
}

/// The remote cache write an ack can carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AckCacheWrite {
    /// Cache key (`model_id:texthash`; its model prefix must be the result's model).
    pub key: String,
    /// The writer's fence: the lease's, when the lease is the single-flight guard.
    pub fence: u64,
    /// Requested TTL; the server clamps it and adds jitter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

/// `POST /v1/jobs/{id}/ack` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
struct AckItemWire {
    id: String,
    token: String,
    #[serde(default)]
    worker: Option<String>,
    result: JobResult,
    #[serde(default)]
    cache: Option<AckCacheWrite>,
    #[serde(default)]
    timing: Option<JobTiming>,
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
                timing: w.timing,
            },
        }
    }
}

/// `POST /v1/jobs/ack` body: many acks in one request (at most 256).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AckBatchRequest {
    /// The acks, each answered on its own.
    pub acks: Vec<AckItem>,
    /// The acking worker's name, for every ack that names none (recorded in provenance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
}

/// How one ack of a batch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    /// The ack itself is malformed (an empty vector, no model id, a bad id, a job the batch
    /// already named); see `error`.
    Refused,
    /// Taken as one of the k results that must agree before the job is final (a model the
    /// server cannot recompute, k-of-n agreement on): the lease is over, the job goes to
    /// another worker; nothing to do for this one.
    Pending,
}

/// One answer of a [`AckBatchResponse`], in the request's order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AckBatchResponse {
    /// The results.
    pub results: Vec<AckItemResult>,
}
