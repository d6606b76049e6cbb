//! The store conformance suite against every store — in memory, SQLite, one Redis, a Redis
//! Cluster (3 masters + 3 replicas), one Valkey and a Valkey cluster — and store-specific
//! durability checks.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};

use ternflow_core::protocol::{JobState, Vector};
use ternflow_server::store::{
    CacheStore, Fenced, LockOutcome, LockStore, PutOutcome, QueueStore, Released,
};
use ternflow_server::{MemoryStore, RedisStore, SqliteStore, Synchronous};

// One test per conformance case per store (`cargo test --test store_conformance sqlite::locks`).

async fn fresh_memory() -> (MemoryStore, ()) {
    (MemoryStore::new(), ())
}

async fn fresh_sqlite() -> (SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    (
        SqliteStore::open(dir.path(), Synchronous::Full).unwrap(),
        dir,
    )
}

/// A Redis server of its own per case (cases run in parallel; each server dies with its guard).
async fn fresh_redis() -> (RedisStore, common::RedisServer) {
    static N: AtomicU32 = AtomicU32::new(0);
    let redis = common::RedisServer::start();
    let prefix = format!("c{}", N.fetch_add(1, Ordering::SeqCst));
    (
        RedisStore::connect(&redis.url(), &prefix).await.unwrap(),
        redis,
    )
}

/// A store on a Redis-protocol server of its own per case.
async fn fresh_single(bin: &str) -> (RedisStore, common::RedisServer) {
    static N: AtomicU32 = AtomicU32::new(0);
    let redis = common::RedisServer::start_with(bin, &[]);
    let prefix = format!("v{}", N.fetch_add(1, Ordering::SeqCst));
    (
        RedisStore::connect(&redis.url(), &prefix).await.unwrap(),
        redis,
    )
}

/// A store of a prefix of its own on the cluster of `bin` that this test binary shares (the
/// prefixes, being hash tags, spread the cases over the three masters).
async fn fresh_on_cluster(bin: &str) -> (RedisStore, ()) {
    static N: AtomicU32 = AtomicU32::new(0);
    let url = common::cluster::RedisCluster::shared(bin);
    let prefix = format!("k{}", N.fetch_add(1, Ordering::SeqCst));
    (RedisStore::connect(&url, &prefix).await.unwrap(), ())
}

async fn fresh_redis_cluster() -> (RedisStore, ()) {
    fresh_on_cluster("redis-server").await
}

async fn fresh_valkey() -> (RedisStore, common::RedisServer) {
    fresh_single(&common::cluster::valkey_server()).await
}

async fn fresh_valkey_cluster() -> (RedisStore, ()) {
    fresh_on_cluster(&common::cluster::valkey_server()).await
}

mod memory {
    ternflow_server::store_conformance_tests!(super::fresh_memory);
}

mod sqlite {
    ternflow_server::store_conformance_tests!(super::fresh_sqlite);
}

mod redis {
    ternflow_server::store_conformance_tests!(super::fresh_redis);
}

mod redis_cluster {
    ternflow_server::store_conformance_tests!(super::fresh_redis_cluster);
}

mod valkey {
    ternflow_server::store_conformance_tests!(super::fresh_valkey);
}

mod valkey_cluster {
    ternflow_server::store_conformance_tests!(super::fresh_valkey_cluster);
}

