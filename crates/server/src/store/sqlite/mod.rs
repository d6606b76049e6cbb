//! The SQLite store, the default (`ternflow serve --store embedded`): one database file in WAL
//! mode (`DIR/ternflow.sqlite3`), schema in `schema.sql`.
//!
//! # Transactions
//! Every operation is one transaction (a savepoint inside a group-committed transaction, see
//! [`writer`]) on a thread of its own; a client hears back only after `COMMIT` returned. A
//! failed write (a full disk, an I/O error) rolls back and changes nothing: the request gets
//! 503 with `Retry-After`, and the same request later succeeds. There is no state in memory
//! besides the job sequence and fence counters, which are saved with every group. Reads that
//! are one statement (a cache lookup, a job's status, the depth, the dead letters) run on a
//! second connection and thread, so they neither wait for nor delay the writer (WAL).
//!
//! # Durability ([`Synchronous`])
//! `synchronous=NORMAL` (default): a committed operation survives the process being killed
//! (the WAL is in the OS's hands); a power failure may lose the last commits. `FULL`
//! (`--fsync-always`): every group is `fsync`ed before anyone hears back, and survives power
//! loss.
//!
//! Leases, locks and fences are in the database, so a restart keeps live leases and locks, and
//! fences never repeat. Event ids start at the start-up time in ms × 1000, so they keep growing
//! across restarts (after a clean shutdown they continue from the last one, kept in `meta`).
//!
//! Beside this file: [`writer`] (the group-committing writer and reader threads), `scan`
//! (`ResultScan`), `integrity` (`IntegrityStore`), `dir_lock` (one server per data directory).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};
use ternflow_core::keys;
use ternflow_core::protocol::{
    Attempt, CacheEntry, ClaimedJob, DlqEntry, Enqueued, JobError, JobResult, JobSpec, JobState,
    JobStatus, Lease, LockGrant, NackResponse, QueueDepth, ServerEvent, Vector,
};
use ternflow_core::ErrorCode;
use tokio::sync::{broadcast, oneshot};

use super::{
    cap_error, new_token, push_history, AckInput, AckOutcome, CacheStore, Claimed, EventBus,
    Fenced, JobRecord, LockOutcome, LockStore, NumberedEvent, PutOutcome, QueueStore,
};
use crate::error::{Error, Result};
use crate::store::local_events::LocalEvents;

mod dir_lock;
mod scan;
mod writer;

pub use dir_lock::lock_data_dir;

use writer::{Counters, Op, ReadOp, Reply};

mod integrity;

const SCHEMA: &str = include_str!("schema.sql");

/// Columns added after a database was first made (`ALTER TABLE … ADD COLUMN`, once).
fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    let has_by: bool = conn.query_row(
        "SELECT COUNT(*) FROM pragma_table_info('cache') WHERE name = 'by_json'",
        [],
        |r| r.get::<_, i64>(0).map(|n| n > 0),
    )?;
    if !has_by {
        conn.execute_batch("ALTER TABLE cache ADD COLUMN by_json TEXT")?;
    }
    Ok(())
}
/// Rows moved per claim by the delayed → ready and lease-expiry passes.
const PASS_LIMIT: i64 = 1_000;
/// `done_retention_ms` value meaning "keep finished jobs forever".
const KEEP_FOREVER: u64 = u64::MAX;

/// When commits reach the disk (SQLite's `PRAGMA synchronous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// `NORMAL`: survives a process crash (the default).
    #[default]
    Normal,
    /// `FULL`: survives power loss; one `fsync` per group commit.
    Full,
}

/// The SQLite store. See the [module docs](self).
#[derive(Debug)]
pub struct SqliteStore {
    ops: Option<mpsc::Sender<Op>>,
    reads: Option<mpsc::Sender<ReadOp>>,
    threads: Vec<JoinHandle<()>>,
    path: PathBuf,
    done_retention_ms: Arc<AtomicU64>,
    events: LocalEvents,
}

fn db_err(e: rusqlite::Error) -> Error {
    Error::Store(format!("sqlite: {e}"))
}

fn json_err(e: serde_json::Error) -> Error {
    Error::Store(format!("sqlite: bad JSON in a row: {e}"))
}

