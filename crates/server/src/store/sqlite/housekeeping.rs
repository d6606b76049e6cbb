//! The passes every claim runs first: expired leases re-queued (or dead-lettered), due delayed
//! jobs made ready, at most [`PASS_LIMIT`] rows each.

use rusqlite::{params, Connection};
use ternflow_core::protocol::{Attempt, JobError};
use ternflow_core::ErrorCode;

use super::writer::Counters;
use super::{db_err, json_err, PASS_LIMIT};
use crate::error::Result;
use crate::store::{push_history, Claimed};

/// Re-queues (or dead-letters) jobs whose lease ran out; moves due delayed jobs to ready.
pub(super) fn housekeeping(
    conn: &Connection,
    c: &mut Counters,
    max_attempts: u32,
    now: u64,
    out: &mut Claimed,
) -> Result<()> {
    let due: Vec<String> = conn
        .prepare_cached(
            "SELECT id FROM jobs WHERE state = 'delayed' AND available_at <= ?1 \
             ORDER BY available_at, seq LIMIT ?2",
        )
        .and_then(|mut st| {
            st.query_map(params![now as i64, PASS_LIMIT], |r| r.get(0))?
                .collect()
        })
        .map_err(db_err)?;
    for id in due {
        conn.prepare_cached("UPDATE jobs SET state = 'ready', seq = ?2 WHERE id = ?1")
            .and_then(|mut st| st.execute(params![id, c.next_seq() as i64]))
            .map_err(db_err)?;
    }
    let expired: Vec<(String, Delivery)> = conn
        .prepare_cached(&format!(
            "SELECT id, {DELIVERY_COLS} FROM jobs \
             WHERE state = 'leased' AND expires_at <= ?1 ORDER BY expires_at LIMIT ?2"
        ))
        .and_then(|mut st| {
            st.query_map(params![now as i64, PASS_LIMIT], |r| {
                Ok((r.get(0)?, Delivery::read(r, 1)?))
            })?
            .collect()
        })
        .map_err(db_err)?;
    for (id, delivery) in expired {
        let error = JobError {
            code: ErrorCode::LeaseExpired.as_str().to_owned(),
            message: "the lease expired before an ack or nack".to_owned(),
            retryable: true,
        };
        if end_delivery(conn, c, &id, delivery, error, max_attempts, now)? {
            out.dead.push(id);
        } else {
            out.expired.push(id);
        }
    }
    Ok(())
}

/// The columns [`Delivery::read`] reads, in its order.
pub(super) const DELIVERY_COLS: &str = "attempt, worker, sub, leased_at, history";

/// A leased job's delivery as its row holds it: what the delivery's history entry is made of.
pub(super) struct Delivery {
    pub(super) attempt: u32,
    worker: Option<String>,
    sub: Option<String>,
    leased_at: Option<i64>,
    /// The job's history so far (JSON).
    history: String,
}

impl Delivery {
    /// Reads [`DELIVERY_COLS`] from `r`, the first at column `at`.
    pub(super) fn read(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Self> {
        Ok(Delivery {
            attempt: r.get(at)?,
            worker: r.get(at + 1)?,
            sub: r.get(at + 2)?,
            leased_at: r.get(at + 3)?,
            history: r.get(at + 4)?,
        })
    }

    /// The job's history (JSON) with this delivery, ended at `now` with `error`, added.
    pub(super) fn ended(self, error: JobError, now: u64) -> Result<String> {
        let mut history: Vec<Attempt> = serde_json::from_str(&self.history).map_err(json_err)?;
        push_history(
            &mut history,
            Attempt {
                attempt: self.attempt,
                worker: self.worker.unwrap_or_default(),
                sub: self.sub,
                leased_at: self.leased_at.unwrap_or(0) as u64,
                ended_at: now,
                error,
            },
        );
        serde_json::to_string(&history).map_err(json_err)
    }
}

/// Ends job `id`'s `delivery` at `now` as an attempt that counts (an expired lease, a release
/// past the free ones): it joins the history with `error`, and the job is dead-lettered with
/// `error` on its `max_attempts`-th attempt, else ready again. `true` when dead.
pub(super) fn end_delivery(
    conn: &Connection,
    c: &mut Counters,
    id: &str,
    delivery: Delivery,
    error: JobError,
    max_attempts: u32,
    now: u64,
) -> Result<bool> {
    let attempt = delivery.attempt;
    let history = delivery.ended(error.clone(), now)?;
    if attempt >= max_attempts {
        let error = serde_json::to_string(&error).map_err(json_err)?;
        conn.prepare_cached(
            "UPDATE jobs SET state = 'dead', error = ?2, history = ?3, ended_at = ?4, \
             token = NULL, fence = NULL, expires_at = NULL WHERE id = ?1",
        )
        .and_then(|mut st| st.execute(params![id, error, history, now as i64]))
        .map_err(db_err)?;
        return Ok(true);
    }
    conn.prepare_cached(
        "UPDATE jobs SET state = 'ready', seq = ?2, history = ?3, \
         token = NULL, fence = NULL, expires_at = NULL WHERE id = ?1",
    )
    .and_then(|mut st| st.execute(params![id, c.next_seq() as i64, history]))
    .map_err(db_err)?;
    Ok(false)
}
