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
//! Beside this file (the store's plumbing: opening, migrating, the threads, shutdown): [`writer`]
//! (the group-committing writer and reader threads), `rows` (rows as protocol types),
//! `housekeeping` (lease expiry and delayed jobs), one file per capability — `queue`
//! (`QueueStore`), `cache` (`CacheStore`), `locks` (`LockStore`), `events` (`EventBus`), `scan`
//! (`ResultScan`), `integrity` (`IntegrityStore`), `usage` (`UsageStore`) — and `dir_lock` (one
//! server per data directory).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::store::local_events::LocalEvents;

mod cache;
mod dir_lock;
mod events;
mod housekeeping;
mod locks;
mod queue;
mod rows;
mod scan;
mod writer;

pub use dir_lock::lock_data_dir;

use writer::{Counters, Op, ReadOp, Reply};

mod integrity;
mod usage;

/// One server per data directory (`dir_lock`): the server's own buckets are its budgets.
impl crate::store::BudgetStore for SqliteStore {}

const SCHEMA: &str = include_str!("schema.sql");

/// `PRAGMA user_version` of a database whose provenance index holds no rows for what is gone.
const FORGOTTEN_ROWS_CLEARED: i64 = 1;

/// Brings a database made by an earlier version to this schema, once, keeping its data:
/// `cache.by_json` (the writer, added with result verification), `jobs.releases` (a job's
/// releases, counted since a release past a few uses an attempt), `jobs.sub` (who holds a
/// lease, for the history of a failed delivery), the cache as a rowid table
/// (it was `WITHOUT ROWID`; see schema.sql), and the provenance rows of jobs forgotten and
/// entries swept before the index forgot them itself (`integrity::forget_written`).
fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    /// Adds `column` (`decl`) to `table` unless it has it (a database made before the column).
    fn add_column(
        conn: &Connection,
        table: &str,
        column: &str,
        decl: &str,
    ) -> rusqlite::Result<()> {
        let has: bool = conn.query_row(
            "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2",
            [table, column],
            |r| r.get::<_, i64>(0).map(|n| n > 0),
        )?;
        if !has {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {decl}"))?;
        }
        Ok(())
    }

    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version < FORGOTTEN_ROWS_CLEARED {
        let n = conn.execute(
            "DELETE FROM written WHERE \
               (item GLOB 'j:*' AND NOT EXISTS (SELECT 1 FROM jobs WHERE id = substr(item, 3))) \
               OR (item GLOB 'c:*' AND NOT EXISTS (SELECT 1 FROM cache WHERE key = substr(item, 3)))",
            [],
        )?;
        if n > 0 {
            tracing::info!(
                rows = n,
                "provenance rows of jobs and entries already gone removed (once)"
            );
        }
        conn.execute_batch(&format!("PRAGMA user_version = {FORGOTTEN_ROWS_CLEARED}"))?;
    }
    add_column(conn, "cache", "by_json", "TEXT")?;
    add_column(conn, "jobs", "releases", "INTEGER NOT NULL DEFAULT 0")?;
    add_column(conn, "jobs", "sub", "TEXT")?;
    let sql: String = conn.query_row(
        "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'cache'",
        [],
        |r| r.get(0),
    )?;
    if sql.to_ascii_uppercase().contains("WITHOUT ROWID") {
        let n: i64 = conn.query_row("SELECT COUNT(*) FROM cache", [], |r| r.get(0))?;
        // A big cache takes a while (every entry copied once): say why the start waits.
        tracing::info!(
            entries = n,
            "converting the cache table to a rowid table (once)"
        );
        // One transaction: a crash leaves the old table or the new one, never neither. The
        // schema, run again, makes the new table and its index.
        conn.execute_batch(&format!(
            "BEGIN IMMEDIATE; \
             ALTER TABLE cache RENAME TO cache_without_rowid; \
             DROP INDEX IF EXISTS cache_expiry; \
             {SCHEMA}; \
             INSERT INTO cache (key, model_id, vector, fence, expires_at, by_json) \
               SELECT key, model_id, vector, fence, expires_at, by_json FROM cache_without_rowid \
               ORDER BY expires_at; \
             DROP TABLE cache_without_rowid; \
             COMMIT;"
        ))?;
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