use common::{job, result};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_reopen_keeps_leases_locks_and_growing_fences() {
    let dir = tempfile::tempdir().unwrap();
    let (b_lease, lock);
    {
        let s = SqliteStore::open(dir.path(), Synchronous::Normal).unwrap();
        s.enqueue(vec![job("a"), job("b"), job("c")], 10)
            .await
            .unwrap();
        let c = s.claim("w", None, 2, 1_000, 5, 10).await.unwrap();
        b_lease = c.jobs[1].lease.clone();
        s.ack("a", &c.jobs[0].lease.token, result(), 10)
            .await
            .unwrap();
        let LockOutcome::Granted(g) = s.lock_acquire("m:k", 5_000, 10).await.unwrap() else {
            panic!("lock");
        };
        lock = g;
        // b stays leased; c stays queued.
    }
    let s = SqliteStore::open(dir.path(), Synchronous::Normal).unwrap();
    assert!(matches!(
        s.status("a").await.unwrap().unwrap().state,
        JobState::Done { .. }
    ));
    // A restart keeps live leases: the holder can still heartbeat and ack.
    let hb = s
        .heartbeat("b", &b_lease.token, 1_000, 3_600_000, 500)
        .await
        .unwrap();
    assert_eq!(hb.map(|l| l.fence), Some(b_lease.fence));
    assert!(matches!(
        s.lock_acquire("m:k", 5_000, 20).await.unwrap(),
        LockOutcome::Held { .. }
    ));
    let put = s
        .cache_put(
            "m:k",
            ternflow_core::protocol::CacheEntry {
                model_id: "m".into(),
                vector: Vector(vec![1.0]),
                fence: lock.fence,
                expires_at: 10_000,
                by: None,
            },
            Fenced::ByLock,
            20,
        )
        .await
        .unwrap();
    assert_eq!(
        put,
        PutOutcome::Stored { replaced: false },
        "the lock's fence is still valid"
    );
    let d = s.depth(10).await.unwrap();
    assert_eq!((d.ready, d.leased), (1, 1));
    let c = s.claim("w", None, 5, 1_000, 5, 2_000).await.unwrap();
    assert_eq!(c.jobs.len(), 2, "c, and b after its lease expired");
    assert!(
        c.jobs.iter().all(|j| j.lease.fence > lock.fence),
        "fences keep growing"
    );
}

#[tokio::test]
async fn sqlite_refuses_a_file_that_is_not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ternflow.sqlite3"), vec![0x5a; 8192]).unwrap();
    let err = SqliteStore::open(dir.path(), Synchronous::Normal).unwrap_err();
    assert!(err.to_string().contains("not a database"), "{err}");
}

/// The cache table's definition as stored in the database file.
fn cache_table_sql(dir: &std::path::Path) -> String {
    let c = rusqlite::Connection::open(dir.join("ternflow.sqlite3")).unwrap();
    c.query_row(
        "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'cache'",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

/// A database made before jobs counted their releases (and kept who holds a lease) gains the
/// columns on open: a job leased then is released as one that never was released (free), and
/// counted past the free ones.
#[tokio::test]
async fn sqlite_migrates_jobs_without_release_counts() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = rusqlite::Connection::open(dir.path().join("ternflow.sqlite3")).unwrap();
        c.execute_batch(
            "CREATE TABLE jobs (id TEXT PRIMARY KEY, text TEXT NOT NULL, \
             model_id TEXT NOT NULL, priority INTEGER NOT NULL, meta TEXT, \
             trace_id TEXT NOT NULL, seq INTEGER NOT NULL, \
             attempt INTEGER NOT NULL DEFAULT 0, history TEXT NOT NULL DEFAULT '[]', \
             state TEXT NOT NULL, available_at INTEGER NOT NULL DEFAULT 0, token TEXT, \
             fence INTEGER, expires_at INTEGER, worker TEXT, leased_at INTEGER, result TEXT, \
             error TEXT, ended_at INTEGER); \
             INSERT INTO jobs (id, text, model_id, priority, trace_id, seq, attempt, state, \
             token, fence, expires_at, worker, leased_at) VALUES ('j', 'old', 'm', 0, \
             '0af7651916cd43dd8448eb211c80319c', 1, 1, 'leased', 'tk', 4, 90000, 'w', 50);",
        )
        .unwrap();
    }
    let s = SqliteStore::open(dir.path(), Synchronous::Normal).unwrap();
    assert_eq!(
        s.release("j", "tk", 1, 5, 100).await.unwrap(),
        Released::Free
    );
    let c = s.claim("w", None, 1, 1_000, 5, 200).await.unwrap();
    assert_eq!(c.jobs[0].attempt, 1, "the free release used no attempt");
    assert_eq!(
        s.release("j", &c.jobs[0].lease.token, 1, 5, 300)
            .await
            .unwrap(),
        Released::Counted,
        "its one free release is used"
    );
}

