//! Claim and keep: claiming jobs (`POST /v1/jobs/claim`), the lease that proves ownership,
//! heartbeats (single and batched) and handing a job back (`release`).

use serde::{Deserialize, Serialize};

use super::CacheEntry;

/// Default number of jobs a claim asks for.
pub const DEFAULT_CLAIM_MAX: u32 = 1;

fn default_claim_max() -> u32 {
    DEFAULT_CLAIM_MAX
}

/// `POST /v1/jobs/claim` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    /// The worker's session: a random id (1–64 characters of `[A-Za-z0-9_-]`) its page picked
    /// for this run. A release naming it ([`ReleaseBatchRequest::session`]) also hands back what
    /// the session claimed that the page could not know of yet, and the session's later claims
    /// are refused (`session_ended`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

/// A lease on a job: proof of ownership until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ClaimResponse {
    /// Claimed jobs.
    pub jobs: Vec<ClaimedJob>,
}

/// `POST /v1/jobs/{id}/heartbeat` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HeartbeatRequest {
    /// The lease token.
    pub token: String,
}

/// `POST /v1/jobs/heartbeat` body: extends many leases in one request (at most the server's
/// claim limit, 256 by default): a worker sends every lease it holds at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HeartbeatBatchRequest {
    /// The leases, each answered on its own.
    pub leases: Vec<LeaseRef>,
}

/// A lease named by its job and token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LeaseRef {
    /// Job id.
    pub id: String,
    /// The lease token.
    pub token: String,
}

/// One answer of a [`HeartbeatBatchResponse`], in the request's order: the extended lease, or
/// none when the token does not hold it (lost, finished, unknown or forged).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HeartbeatItem {
    /// Job id.
    pub id: String,
    /// The lease with its new expiry; absent when it is lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
}

/// `POST /v1/jobs/heartbeat` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HeartbeatBatchResponse {
    /// One answer per lease, in order.
    pub results: Vec<HeartbeatItem>,
}

/// `POST /v1/jobs/{id}/heartbeat` response: the extended lease (same token and fence).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HeartbeatResponse {
    /// The lease, with its new expiry.
    pub lease: Lease,
}

/// `POST /v1/jobs/{id}/release` body: hand a lease back without using an attempt (a worker
/// stopping before it finished the job).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ReleaseRequest {
    /// The lease token.
    pub token: String,
}

/// `POST /v1/jobs/release` body: hands many leases back in one request (at most the server's
/// claim limit): a worker that stops, or whose page goes away (`pagehide`, sent with `fetch`'s
/// `keepalive` so it outlives the page), gives back every lease it holds at once, and the jobs
/// are claimable again at once instead of after their leases.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ReleaseBatchRequest {
    /// The leases, each answered on its own (may be empty when `session` is given).
    #[serde(default)]
    pub leases: Vec<LeaseRef>,
    /// Ends this worker session ([`ClaimRequest::session`]) of the caller's: every lease it
    /// holds through this server is handed back too (a page learns of a claim only after it
    /// landed, and one may still be on its way at the close), and its later claims are refused
    /// with `session_ended`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

/// What a release did to its job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReleaseOutcome {
    /// Ready again at once; the delivery used no attempt.
    Released,
    /// Ready again, the delivery counted as an attempt (the job's free releases are used up).
    Counted,
    /// Counted, and that was its last attempt: dead-lettered.
    Dead,
    /// The token does not hold the lease (lost, finished, unknown or forged): nothing changed.
    Lost,
}

/// One answer of a [`ReleaseBatchResponse`], in the request's order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ReleaseItem {
    /// Job id.
    pub id: String,
    /// What the release did.
    pub outcome: ReleaseOutcome,
}

/// `POST /v1/jobs/release` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ReleaseBatchResponse {
    /// One answer per lease, in order.
    pub results: Vec<ReleaseItem>,
    /// The leases the session's end handed back that `leases` did not name (empty without a
    /// session; ones already finished are left out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from_session: Vec<ReleaseItem>,
}
