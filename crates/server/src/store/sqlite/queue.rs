//! [`QueueStore`] on SQLite: enqueue, claim, heartbeat, ack, nack, release, the dead-letter
//! queue and the status reads.

use std::sync::atomic::Ordering;

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};
use ternflow_core::keys;
use ternflow_core::protocol::{
    ClaimedJob, DlqEntry, Enqueued, JobError, JobResult, JobStatus, Lease, NackResponse, QueueDepth,
};

use super::housekeeping::{end_delivery, housekeeping, Delivery, DELIVERY_COLS};
use super::integrity::forget_written;
use super::rows::{dlq_entry, job_status, opt_json, read_row, Row, JOB_COLS};
use super::{db_err, json_err, SqliteStore, KEEP_FOREVER, PASS_LIMIT};
use crate::error::Result;
use crate::store::{
    cap_error, new_token, released_error, AckInput, AckOutcome, Claimed, JobRecord, QueueStore,
    Released, Written,
};

/// One ack inside a transaction (shared by `ack` and `ack_many`).
fn ack_one(
    conn: &Connection,
    id: &str,
    token: &str,
    result: &JobResult,
    now: u64,
) -> Result<AckOutcome> {
    type Row = (String, Option<String>, Option<i64>, String, String);
    let row: Option<Row> = conn
        .prepare_cached("SELECT state, token, fence, text, model_id FROM jobs WHERE id = ?1")
        .and_then(|mut st| {
            st.query_row([id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .optional()
        })
        .map_err(db_err)?;
    let Some((state, held, fence, text, model_id)) = row else {
        return Ok(AckOutcome::Missing);
    };
    let holds = held.as_deref() == Some(token);
    match state.as_str() {
        "leased" if holds => {}
        "done" if holds => return Ok(AckOutcome::Repeated),
        _ => return Ok(AckOutcome::Stale),
    }
    if !model_id.is_empty() && model_id != result.model_id {
        return Ok(AckOutcome::WrongModel { expected: model_id });
    }
    let result = serde_json::to_string(result).map_err(json_err)?;
    conn.prepare_cached(
        "UPDATE jobs SET state = 'done', result = ?2, ended_at = ?3, fence = NULL, \
             expires_at = NULL WHERE id = ?1",
    )
    .and_then(|mut st| st.execute(params![id, result, now as i64]))
    .map_err(db_err)?;
    Ok(AckOutcome::Done {
        fence: fence.unwrap_or(0) as u64,
        text_hash: keys::text_hash(&text),
    })
}

#[async_trait]
impl QueueStore for SqliteStore {
    async fn enqueue(&self, jobs: Vec<JobRecord>, now: u64) -> Result<Vec<Enqueued>> {
        self.run(move |conn, c| {
            let mut st = conn
                .prepare_cached(
                    "INSERT INTO jobs (id, text, model_id, priority, meta, trace_id, seq, state, \
                     available_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
                     ON CONFLICT(id) DO NOTHING",
                )
                .map_err(db_err)?;
            let mut out = Vec::with_capacity(jobs.len());
            for r in jobs {
                let meta = r
                    .meta
                    .as_ref()
                    .map(serde_json::to_string)
                    .transpose()
                    .map_err(json_err)?;
                let state = if r.available_at > now {
                    "delayed"
                } else {
                    "ready"
                };
                let n = st
                    .execute(params![
                        r.id,
                        r.text,
                        r.model_id,
                        r.priority,
                        meta,
                        r.trace_id,
                        c.next_seq() as i64,
                        state,
                        r.available_at as i64
                    ])
                    .map_err(db_err)?;
                out.push(Enqueued {
                    id: r.id,
                    new: n == 1,
                });
            }
            Ok(out)
        })
        .await
    }

    async fn claim(
        &self,
        worker: &str,
        sub: Option<&str>,
        max: u32,
        lease_ms: u64,
        max_attempts: u32,
        now: u64,
    ) -> Result<Claimed> {
        let worker = worker.to_owned();
        let sub = sub.map(str::to_owned);
        let retention = self.done_retention_ms.load(Ordering::Relaxed);
        self.run(move |conn, c| {
            let mut out = Claimed::default();
            if retention != KEEP_FOREVER {
                let forgotten: Vec<String> = conn
                    .prepare_cached(
                        "DELETE FROM jobs WHERE rowid IN (SELECT rowid FROM jobs \
                         WHERE state = 'done' AND ended_at <= ?1 LIMIT ?2) RETURNING id",
                    )
                    .and_then(|mut st| {
                        st.query_map(
                            params![now.saturating_sub(retention) as i64, PASS_LIMIT],
                            |r| r.get(0),
                        )?
                        .collect()
                    })
                    .map_err(db_err)?;
                forget_written(conn, forgotten.into_iter().map(Written::Job))?;
            }
            housekeeping(conn, c, max_attempts, now, &mut out)?;
            type Ready = (i64, String, String, String, u32, String, Option<String>);
            let ready: Vec<Ready> = conn
                .prepare_cached(
                    "SELECT rowid, id, text, model_id, attempt, trace_id, meta FROM jobs \
                     WHERE state = 'ready' ORDER BY priority DESC, seq LIMIT ?1",
                )
                .and_then(|mut st| {
                    st.query_map([max as i64], |r| {
                        Ok((
                            r.get(0)?,
                            r.get(1)?,
                            r.get(2)?,
                            r.get(3)?,
                            r.get(4)?,
                            r.get(5)?,
                            r.get(6)?,
                        ))
                    })?
                    .collect()
                })
                .map_err(db_err)?;
            // By rowid: the row was just read, so no second lookup through the id index.
            let mut lease = conn
                .prepare_cached(
                    "UPDATE jobs SET state = 'leased', attempt = ?2, token = ?3, fence = ?4, \
                     expires_at = ?5, worker = ?6, leased_at = ?7, sub = ?8 WHERE rowid = ?1",
                )
                .map_err(db_err)?;
            let expires_at = now + lease_ms;
            for (rowid, id, text, model_id, attempt, trace_id, meta) in ready {
                let token = new_token();
                let fence = c.next_fence();
                let attempt = attempt + 1;
                lease
                    .execute(params![
                        rowid,
                        attempt,
                        token,
                        fence as i64,
                        expires_at as i64,
                        worker,
                        now as i64,
                        sub
                    ])
                    .map_err(db_err)?;
                out.jobs.push(ClaimedJob {
                    id,
                    text,
                    model_id,
                    attempt,
                    traceparent: trace_id,
                    lease: Lease {
                        token,
                        fence,
                        expires_at,
                    },
                    meta: opt_json(meta)?,
                    cache_checked: false,
                    cached: None,
                    resolved: false,
                });
            }
            Ok(out)
        })
        .await
    }

    async fn heartbeat(
        &self,
        id: &str,
        token: &str,
        lease_ms: u64,
        hold_ms: u64,
        now: u64,
    ) -> Result<Option<Lease>> {
        let (id, token) = (id.to_owned(), token.to_owned());
        self.run(move |conn, _| {
            let mut st = conn.prepare_cached(HEARTBEAT).map_err(db_err)?;
            heartbeat_one(&mut st, id, token, lease_ms, hold_ms, now)
        })
        .await
    }

    async fn heartbeat_many(
        &self,
        leases: Vec<(String, String)>,
        lease_ms: u64,
        hold_ms: u64,
        now: u64,
    ) -> Result<Vec<Option<Lease>>> {
        self.run(move |conn, _| {
            let mut st = conn.prepare_cached(HEARTBEAT).map_err(db_err)?;
            let mut out = Vec::with_capacity(leases.len());
            for (id, token) in leases {
                out.push(heartbeat_one(&mut st, id, token, lease_ms, hold_ms, now)?);
            }
            Ok(out)
        })
        .await
    }

    async fn ack(&self, id: &str, token: &str, result: JobResult, now: u64) -> Result<AckOutcome> {
        let (id, token) = (id.to_owned(), token.to_owned());
        self.run(move |conn, _| ack_one(conn, &id, &token, &result, now))
            .await
    }

    async fn ack_many(&self, acks: Vec<AckInput>, now: u64) -> Result<Vec<AckOutcome>> {
        // One savepoint for the whole batch: one step, as the batch protocol promises.
        self.run(move |conn, _| {
            acks.iter()
                .map(|a| ack_one(conn, &a.id, &a.token, &a.result, now))
                .collect()
        })
        .await
    }

    async fn nack(
        &self,
        id: &str,
        token: &str,
        error: JobError,
        retry_at: u64,
        max_attempts: u32,
        now: u64,
    ) -> Result<Option<NackResponse>> {
        let (id, token) = (id.to_owned(), token.to_owned());
        self.run(move |conn, _| {
            let row: Option<Delivery> = conn
                .prepare_cached(&format!(
                    "SELECT {DELIVERY_COLS} FROM jobs \
                     WHERE id = ?1 AND state = 'leased' AND token = ?2"
                ))
                .and_then(|mut st| {
                    st.query_row(params![id, token], |r| Delivery::read(r, 0))
                        .optional()
                })
                .map_err(db_err)?;
            let Some(delivery) = row else {
                return Ok(None);
            };
            let error = cap_error(error);
            let attempt = delivery.attempt;
            let history = delivery.ended(error.clone(), now)?;
            if !error.retryable || attempt >= max_attempts {
                let error = serde_json::to_string(&error).map_err(json_err)?;
                conn.prepare_cached(
                    "UPDATE jobs SET state = 'dead', error = ?2, history = ?3, ended_at = ?4, \
                     token = NULL, fence = NULL, expires_at = NULL WHERE id = ?1",
                )
                .and_then(|mut st| st.execute(params![id, error, history, now as i64]))
                .map_err(db_err)?;
                Ok(Some(NackResponse::Dead))
            } else {
                conn.prepare_cached(
                    "UPDATE jobs SET state = 'delayed', available_at = ?2, history = ?3, \
                     token = NULL, fence = NULL, expires_at = NULL WHERE id = ?1",
                )
                .and_then(|mut st| st.execute(params![id, retry_at as i64, history]))
                .map_err(db_err)?;
                Ok(Some(NackResponse::Retry {
                    available_at: retry_at,
                }))
            }
        })
        .await
    }

    async fn release(
        &self,
        id: &str,
        token: &str,
        free: u32,
        max_attempts: u32,
        now: u64,
    ) -> Result<Released> {
        let (id, token) = (id.to_owned(), token.to_owned());
        self.run(move |conn, c| {
            let row: Option<(u32, Delivery)> = conn
                .prepare_cached(&format!(
                    "SELECT releases, {DELIVERY_COLS} FROM jobs \
                     WHERE id = ?1 AND state = 'leased' AND token = ?2"
                ))
                .and_then(|mut st| {
                    st.query_row(params![id, token], |r| {
                        Ok((r.get(0)?, Delivery::read(r, 1)?))
                    })
                    .optional()
                })
                .map_err(db_err)?;
            let Some((releases, delivery)) = row else {
                return Ok(Released::NotHeld);
            };
            if releases < free {
                conn.prepare_cached(
                    "UPDATE jobs SET state = 'ready', seq = ?2, attempt = MAX(attempt - 1, 0), \
                     releases = releases + 1, token = NULL, fence = NULL, expires_at = NULL \
                     WHERE id = ?1",
                )
                .and_then(|mut st| st.execute(params![id, c.next_seq() as i64]))
                .map_err(db_err)?;
                return Ok(Released::Free);
            }
            let error = released_error(free);
            Ok(
                if end_delivery(conn, c, &id, delivery, error, max_attempts, now)? {
                    Released::Dead
                } else {
                    Released::Counted
                },
            )
        })
        .await
    }

    async fn status(&self, id: &str) -> Result<Option<JobStatus>> {
        let id = id.to_owned();
        self.read(move |conn| {
            let row = conn
                .prepare_cached(&format!("SELECT {JOB_COLS} FROM jobs WHERE id = ?1"))
                .and_then(|mut st| st.query_row([&id], read_row).optional())
                .map_err(db_err)?;
            row.map(job_status).transpose()
        })
        .await
    }

    async fn dlq(&self, limit: usize) -> Result<Vec<DlqEntry>> {
        self.read(move |conn| {
            let rows: Vec<Row> = conn
                .prepare_cached(&format!(
                    "SELECT {JOB_COLS} FROM jobs WHERE state = 'dead' \
                     ORDER BY ended_at, seq LIMIT ?1"
                ))
                .and_then(|mut st| {
                    st.query_map([limit.min(i64::MAX as usize) as i64], read_row)?
                        .collect()
                })
                .map_err(db_err)?;
            rows.into_iter().map(dlq_entry).collect()
        })
        .await
    }

    async fn redrive(&self, id: &str, _now: u64) -> Result<bool> {
        let id = id.to_owned();
        self.run(move |conn, c| {
            let n = conn
                .prepare_cached(
                    "UPDATE jobs SET state = 'ready', attempt = 0, releases = 0, seq = ?2, error = NULL, \
                     ended_at = NULL WHERE id = ?1 AND state = 'dead'",
                )
                .and_then(|mut st| st.execute(params![id, c.next_seq() as i64]))
                .map_err(db_err)?;
            Ok(n == 1)
        })
        .await
    }

    async fn probe_write(&self, now: u64) -> Result<()> {
        self.run(move |conn, _| {
            conn.prepare_cached(
                "INSERT INTO meta (k, v) VALUES ('ready_probe', ?1) \
                 ON CONFLICT(k) DO UPDATE SET v = excluded.v",
            )
            .and_then(|mut st| st.execute([now as i64]))
            .map(|_| ())
            .map_err(db_err)
        })
        .await
    }

    async fn depth(&self, now: u64) -> Result<QueueDepth> {
        self.read(move |conn| {
            conn.prepare_cached(
                "SELECT \
                   (SELECT COUNT(*) FROM jobs WHERE state = 'ready'), \
                   (SELECT COUNT(*) FROM jobs WHERE state = 'delayed' AND available_at <= ?1), \
                   (SELECT COUNT(*) FROM jobs WHERE state = 'delayed' AND available_at > ?1), \
                   (SELECT COUNT(*) FROM jobs WHERE state = 'leased'), \
                   (SELECT COUNT(*) FROM jobs WHERE state = 'dead')",
            )
            .and_then(|mut st| {
                st.query_row([now as i64], |r| {
                    let n = |i: usize| r.get::<_, i64>(i).map(|v| v as u64);
                    Ok(QueueDepth {
                        ready: n(0)? + n(1)?,
                        delayed: n(2)?,
                        leased: n(3)?,
                        dead: n(4)?,
                    })
                })
            })
            .map_err(db_err)
        })
        .await
    }
}

/// Extends a lease held with the token to `now + lease_ms`, never past `hold_ms` after its
/// delivery began; nothing when the token does not hold it or its hold is used up.
const HEARTBEAT: &str = "UPDATE jobs SET expires_at = MIN(?3, leased_at + ?4) WHERE id = ?1 \
     AND state = 'leased' AND token = ?2 AND leased_at + ?4 > ?5 RETURNING fence, expires_at";

fn heartbeat_one(
    st: &mut rusqlite::CachedStatement<'_>,
    id: String,
    token: String,
    lease_ms: u64,
    hold_ms: u64,
    now: u64,
) -> Result<Option<Lease>> {
    let row: Option<(i64, i64)> = st
        .query_row(
            params![
                id,
                token,
                (now + lease_ms) as i64,
                hold_ms.min(i64::MAX as u64) as i64,
                now as i64
            ],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(db_err)?;
    Ok(row.map(|(fence, expires_at)| Lease {
        token,
        fence: fence as u64,
        expires_at: expires_at as u64,
    }))
}