/// A database made before cache entries recorded their writer gains the column on open, and
/// keeps its entries (in the rowid table that replaced the `WITHOUT ROWID` one).
#[tokio::test]
async fn sqlite_migrates_a_cache_without_writers() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = rusqlite::Connection::open(dir.path().join("ternflow.sqlite3")).unwrap();
        c.execute_batch(
            "CREATE TABLE cache (key TEXT PRIMARY KEY, model_id TEXT NOT NULL, \
             vector BLOB NOT NULL, fence INTEGER NOT NULL, expires_at INTEGER NOT NULL) \
             WITHOUT ROWID; \
             INSERT INTO cache VALUES ('m:k', 'm', x'0000803f', 3, 1000000);",
        )
        .unwrap();
    }
    let s = SqliteStore::open(dir.path(), Synchronous::Normal).unwrap();
    let e = s
        .cache_get("m:k", 10)
        .await
        .unwrap()
        .expect("the old entry");
    assert_eq!((e.vector.0, e.fence, e.by), (vec![1.0], 3, None));
    drop(s);
    assert!(!cache_table_sql(dir.path()).contains("WITHOUT ROWID"));
    // Opening again does nothing more.
    let s = SqliteStore::open(dir.path(), Synchronous::Normal).unwrap();
    assert!(s.cache_get("m:k", 10).await.unwrap().is_some());
}

/// A `WITHOUT ROWID` cache with writers (the previous schema) becomes a rowid table on open,
/// every entry kept whole (writer, fence, expiry, vector) and its expiry index made anew; an
/// entry written after it replaces, reads and sweeps as before.
#[tokio::test]
async fn sqlite_migrates_a_without_rowid_cache_with_writers() {
    let dir = tempfile::tempdir().unwrap();
    let by = r#"{"tenant":"t","sub":"w-1","worker":"w","at":5}"#;
    {
        let c = rusqlite::Connection::open(dir.path().join("ternflow.sqlite3")).unwrap();
        c.execute_batch(
            "CREATE TABLE cache (key TEXT PRIMARY KEY, model_id TEXT NOT NULL, \
             vector BLOB NOT NULL, fence INTEGER NOT NULL, expires_at INTEGER NOT NULL, \
             by_json TEXT) WITHOUT ROWID; \
             CREATE INDEX cache_expiry ON cache (expires_at);",
        )
        .unwrap();
        for (i, exp) in [(0u32, 1_000_000i64), (1, 50), (2, 2_000_000)] {
            c.execute(
                "INSERT INTO cache VALUES (?1, 'm', ?2, ?3, ?4, ?5)",
                rusqlite::params![
                    format!("m:k{i}"),
                    (i as f32).to_le_bytes().to_vec(),
                    i64::from(i) + 7,
                    exp,
                    by
                ],
            )
            .unwrap();
        }
    }
    let s = SqliteStore::open(dir.path(), Synchronous::Normal).unwrap();
    for i in [0u32, 2] {
        let e = s.cache_get(&format!("m:k{i}"), 100).await.unwrap().unwrap();
        assert_eq!(e.vector.0, vec![i as f32]);
        assert_eq!(e.fence, u64::from(i) + 7);
        let w = e.by.expect("its writer");
        assert_eq!((w.tenant.as_str(), w.sub.as_str(), w.at), ("t", "w-1", 5));
    }
    assert!(s.cache_get("m:k1", 100).await.unwrap().is_none(), "expired");
    assert_eq!(
        s.sweep(100, 10).await.unwrap(),
        1,
        "the expired entry swept"
    );
    let mut e = s.cache_get("m:k0", 100).await.unwrap().unwrap();
    e.fence = 9;
    assert!(matches!(
        s.cache_put("m:k0", e, Fenced::ByLease, 100).await.unwrap(),
        PutOutcome::Stored { replaced: true }
    ));
    drop(s);
    let sql = cache_table_sql(dir.path());
    assert!(!sql.contains("WITHOUT ROWID"), "{sql}");
    let c = rusqlite::Connection::open(dir.path().join("ternflow.sqlite3")).unwrap();
    let (n, idx): (i64, i64) = c
        .query_row(
            "SELECT (SELECT COUNT(*) FROM cache), (SELECT COUNT(*) FROM sqlite_schema \
             WHERE type = 'index' AND name = 'cache_expiry' AND tbl_name = 'cache')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((n, idx), (2, 1));
    assert_eq!(
        c.query_row("SELECT fence FROM cache WHERE key = 'm:k0'", [], |r| r
            .get::<_, i64>(0))
            .unwrap(),
        9
    );
}

/// An embedded store in `dir` that forgets finished jobs `ms` after they finished.
fn sqlite_keeping_done_for(dir: &std::path::Path, ms: u64) -> SqliteStore {
    SqliteStore::open(dir, Synchronous::Normal)
        .unwrap()
        .with_done_retention(ms)
}

#[tokio::test]
async fn sqlite_done_retention_forgets_finished_jobs() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = sqlite_keeping_done_for(dir.path(), 1_000);
        s.enqueue(vec![job("a"), job("b")], 10).await.unwrap();
        let c = s.claim("w", None, 1, 60_000, 5, 10).await.unwrap();
        s.ack("a", &c.jobs[0].lease.token, result(), 100)
            .await
            .unwrap();
        s.claim("w", None, 0, 60_000, 5, 1_099).await.unwrap();
        assert!(
            s.status("a").await.unwrap().is_some(),
            "kept for the retention"
        );
        s.claim("w", None, 0, 60_000, 5, 1_100).await.unwrap();
        assert!(s.status("a").await.unwrap().is_none(), "forgotten after it");
        assert!(
            s.status("b").await.unwrap().is_some(),
            "unfinished jobs stay"
        );
    }
    let s = SqliteStore::open(dir.path(), Synchronous::Normal).unwrap();
    assert!(
        s.status("a").await.unwrap().is_none(),
        "forgetting is committed"
    );
    assert!(s.enqueue(vec![job("a")], 2_000).await.unwrap()[0].new);
}

