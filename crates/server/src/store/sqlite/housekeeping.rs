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
    type Expired = (String, u32, String, Option<String>, i64, String);
    let expired: Vec<Expired> = conn
        .prepare_cached(
            "SELECT id, attempt, worker, sub, leased_at, history FROM jobs \
             WHERE state = 'leased' AND expires_at <= ?1 ORDER BY expires_at LIMIT ?2",
        )
        .and_then(|mut st| {
            st.query_map(params![now as i64, PASS_LIMIT], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            })?
            .collect()
        })
        .map_err(db_err)?;
    for (id, attempt, worker, sub, leased_at, history) in expired {
        let error = JobError {
            code: ErrorCode::LeaseExpired.as_str().to_owned(),
            message: "the lease expired before an ack or nack".to_owned(),
            retryable: true,
        };
        let ended = Attempt {
            attempt,
            worker,
            sub,
            leased_at: leased_at as u64,
            ended_at: now,
            error,
        };
        if end_delivery(conn, c, &id, &history, ended, max_attempts)? {
            out.dead.push(id);
        } else {
            out.expired.push(id);
        }
    }
    Ok(())
}

/// Ends job `id`'s delivery as an attempt that counts (an expired lease, a release past the free
/// ones): `ended` joins its `history` (JSON), and it is dead-lettered with `ended.error` on its
/// `max_attempts`-th attempt, else ready again. `true` when dead.
pub(super) fn end_delivery(
    conn: &Connection,
    c: &mut Counters,
    id: &str,
    history: &str,
    ended: Attempt,
    max_attempts: u32,
) -> Result<bool> {
    let (attempt, now, error) = (ended.attempt, ended.ended_at, ended.error.clone());
    let mut history: Vec<Attempt> = serde_json::from_str(history).map_err(json_err)?;
    push_history(&mut history, ended);
    let history = serde_json::to_string(&history).map_err(json_err)?;
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
