//! The server-sent events of `GET /v1/events`.

use serde::{Deserialize, Serialize};

/// An SSE event: the variant name is the SSE `event:` field, the content its `data:` JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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

/// `jobs` SSE event data: work is available.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobsEvent {
    /// Jobs ready to claim when the event was sent.
    pub depth: u64,
}

/// `invalidate` SSE event data: drop these cache keys locally.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct InvalidateEvent {
    /// Cache keys.
    pub keys: Vec<String>,
}

/// `reset` SSE event data, sent to every role: events before this one may have been missed (the
/// client resumed from an id older than the server still holds, the server restarted without
/// a clean shutdown, or its event subscription was lost). A client cannot learn which: it
/// resynchronises. A worker drops its local cache (it may have missed `invalidate` events); a
/// producer asks `POST /v1/jobs/status` for the jobs it waits on (it may have missed
/// `finished` events). The event's id is where the stream resumes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ResetEvent {
    /// Why (for logs): `resumed_too_late`, `server_restarted`, `subscription_lost`,
    /// `server_fell_behind`, `ids_went_backwards`.
    pub reason: String,
}

/// `finished` SSE event data: jobs that were just done or dead-lettered. Producers subscribe
/// to these (`GET /v1/events` with a producer token) and fetch the results with
/// `POST /v1/jobs/status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FinishedEvent {
    /// Jobs done.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub done: Vec<String>,
    /// Jobs dead-lettered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dead: Vec<String>,
}