#[tokio::test]
async fn redis_done_retention_forgets_finished_jobs() {
    let redis = common::RedisServer::start();
    let s = RedisStore::connect(&redis.url(), "ret")
        .await
        .unwrap()
        .with_done_retention(200);
    s.enqueue(vec![job("a")], 10).await.unwrap();
    let c = s.claim("w", None, 1, 60_000, 5, 10).await.unwrap();
    s.ack("a", &c.jobs[0].lease.token, result(), 10)
        .await
        .unwrap();
    assert!(s.status("a").await.unwrap().is_some());
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert!(s.status("a").await.unwrap().is_none());
    assert!(s.enqueue(vec![job("a")], 10).await.unwrap()[0].new);
}

/// Jobs finished under an earlier version sit in `{P}:done` (every score 0, paged by id); this
/// version adds to `{P}:finished` (scored by finishing order). A scan reads both, each job once,
/// across page boundaries in either index; a requeue takes a job off whichever holds it; an
/// earlier version's cursor (a bare id) still resumes in the old index.
#[tokio::test]
async fn redis_scan_reads_the_old_done_index_then_the_new() {
    use ternflow_server::store::{AckInput, IntegrityStore};
    use ternflow_server::ResultScan;
    let redis = common::RedisServer::start();
    let s = RedisStore::connect(&redis.url(), "scan").await.unwrap();
    let ids: Vec<String> = (0..11).map(|i| format!("j{i:02}")).collect();
    s.enqueue(ids.iter().map(|id| job(id)).collect(), 10)
        .await
        .unwrap();
    let claimed = s.claim("w", None, 11, 60_000, 5, 10).await.unwrap().jobs;
    // Seven through ack_many, four through ack.
    let (many, one) = claimed.split_at(7);
    let acks = many
        .iter()
        .map(|j| AckInput {
            id: j.id.clone(),
            token: j.lease.token.clone(),
            result: result(),
        })
        .collect();
    s.ack_many(acks, 10).await.unwrap();
    for j in one {
        s.ack(&j.id, &j.lease.token, result(), 10).await.unwrap();
    }
    // Five of them as an earlier version left them: in the old index, scored 0.
    let client = ::redis::Client::open(redis.url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let scored: Vec<(String, f64)> = ::redis::cmd("ZRANGE")
        .arg("{scan}:finished")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut con)
        .await
        .unwrap();
    let scores: Vec<f64> = scored.iter().map(|(_, s)| *s).collect();
    assert_eq!(
        scores,
        (1..=11).map(f64::from).collect::<Vec<_>>(),
        "scored by finishing order"
    );
    let old = ["j01", "j03", "j05", "j08", "j10"];
    for id in old {
        let _: () = ::redis::pipe()
            .zrem("{scan}:finished", id)
            .ignore()
            .zadd("{scan}:done", id, 0)
            .ignore()
            .query_async(&mut con)
            .await
            .unwrap();
    }
    async fn scan_all(s: &RedisStore, first: String) -> Vec<String> {
        let (mut cursor, mut seen, mut pages) = (first, Vec::new(), 0);
        loop {
            let page = s.scan_done(&cursor, 2).await.unwrap();
            pages += 1;
            assert!(pages < 100, "the scan ends");
            seen.extend(page.jobs.into_iter().map(|d| d.id));
            match page.next {
                Some(n) => cursor = n,
                None => break,
            }
        }
        seen
    }
    let seen = scan_all(&s, String::new()).await;
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(sorted, ids, "every finished job, each once");
    assert_eq!(&seen[..5], old, "the old index first, by id");
    // An earlier version's cursor: the id after which to go on in the old index.
    let rest = scan_all(&s, "j05".to_owned()).await;
    assert_eq!(&rest[..2], ["j08", "j10"]);
    assert_eq!(rest.len(), 8);
    // A requeue takes a job off either index.
    let back = s
        .requeue_done(&["j03".to_owned(), "j04".to_owned()], 20)
        .await
        .unwrap();
    assert_eq!(back.len(), 2);
    let in_old: Vec<String> = ::redis::cmd("ZRANGE")
        .arg("{scan}:done")
        .arg(0)
        .arg(-1)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(in_old, ["j01", "j05", "j08", "j10"]);
    let in_new: u64 = ::redis::cmd("ZCARD")
        .arg("{scan}:finished")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(in_new, 5);
    assert_eq!(scan_all(&s, String::new()).await.len(), 9);
}

