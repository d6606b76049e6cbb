//! Rows to protocol types: a job row as a [`JobStatus`] or a [`DlqEntry`], vectors as blobs.

use ternflow_core::protocol::{DlqEntry, JobSpec, JobState, JobStatus};

use super::json_err;
use crate::error::{Error, Result};

pub(super) fn encode_vec(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(super) fn decode_vec(b: &[u8]) -> Result<Vec<f32>> {
    if b.len() % 4 != 0 {
        return Err(Error::Store(
            "sqlite: a cached vector's length is not a multiple of 4".into(),
        ));
    }
    Ok(b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// The columns [`job_status`] and [`dlq_entry`] read, in this order.
pub(super) const JOB_COLS: &str = "id, text, model_id, priority, meta, attempt, history, state, \
                        available_at, expires_at, worker, result, error, ended_at";

pub(super) fn opt_json<T: serde::de::DeserializeOwned>(s: Option<String>) -> Result<Option<T>> {
    s.map(|s| serde_json::from_str(&s).map_err(json_err))
        .transpose()
}

pub(super) struct Row {
    id: String,
    text: String,
    model_id: String,
    priority: i32,
    meta: Option<String>,
    attempt: u32,
    history: String,
    state: String,
    available_at: i64,
    expires_at: Option<i64>,
    worker: Option<String>,
    result: Option<String>,
    error: Option<String>,
    ended_at: Option<i64>,
}

pub(super) fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        id: r.get(0)?,
        text: r.get(1)?,
        model_id: r.get(2)?,
        priority: r.get(3)?,
        meta: r.get(4)?,
        attempt: r.get(5)?,
        history: r.get(6)?,
        state: r.get(7)?,
        available_at: r.get(8)?,
        expires_at: r.get(9)?,
        worker: r.get(10)?,
        result: r.get(11)?,
        error: r.get(12)?,
        ended_at: r.get(13)?,
    })
}

pub(super) fn job_status(r: Row) -> Result<JobStatus> {
    let state = match r.state.as_str() {
        "ready" => JobState::Queued { available_at: 0 },
        "delayed" => JobState::Queued {
            available_at: r.available_at as u64,
        },
        "leased" => JobState::Leased {
            expires_at: r.expires_at.unwrap_or(0) as u64,
            worker: r.worker.unwrap_or_default(),
        },
        "done" => JobState::Done {
            result: opt_json(r.result)?
                .ok_or_else(|| Error::Store("sqlite: a done job has no result".into()))?,
            info: None,
        },
        "dead" => JobState::Dead {
            error: opt_json(r.error)?
                .ok_or_else(|| Error::Store("sqlite: a dead job has no error".into()))?,
            history: serde_json::from_str(&r.history).map_err(json_err)?,
        },
        other => return Err(Error::Store(format!("sqlite: unknown job state {other:?}"))),
    };
    Ok(JobStatus {
        id: r.id,
        attempt: r.attempt,
        state,
    })
}

pub(super) fn dlq_entry(r: Row) -> Result<DlqEntry> {
    Ok(DlqEntry {
        error: opt_json(r.error)?
            .ok_or_else(|| Error::Store("sqlite: a dead job has no error".into()))?,
        history: serde_json::from_str(&r.history).map_err(json_err)?,
        dead_at: r.ended_at.unwrap_or(0) as u64,
        job: JobSpec {
            id: r.id,
            text: r.text,
            model_id: r.model_id,
            priority: r.priority,
            meta: opt_json(r.meta)?,
        },
    })
}
