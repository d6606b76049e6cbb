//! The database thread: it owns the one SQLite connection and runs every operation, so no
//! database call ever blocks an async runtime thread.
//!
//! # Group commit
//! The thread takes the next operation, then every operation already waiting (up to
//! [`MAX_GROUP`]), and runs them in one transaction, each inside a savepoint of its own: an
//! operation that fails is rolled back alone, and the others still commit. Nobody hears back
//! before `COMMIT` has returned, so nothing is confirmed to a client that is not in the
//! database. When `COMMIT` (or a statement that makes SQLite abandon the transaction, as a full
//! disk does) fails, the whole group is rolled back and every operation in it gets the error:
//! the database is exactly as before, and the clients retry.
//!
//! Under load this turns many small transactions into a few large ones (one WAL append and, with
//! `synchronous=FULL`, one `fsync` per group instead of per operation).

use std::sync::mpsc::{Receiver, TryRecvError};

use rusqlite::Connection;

/// Most operations committed together.
pub(super) const MAX_GROUP: usize = 512;

/// Counters that live in the `meta` table: job sequence numbers and fences.
#[derive(Debug, Default)]
pub(super) struct Counters {
    seq: u64,
    fence: u64,
    /// Whether an operation of the current group drew a number (only then is `meta` written:
    /// a group of reads must commit even while the disk refuses writes).
    drawn: bool,
}

impl Counters {
    pub(super) fn load(conn: &Connection) -> rusqlite::Result<Self> {
        let get = |k: &str| -> rusqlite::Result<u64> {
            conn.query_row("SELECT v FROM meta WHERE k = ?1", [k], |r| {
                r.get::<_, i64>(0)
            })
            .map(|v| v as u64)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(0),
                e => Err(e),
            })
        };
        let seq = get("seq")?;
        let fence = get("fence")?;
        Ok(Counters {
            seq,
            fence,
            drawn: false,
        })
    }

    pub(super) fn next_seq(&mut self) -> u64 {
        self.drawn = true;
        self.seq += 1;
        self.seq
    }

    pub(super) fn next_fence(&mut self) -> u64 {
        self.drawn = true;
        self.fence += 1;
        self.fence
    }

    /// Writes the counters inside the group's transaction when the group drew a number.
    /// Counters only move forward: a rolled-back group leaves a gap, never a repeat.
    fn save(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        if !std::mem::take(&mut self.drawn) {
            return Ok(());
        }
        let mut st = conn.prepare_cached(
            "INSERT INTO meta (k, v) VALUES (?1, ?2) ON CONFLICT(k) DO UPDATE SET v = excluded.v",
        )?;
        st.execute(rusqlite::params!["seq", self.seq as i64])?;
        st.execute(rusqlite::params!["fence", self.fence as i64])?;
        Ok(())
    }
}

/// Sends an operation's answer once its group's fate is known: `None` when it committed,
/// `Some(message)` when the group was rolled back.
pub(super) type Reply = Box<dyn FnOnce(Option<&str>) + Send>;

/// An operation: given the connection (inside a transaction) it runs and returns whether it
/// succeeded, and its [`Reply`]. Given `None` it must not touch the database, only make its
/// reply (the transaction could not even start).
pub(super) type Op = Box<dyn FnOnce(Option<(&Connection, &mut Counters)>) -> (bool, Reply) + Send>;

/// Runs operations until every sender is gone.
pub(super) fn run(conn: Connection, ops: Receiver<Op>, mut counters: Counters) {
    while let Ok(first) = ops.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match ops.try_recv() {
                Ok(op) => group.push(op),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        run_group(&conn, group, &mut counters);
    }
}

/// Runs a statement through the statement cache (parsed once, not per operation).
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// Runs read-only operations, one at a time, each a single statement in autocommit mode on a
/// connection of its own (WAL lets it read while the writer writes), until every sender is gone.
pub(super) fn run_reader(conn: Connection, ops: Receiver<ReadOp>) {
    while let Ok(op) = ops.recv() {
        op(&conn);
    }
}

/// A read-only operation: it runs and sends its own answer.
pub(super) type ReadOp = Box<dyn FnOnce(&Connection) + Send>;

fn run_group(conn: &Connection, group: Vec<Op>, counters: &mut Counters) {
    if let Err(e) = exec(conn, "BEGIN IMMEDIATE") {
        let msg = format!("begin: {e}");
        for op in group {
            op(None).1(Some(&msg));
        }
        return;
    }
    let mut replies: Vec<Reply> = Vec::with_capacity(group.len());
    let mut abandoned: Option<String> = None;
    let mut rest = group.into_iter();
    for op in rest.by_ref() {
        if let Err(e) = exec(conn, "SAVEPOINT op") {
            abandoned = Some(format!("savepoint: {e}"));
            replies.push(op(None).1);
            break;
        }
        let (ok, reply) = op(Some((conn, counters)));
        replies.push(reply);
        if conn.is_autocommit() {
            // SQLite rolled the whole transaction back itself (SQLITE_FULL, SQLITE_IOERR, …):
            // nothing of this group is in the database any more.
            abandoned = Some(
                "the database rolled the transaction back (disk full or I/O error)".to_owned(),
            );
            break;
        }
        let end = if ok {
            exec(conn, "RELEASE op")
        } else {
            exec(conn, "ROLLBACK TO op").and_then(|()| exec(conn, "RELEASE op"))
        };
        if let Err(e) = end {
            abandoned = Some(format!("savepoint: {e}"));
            break;
        }
    }
    for op in rest {
        replies.push(op(None).1);
    }
    let outcome = match abandoned {
        Some(msg) => Err(msg),
        None => counters
            .save(conn)
            .and_then(|()| exec(conn, "COMMIT"))
            .map_err(|e| format!("commit: {e}")),
    };
    match outcome {
        Ok(()) => {
            for r in replies {
                r(None);
            }
        }
        Err(msg) => {
            counters.drawn = false;
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            tracing::warn!(error = %msg, ops = replies.len(), "store transaction rolled back");
            for r in replies {
                r(Some(&msg));
            }
        }
    }
}