/// The provenance index keeps no row for what is gone: a job the done-retention forgot, a cache
/// entry swept past its expiry or deleted (every writer's row for it); what still exists stays.
/// (The embedded and the memory store; Redis does not trim it yet: docs/security.md.)
async fn provenance_index_forgets_what_is_gone<S>(s: S)
where
    S: ternflow_server::Store,
{
    use ternflow_core::protocol::CacheEntry;
    use ternflow_server::store::Written;
    s.enqueue(vec![job("a"), job("b")], 10).await.unwrap();
    let c = s.claim("w", None, 1, 60_000, 5, 10).await.unwrap();
    s.ack(&c.jobs[0].id, &c.jobs[0].lease.token, result(), 10)
        .await
        .unwrap();
    let entry = |expires_at| CacheEntry {
        model_id: "m".into(),
        vector: Vector(vec![1.0]),
        fence: 1,
        expires_at,
        by: None,
    };
    for (k, exp) in [("m:short", 50), ("m:long", 100_000), ("m:deleted", 100_000)] {
        s.cache_put(k, entry(exp), Fenced::ByLease, 10)
            .await
            .unwrap();
    }
    let items =
        |v: &[&str]| -> Vec<Written> { v.iter().map(|s| Written::decode(s).unwrap()).collect() };
    s.note_written(
        "w1",
        items(&["j:a", "j:b", "c:m:short", "c:m:long", "c:m:deleted"]),
    )
    .await
    .unwrap();
    s.note_written("w2", items(&["c:m:short"])).await.unwrap();
    // Past the retention (a claim runs the pass), the sweep and a delete.
    s.claim("w", None, 1, 60_000, 5, 1_000).await.unwrap();
    s.sweep(1_000, 100).await.unwrap();
    assert!(s.cache_delete("m:deleted").await.unwrap());
    assert!(s.status("a").await.unwrap().is_none(), "a is forgotten");
    assert_eq!(
        s.written_by("w1").await.unwrap(),
        items(&["c:m:long", "j:b"]),
        "what still exists (b is leased, m:long live)"
    );
    assert!(s.written_by("w2").await.unwrap().is_empty());
}

