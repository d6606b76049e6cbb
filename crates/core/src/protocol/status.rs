//! Status: a job's state as `GET /v1/jobs/{id}` and `POST /v1/jobs/status` report it.

use serde::{Deserialize, Serialize};

use super::{Attempt, JobError, JobResult, TextInfo};

/// A job's state, as `GET /v1/jobs/{id}` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
        /// What the vector covers of the job's text (word pieces, forwards pooled; queue jobs
        /// are embedded whole, so never truncated), counted by the server when it reads the
        /// result: absent from a server without the result's model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        info: Option<TextInfo>,
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobStatus {
    /// Job id.
    pub id: String,
    /// Deliveries so far.
    pub attempt: u32,
    /// State.
    #[serde(flatten)]
    pub state: JobState,
}

/// `POST /v1/jobs/status` body: the status of many jobs at once (at most 1000 ids).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StatusList {
    /// Known jobs, in order.
    pub jobs: Vec<JobStatus>,
    /// Unknown ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
}
