//! Enqueue: the jobs a producer submits (`POST /v1/jobs`) and what it gets back.

use serde::{Deserialize, Serialize};

/// One job as a producer submits it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Enqueued {
    /// The job's id (given or derived).
    pub id: String,
    /// `false` when a job with this id already existed (in any state, done included): nothing changed.
    pub new: bool,
}

/// `POST /v1/jobs` response, one entry per submitted job, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EnqueueResponse {
    /// Per-job outcome.
    pub jobs: Vec<Enqueued>,
}