#[tokio::test]
async fn sqlite_provenance_index_forgets_what_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    provenance_index_forgets_what_is_gone(sqlite_keeping_done_for(dir.path(), 100)).await;
}

/// A database whose provenance index kept rows for jobs forgotten and entries swept (as versions
/// before 2026-12-05 did) loses them on open, once; rows for what is still there stay.
#[tokio::test]
async fn sqlite_clears_provenance_rows_of_what_was_gone_once() {
    use ternflow_server::store::{CacheStore, IntegrityStore, Written};
    let dir = tempfile::tempdir().unwrap();
    let items =
        |v: &[&str]| -> Vec<Written> { v.iter().map(|s| Written::decode(s).unwrap()).collect() };
    {
        let s = SqliteStore::open(dir.path(), Synchronous::Normal).unwrap();
        s.enqueue(vec![job("a")], 10).await.unwrap();
        let entry = ternflow_core::protocol::CacheEntry {
            model_id: "m".into(),
            vector: Vector(vec![1.0]),
            fence: 1,
            expires_at: 100_000,
            by: None,
        };
        s.cache_put("m:k", entry, Fenced::ByLease, 10)
            .await
            .unwrap();
        s.note_written("w1", items(&["j:a", "j:gone", "c:m:k", "c:m:gone"]))
            .await
            .unwrap();
    }
    // As an earlier version left it: not yet cleared.
    rusqlite::Connection::open(dir.path().join("ternflow.sqlite3"))
        .unwrap()
        .execute_batch("PRAGMA user_version = 0")
        .unwrap();
    let s = SqliteStore::open(dir.path(), Synchronous::Normal).unwrap();
    assert_eq!(s.written_by("w1").await.unwrap(), items(&["c:m:k", "j:a"]));
    // Once: the next open clears nothing (a row noted after for an id never stored stays).
    s.note_written("w1", items(&["j:unknown"])).await.unwrap();
    drop(s);
    let s = SqliteStore::open(dir.path(), Synchronous::Normal).unwrap();
    assert_eq!(s.written_by("w1").await.unwrap().len(), 3);
}

#[tokio::test]
async fn memory_provenance_index_forgets_what_is_gone() {
    provenance_index_forgets_what_is_gone(MemoryStore::new().with_done_retention(100)).await;
}