fn encode_vec(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn decode_vec(b: &[u8]) -> Result<Vec<f32>> {
    if b.len() % 4 != 0 {
        return Err(Error::Store(
            "sqlite: a cached vector's length is not a multiple of 4".into(),
        ));
    }
    Ok(b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

impl SqliteStore {
    /// Opens (or creates) the database in `dir`.
    ///
    /// # Errors
    /// [`Error::Store`] when the directory or the database cannot be created, opened or
    /// migrated (a corrupt file, a full disk, no permission).
    pub fn open(dir: &Path, sync: Synchronous) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::Store(format!("create {}: {e}", dir.display())))?;
        let path = dir.join("ternflow.sqlite3");
        let conn = Connection::open(&path).map_err(db_err)?;
        let sync = match sync {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        };
        conn.execute_batch(&format!(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = {sync}; PRAGMA busy_timeout = 5000; \
             PRAGMA foreign_keys = OFF;"
        ))
        .map_err(db_err)?;
        conn.execute_batch(SCHEMA).map_err(db_err)?;
        migrate(&conn).map_err(db_err)?;
        // A file that is not a database, or a damaged one, fails here rather than mid-request.
        let check: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(db_err)?;
        if check != "ok" {
            return Err(Error::Store(format!("{}: {check}", path.display())));
        }
        let counters = Counters::load(&conn).map_err(db_err)?;
        let events_last = take_events_last(&conn);
        let reader = Connection::open(&path).map_err(db_err)?;
        reader
            .execute_batch("PRAGMA query_only = ON; PRAGMA busy_timeout = 5000;")
            .map_err(db_err)?;
        let spawn_err = |e: std::io::Error| Error::Store(format!("start a database thread: {e}"));
        let (tx, rx) = mpsc::channel();
        let writer = std::thread::Builder::new()
            .name("ternflow-sqlite".into())
            .spawn(move || writer::run(conn, rx, counters))
            .map_err(spawn_err)?;
        let (rtx, rrx) = mpsc::channel();
        let reader = std::thread::Builder::new()
            .name("ternflow-sqlite-read".into())
            .spawn(move || writer::run_reader(reader, rrx))
            .map_err(spawn_err)?;
        Ok(SqliteStore {
            ops: Some(tx),
            reads: Some(rtx),
            threads: vec![writer, reader],
            path,
            done_retention_ms: Arc::new(AtomicU64::new(KEEP_FOREVER)),
            events: LocalEvents::resuming(events_last),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Forgets finished jobs `ms` after their ack (checked at each claim), so the store does not
    /// grow without bound; a forgotten id may be enqueued again. Default: keep them forever
    /// (duplicates of a done job collapse forever).
    pub fn with_done_retention(self, ms: u64) -> Self {
        self.done_retention_ms.store(ms, Ordering::Relaxed);
        self
    }

    /// Runs `f` in its own savepoint on the database thread; resolves once its group committed.
    async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Counters) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel::<Result<T>>();
        let op: Op = Box::new(move |db| {
            let out = match db {
                Some((conn, counters)) => f(conn, counters),
                None => Err(Error::Store("the operation did not run".to_owned())),
            };
            let ok = out.is_ok();
            let reply: Reply = Box::new(move |rolled_back| {
                let out = match (out, rolled_back) {
                    (Ok(v), None) => Ok(v),
                    (Ok(_), Some(msg)) => Err(Error::Store(msg.to_owned())),
                    (Err(e), None) => Err(e),
                    (Err(e), Some(msg)) => Err(Error::Store(format!("{e}; {msg}"))),
                };
                let _ = tx.send(out);
            });
            (ok, reply)
        });
        self.ops
            .as_ref()
            .and_then(|s| s.send(op).ok())
            .ok_or_else(|| Error::Store("the database thread has stopped".to_owned()))?;
        rx.await
            .map_err(|_| Error::Store("the database thread has stopped".to_owned()))?
    }
}

impl SqliteStore {
    /// Runs a read-only `f` (one statement, so it sees one committed state) on the reader thread.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel::<Result<T>>();
        let op: ReadOp = Box::new(move |conn| {
            let _ = tx.send(f(conn));
        });
        self.reads
            .as_ref()
            .and_then(|s| s.send(op).ok())
            .ok_or_else(|| Error::Store("the database thread has stopped".to_owned()))?;
        rx.await
            .map_err(|_| Error::Store("the database thread has stopped".to_owned()))?
    }
}

/// The last event id of the previous run, when it shut down cleanly (`Drop` wrote it), taken
/// out so that a crash of this run cannot reuse it. Unknown (`None`) when absent, or when it
/// cannot be removed (a full disk): SSE clients then get a `reset`, the safe side.
fn take_events_last(conn: &Connection) -> Option<u64> {
    let v: i64 = conn
        .query_row("SELECT v FROM meta WHERE k = 'events_last'", [], |r| {
            r.get(0)
        })
        .ok()?;
    conn.execute("DELETE FROM meta WHERE k = 'events_last'", [])
        .ok()?;
    u64::try_from(v).ok()
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // A clean shutdown: every event is published; the next run's ids continue after the
        // last one, and SSE clients that saw it resume without a reset. Best effort (a full
        // disk leaves it unwritten: the next run treats it as a crash).
        let last = self.events.last_id() as i64;
        let op: Op = Box::new(move |db| {
            let ok = db.is_some_and(|(conn, _)| {
                conn.execute(
                    "INSERT INTO meta (k, v) VALUES ('events_last', ?1) \
                     ON CONFLICT(k) DO UPDATE SET v = excluded.v",
                    [last],
                )
                .is_ok()
            });
            (ok, Box::new(|_| {}))
        });
        if let Some(ops) = &self.ops {
            let _ = ops.send(op);
        }
        // Closing a channel ends its thread after the operations already sent; joining it
        // closes the connection (the writer's, last, checkpoints the WAL) before the store is
        // gone. One connection at a time: two connections of one file closing at once on two
        // threads deadlocked inside SQLite's unix VFS (seen once in the reopen test: one thread
        // in unixClose, the other in sqlite3WalClose → unixLock, each waiting on the other's
        // mutex).
        self.reads.take();
        let mut threads = self.threads.drain(..).collect::<Vec<_>>();
        if let Some(reader) = threads.pop() {
            let _ = reader.join();
        }
        self.ops.take();
        for t in threads {
            let _ = t.join();
        }
    }
}

