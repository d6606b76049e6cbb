//! Nack: a worker-reported failure (single and batched), the attempts a job has had, and the
//! dead-letter queue where a job lands when its retries are spent.

use serde::{Deserialize, Serialize};

/// A worker-reported failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobError {
    /// Short machine-readable code (`engine_failed`, `lease_expired`, …).
    pub code: String,
    /// Human-readable detail.
    pub message: String,
    /// `false` sends the job straight to the dead-letter queue.
    #[serde(default = "default_true")]
    pub retryable: bool,
}

fn default_true() -> bool {
    true
}

/// `POST /v1/jobs/{id}/nack` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NackRequest {
    /// The lease token.
    pub token: String,
    /// Why.
    pub error: JobError,
}

/// `POST /v1/jobs/{id}/nack` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub enum NackResponse {
    /// Re-delivered at or after `available_at`.
    Retry {
        /// Earliest re-delivery.
        available_at: u64,
    },
    /// Moved to the dead-letter queue.
    Dead,
    /// Done by the server: it embedded the job's text itself rather than let a worker's failure
    /// end the job (the server runs the job's model; source `backend`).
    Done,
}

/// `POST /v1/jobs/nack` body: gives many jobs back in one request (at most the claim limit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NackBatchRequest {
    /// The nacks, each answered on its own.
    pub nacks: Vec<NackItem>,
}

/// One nack of a batch: the job id and what `POST /v1/jobs/{id}/nack` would carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum NackItemOutcome {
    /// Re-delivered at or after `available_at`.
    Retry {
        /// Earliest re-delivery.
        available_at: u64,
    },
    /// Moved to the dead-letter queue.
    Dead,
    /// Done by the server, which embedded the job's text itself.
    Done,
    /// The token does not hold the lease.
    LeaseLost,
    /// No such job.
    Missing,
}

/// One answer of a [`NackBatchResponse`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NackItemResult {
    /// Job id.
    pub id: String,
    /// What happened.
    #[serde(flatten)]
    pub outcome: NackItemOutcome,
}

/// `POST /v1/jobs/nack` response: one result per nack, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NackBatchResponse {
    /// The results.
    pub results: Vec<NackItemResult>,
}

/// One delivery of a job that did not end in success.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Attempt {
    /// Attempt number (1-based).
    pub attempt: u32,
    /// Worker that held the lease (the name it gave: self-reported, for people to read).
    pub worker: String,
    /// Who held the lease: the claiming token's writer identity (a signed token's `sub`, as in
    /// provenance), recorded by the server. Absent for claims without a token and for
    /// deliveries recorded before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub: Option<String>,
    /// When the lease was granted.
    pub leased_at: u64,
    /// When it ended (nack or expiry).
    pub ended_at: u64,
    /// The error (a `lease_expired` error for an expired lease).
    pub error: JobError,
}

/// The submitted job, as kept in the dead-letter queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DlqList {
    /// Dead letters.
    pub entries: Vec<DlqEntry>,
}