/// On Redis a writer's provenance rows are scored by when they were written and trimmed as it
/// writes: job rows older than the done-retention (kept when there is none: the jobs are), cache
/// rows older than the longest cache TTL can keep an entry. Earlier versions' set is still read,
/// and moves into the scored index as the writer writes.
#[tokio::test]
async fn redis_provenance_index_is_trimmed_as_it_grows() {
    use ternflow_server::store::{IntegrityStore, Written};
    let redis = common::RedisServer::start();
    let client = ::redis::Client::open(redis.url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let items =
        |v: &[&str]| -> Vec<Written> { v.iter().map(|s| Written::decode(s).unwrap()).collect() };
    for (prefix, retention) in [("kept", None), ("ret", Some(3_600_000))] {
        let mut s = RedisStore::connect(&redis.url(), prefix).await.unwrap();
        if let Some(ms) = retention {
            s = s.with_done_retention(ms);
        }
        // Rows written in 1970, and one in an earlier version's set.
        let _: () = ::redis::pipe()
            .zadd(format!("{{{prefix}}}:wj:w1"), "j:old", 1_000)
            .ignore()
            .zadd(format!("{{{prefix}}}:wc:w1"), "c:m:old", 1_000)
            .ignore()
            .sadd(format!("{{{prefix}}}:wrote:w1"), "j:legacy")
            .ignore()
            .query_async(&mut con)
            .await
            .unwrap();
        s.note_written("w1", items(&["j:a", "c:m:k", "j:a"]))
            .await
            .unwrap();
        let want: &[&str] = match retention {
            None => &["c:m:k", "j:a", "j:legacy", "j:old"],
            Some(_) => &["c:m:k", "j:a", "j:legacy"],
        };
        assert_eq!(s.written_by("w1").await.unwrap(), items(want), "{prefix}");
        assert!(s.written_by("w2").await.unwrap().is_empty());
        // The old set's row moved into the scored index (so the trims reach it), the set gone.
        let (old, legacy): (u64, Option<f64>) = ::redis::pipe()
            .scard(format!("{{{prefix}}}:wrote:w1"))
            .zscore(format!("{{{prefix}}}:wj:w1"), "j:legacy")
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(old, 0, "{prefix}");
        assert!(legacy.is_some_and(|at| at > 1e12), "{prefix}: {legacy:?}");
    }
}

/// The budgets a fleet shares (`budget.lua`): a minute's worth at most, all budgets paid or
/// none, a refusal that says when, and a cost past a minute's worth refused for good. On one
/// Redis and on a cluster (every budget key in the tenant's slot).
async fn budgets_pay_all_or_none(s: &RedisStore) {
    use ternflow_server::store::{Budget, BudgetStore, Spend};
    let b = |name: &str, per_min| Budget {
        name: name.to_owned(),
        per_min,
    };
    let both = [b("tok", 300), b("tenant", 100)];
    assert_eq!(s.spend(&both, 100).await.unwrap(), Some(Spend::Spent));
    // The tenant's 100 are spent: refused by budget 1, in about a minute (it refills 100 a
    // minute), and the token's budget is not charged by the refusal.
    match s.spend(&both, 100).await.unwrap() {
        Some(Spend::Wait {
            budget: 1,
            retry_after_ms,
        }) => assert!(
            (55_000..=60_000).contains(&retry_after_ms),
            "{retry_after_ms}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        s.spend(&[b("tok", 300)], 200).await.unwrap(),
        Some(Spend::Spent),
        "the refused spend took nothing from the token's budget"
    );
    assert!(matches!(
        s.spend(&[b("tok", 300)], 1).await.unwrap(),
        Some(Spend::Wait { budget: 0, .. })
    ));
    // More than a minute's worth, never; an untouched budget pays a whole minute's at once.
    assert_eq!(
        s.spend(&[b("other", 300)], 301).await.unwrap(),
        Some(Spend::Never { budget: 0 })
    );
    assert_eq!(
        s.spend(&[b("other", 300)], 300).await.unwrap(),
        Some(Spend::Spent)
    );
}

#[tokio::test]
async fn redis_budgets_pay_all_or_none() {
    let (s, _redis) = fresh_redis().await;
    budgets_pay_all_or_none(&s).await;
}

#[tokio::test]
async fn redis_cluster_budgets_pay_all_or_none() {
    let (s, ()) = fresh_redis_cluster().await;
    budgets_pay_all_or_none(&s).await;
}

/// The embedded and memory stores are one server's: they leave the budgets to the server.
#[tokio::test]
async fn local_stores_leave_budgets_to_the_server() {
    use ternflow_server::store::{Budget, BudgetStore};
    let budgets = [Budget {
        name: "tok".to_owned(),
        per_min: 1,
    }];
    let (sqlite, _dir) = fresh_sqlite().await;
    assert_eq!(sqlite.spend(&budgets, 1).await.unwrap(), None);
    assert_eq!(MemoryStore::new().spend(&budgets, 1).await.unwrap(), None);
}