/// The columns [`job_status`] and [`dlq_entry`] read, in this order.
const JOB_COLS: &str = "id, text, model_id, priority, meta, attempt, history, state, \
                        available_at, expires_at, worker, result, error, ended_at";

fn opt_json<T: serde::de::DeserializeOwned>(s: Option<String>) -> Result<Option<T>> {
    s.map(|s| serde_json::from_str(&s).map_err(json_err))
        .transpose()
}

struct Row {
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

fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
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

fn job_status(r: Row) -> Result<JobStatus> {
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

fn dlq_entry(r: Row) -> Result<DlqEntry> {
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

/// Re-queues (or dead-letters) jobs whose lease ran out; moves due delayed jobs to ready.
fn housekeeping(
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
    type Expired = (String, u32, String, i64, String);
    let expired: Vec<Expired> = conn
        .prepare_cached(
            "SELECT id, attempt, worker, leased_at, history FROM jobs \
             WHERE state = 'leased' AND expires_at <= ?1 ORDER BY expires_at LIMIT ?2",
        )
        .and_then(|mut st| {
            st.query_map(params![now as i64, PASS_LIMIT], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?
            .collect()
        })
        .map_err(db_err)?;
    for (id, attempt, worker, leased_at, history) in expired {
        let error = JobError {
            code: ErrorCode::LeaseExpired.as_str().to_owned(),
            message: "the lease expired before an ack or nack".to_owned(),
            retryable: true,
        };
        let mut history: Vec<Attempt> = serde_json::from_str(&history).map_err(json_err)?;
        push_history(
            &mut history,
            Attempt {
                attempt,
                worker,
                leased_at: leased_at as u64,
                ended_at: now,
                error: error.clone(),
            },
        );
        let history = serde_json::to_string(&history).map_err(json_err)?;
        if attempt >= max_attempts {
            let error = serde_json::to_string(&error).map_err(json_err)?;
            conn.prepare_cached(
                "UPDATE jobs SET state = 'dead', error = ?2, history = ?3, ended_at = ?4, \
                 token = NULL, fence = NULL, expires_at = NULL WHERE id = ?1",
            )
            .and_then(|mut st| st.execute(params![id, error, history, now as i64]))
            .map_err(db_err)?;
            out.dead.push(id);
        } else {
            conn.prepare_cached(
                "UPDATE jobs SET state = 'ready', seq = ?2, history = ?3, \
                 token = NULL, fence = NULL, expires_at = NULL WHERE id = ?1",
            )
            .and_then(|mut st| st.execute(params![id, c.next_seq() as i64, history]))
            .map_err(db_err)?;
            out.expired.push(id);
        }
    }
    Ok(())
}

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
        max: u32,
        lease_ms: u64,
        max_attempts: u32,
        now: u64,
    ) -> Result<Claimed> {
        let worker = worker.to_owned();
        let retention = self.done_retention_ms.load(Ordering::Relaxed);
        self.run(move |conn, c| {
            let mut out = Claimed::default();
            if retention != KEEP_FOREVER {
                conn.prepare_cached(
                    "DELETE FROM jobs WHERE rowid IN (SELECT rowid FROM jobs \
                     WHERE state = 'done' AND ended_at <= ?1 LIMIT ?2)",
                )
                .and_then(|mut st| {
                    st.execute(params![now.saturating_sub(retention) as i64, PASS_LIMIT])
                })
                .map_err(db_err)?;
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
                     expires_at = ?5, worker = ?6, leased_at = ?7 WHERE rowid = ?1",
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
                        now as i64
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
        now: u64,
    ) -> Result<Option<Lease>> {
        let (id, token) = (id.to_owned(), token.to_owned());
        self.run(move |conn, _| {
            let expires_at = now + lease_ms;
            let fence: Option<i64> = conn
                .prepare_cached(
                    "UPDATE jobs SET expires_at = ?3 WHERE id = ?1 AND state = 'leased' \
                     AND token = ?2 RETURNING fence",
                )
                .and_then(|mut st| {
                    st.query_row(params![id, token, expires_at as i64], |r| r.get(0))
                        .optional()
                })
                .map_err(db_err)?;
            Ok(fence.map(|f| Lease {
                token,
                fence: f as u64,
                expires_at,
            }))
        })
        .await
    }

    async fn heartbeat_many(
        &self,
        leases: Vec<(String, String)>,
        lease_ms: u64,
        now: u64,
    ) -> Result<Vec<Option<Lease>>> {
        self.run(move |conn, _| {
            let expires_at = now + lease_ms;
            let mut st = conn
                .prepare_cached(
                    "UPDATE jobs SET expires_at = ?3 WHERE id = ?1 AND state = 'leased' \
                     AND token = ?2 RETURNING fence",
                )
                .map_err(db_err)?;
            let mut out = Vec::with_capacity(leases.len());
            for (id, token) in leases {
                let fence: Option<i64> = st
                    .query_row(params![id, token, expires_at as i64], |r| r.get(0))
                    .optional()
                    .map_err(db_err)?;
                out.push(fence.map(|f| Lease {
                    token,
                    fence: f as u64,
                    expires_at,
                }));
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
            type Held = (u32, Option<String>, Option<i64>, String);
            let row: Option<Held> = conn
                .prepare_cached(
                    "SELECT attempt, worker, leased_at, history FROM jobs \
                     WHERE id = ?1 AND state = 'leased' AND token = ?2",
                )
                .and_then(|mut st| {
                    st.query_row(params![id, token], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                    })
                    .optional()
                })
                .map_err(db_err)?;
            let Some((attempt, worker, leased_at, history)) = row else {
                return Ok(None);
            };
            let error = cap_error(error);
            let mut history: Vec<Attempt> = serde_json::from_str(&history).map_err(json_err)?;
            push_history(
                &mut history,
                Attempt {
                    attempt,
                    worker: worker.unwrap_or_default(),
                    leased_at: leased_at.unwrap_or(0) as u64,
                    ended_at: now,
                    error: error.clone(),
                },
            );
            let history = serde_json::to_string(&history).map_err(json_err)?;
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

    async fn release(&self, id: &str, token: &str, _now: u64) -> Result<bool> {
        let (id, token) = (id.to_owned(), token.to_owned());
        self.run(move |conn, c| {
            let n = conn
                .prepare_cached(
                    "UPDATE jobs SET state = 'ready', seq = ?3, attempt = MAX(attempt - 1, 0), \
                     token = NULL, fence = NULL, expires_at = NULL \
                     WHERE id = ?1 AND state = 'leased' AND token = ?2",
                )
                .and_then(|mut st| st.execute(params![id, token, c.next_seq() as i64]))
                .map_err(db_err)?;
            Ok(n == 1)
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
                    "UPDATE jobs SET state = 'ready', attempt = 0, seq = ?2, error = NULL, \
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

fn live_entry(conn: &Connection, key: &str, now: u64) -> Result<Option<CacheEntry>> {
    type Row = (String, Vec<u8>, i64, i64, Option<String>);
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT model_id, vector, fence, expires_at, by_json FROM cache \
             WHERE key = ?1 AND expires_at > ?2",
        )
        .and_then(|mut st| {
            st.query_row(params![key, now as i64], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .optional()
        })
        .map_err(db_err)?;
    row.map(|(model_id, v, fence, exp, by)| {
        Ok(CacheEntry {
            model_id,
            vector: Vector(decode_vec(&v)?),
            fence: fence as u64,
            expires_at: exp as u64,
            by: by.as_deref().and_then(|b| serde_json::from_str(b).ok()),
        })
    })
    .transpose()
}

#[async_trait]
impl CacheStore for SqliteStore {
    async fn cache_get(&self, key: &str, now: u64) -> Result<Option<CacheEntry>> {
        let key = key.to_owned();
        self.read(move |conn| live_entry(conn, &key, now)).await
    }

    async fn cache_get_many(&self, keys: &[String], now: u64) -> Result<Vec<Option<CacheEntry>>> {
        let keys = keys.to_vec();
        // One trip to the reader thread for the lot (each lookup one statement).
        self.read(move |conn| keys.iter().map(|k| live_entry(conn, k, now)).collect())
            .await
    }

    async fn cache_put(
        &self,
        key: &str,
        entry: CacheEntry,
        by: Fenced,
        now: u64,
    ) -> Result<PutOutcome> {
        let key = key.to_owned();
        let fenced = by;
        let by = entry
            .by
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(json_err)?;
        self.run(move |conn, _| {
            if fenced == Fenced::ByLock {
                let lock: Option<i64> = conn
                    .prepare_cached("SELECT fence FROM locks WHERE key = ?1 AND expires_at > ?2")
                    .and_then(|mut st| {
                        st.query_row(params![key, now as i64], |r| r.get(0))
                            .optional()
                    })
                    .map_err(db_err)?;
                if lock != Some(entry.fence as i64) {
                    return Ok(PutOutcome::Unfenced);
                }
            }
            let cur = live_entry(conn, &key, now)?;
            if let Some(cur) = &cur {
                if cur.fence > entry.fence {
                    return Ok(PutOutcome::Stale(cur.clone()));
                }
            }
            conn.prepare_cached(
                "INSERT INTO cache (key, model_id, vector, fence, expires_at, by_json) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(key) DO UPDATE SET \
                 model_id = excluded.model_id, vector = excluded.vector, \
                 fence = excluded.fence, expires_at = excluded.expires_at, \
                 by_json = excluded.by_json",
            )
            .and_then(|mut st| {
                st.execute(params![
                    key,
                    entry.model_id,
                    encode_vec(&entry.vector.0),
                    entry.fence as i64,
                    entry.expires_at as i64,
                    by
                ])
            })
            .map_err(db_err)?;
            Ok(PutOutcome::Stored {
                replaced: cur.is_some(),
            })
        })
        .await
    }

    async fn cache_delete(&self, key: &str) -> Result<bool> {
        let key = key.to_owned();
        self.run(move |conn, _| {
            conn.prepare_cached("DELETE FROM cache WHERE key = ?1")
                .and_then(|mut st| st.execute([key]))
                .map(|n| n == 1)
                .map_err(db_err)
        })
        .await
    }

    async fn cache_bytes(&self, now: u64) -> Result<u64> {
        self.read(move |conn| {
            conn.prepare_cached(
                "SELECT COALESCE(SUM(length(CAST(key AS BLOB)) + length(vector)), 0) \
                 FROM cache WHERE expires_at > ?1",
            )
            .and_then(|mut st| st.query_row([now as i64], |r| r.get::<_, i64>(0)))
            .map(|n| n.max(0) as u64)
            .map_err(db_err)
        })
        .await
    }

    async fn sweep(&self, now: u64, limit: usize) -> Result<u64> {
        self.run(move |conn, _| {
            let limit = limit.min(i64::MAX as usize) as i64;
            let mut n = 0;
            for table in ["cache", "locks"] {
                n += conn
                    .prepare_cached(&format!(
                        "DELETE FROM {table} WHERE key IN (SELECT key FROM {table} \
                         WHERE expires_at <= ?1 LIMIT ?2)"
                    ))
                    .and_then(|mut st| st.execute(params![now as i64, limit]))
                    .map_err(db_err)? as u64;
            }
            Ok(n)
        })
        .await
    }
}

#[async_trait]
impl LockStore for SqliteStore {
    async fn lock_acquire(&self, key: &str, ttl_ms: u64, now: u64) -> Result<LockOutcome> {
        let key = key.to_owned();
        self.run(move |conn, c| {
            let held: Option<i64> = conn
                .prepare_cached("SELECT expires_at FROM locks WHERE key = ?1 AND expires_at > ?2")
                .and_then(|mut st| {
                    st.query_row(params![key, now as i64], |r| r.get(0))
                        .optional()
                })
                .map_err(db_err)?;
            if let Some(exp) = held {
                return Ok(LockOutcome::Held {
                    expires_at: exp as u64,
                });
            }
            let grant = LockGrant {
                token: new_token(),
                fence: c.next_fence(),
                expires_at: now + ttl_ms,
            };
            conn.prepare_cached(
                "INSERT INTO locks (key, token, fence, expires_at) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT(key) DO UPDATE SET token = excluded.token, fence = excluded.fence, \
                 expires_at = excluded.expires_at",
            )
            .and_then(|mut st| {
                st.execute(params![
                    key,
                    grant.token,
                    grant.fence as i64,
                    grant.expires_at as i64
                ])
            })
            .map_err(db_err)?;
            Ok(LockOutcome::Granted(grant))
        })
        .await
    }

    async fn lock_renew(
        &self,
        key: &str,
        token: &str,
        ttl_ms: u64,
        now: u64,
    ) -> Result<Option<LockGrant>> {
        let (key, token) = (key.to_owned(), token.to_owned());
        self.run(move |conn, _| {
            let expires_at = now + ttl_ms;
            let fence: Option<i64> = conn
                .prepare_cached(
                    "UPDATE locks SET expires_at = ?3 WHERE key = ?1 AND token = ?2 \
                     AND expires_at > ?4 RETURNING fence",
                )
                .and_then(|mut st| {
                    st.query_row(params![key, token, expires_at as i64, now as i64], |r| {
                        r.get(0)
                    })
                    .optional()
                })
                .map_err(db_err)?;
            Ok(fence.map(|f| LockGrant {
                token,
                fence: f as u64,
                expires_at,
            }))
        })
        .await
    }

    async fn lock_release(&self, key: &str, token: &str) -> Result<bool> {
        let (key, token) = (key.to_owned(), token.to_owned());
        self.run(move |conn, _| {
            conn.prepare_cached("DELETE FROM locks WHERE key = ?1 AND token = ?2")
                .and_then(|mut st| st.execute(params![key, token]))
                .map(|n| n == 1)
                .map_err(db_err)
        })
        .await
    }
}

#[async_trait]
impl EventBus for SqliteStore {
    async fn publish(&self, event: ServerEvent) -> Result<u64> {
        Ok(self.events.publish(event))
    }

    fn subscribe(&self) -> broadcast::Receiver<NumberedEvent> {
        self.events.subscribe()
    }

    fn last_event_id(&self) -> u64 {
        self.events.last_id()
    }
}
