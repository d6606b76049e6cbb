//! The store conformance suite against both stores, and store-specific durability checks.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};

use ternflow_core::protocol::{JobResult, JobState, ResultSource, Vector};
use ternflow_server::store::{conformance, JobRecord, Store};
use ternflow_server::{EmbeddedStore, Fsync, RedisStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_in_memory_conforms() {
    conformance::run_all(|| async { EmbeddedStore::in_memory() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_on_disk_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let n = AtomicU32::new(0);
    conformance::run_all(|| {
        let sub = dir
            .path()
            .join(n.fetch_add(1, Ordering::SeqCst).to_string());
        async move { EmbeddedStore::open(&sub, Fsync::Always).unwrap() }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_conforms() {
    let redis = common::RedisServer::start();
    let url = redis.url();
    let n = AtomicU32::new(0);
    conformance::run_all(|| {
        let prefix = format!("c{}", n.fetch_add(1, Ordering::SeqCst));
        let url = url.clone();
        async move { RedisStore::connect(&url, &prefix).await.unwrap() }
    })
    .await;
}

fn job(id: &str) -> JobRecord {
    JobRecord {
        id: id.to_owned(),
        text: format!("text {id}"),
        model_id: "m".to_owned(),
        priority: 0,
        available_at: 0,
        meta: None,
        trace_id: "0af7651916cd43dd8448eb211c80319c".to_owned(),
    }
}

fn result() -> JobResult {
    JobResult {
        model_id: "m".to_owned(),
        vector: Vector(vec![1.0]),
        source: ResultSource::Backend,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_survives_reopen_and_keeps_fences_growing() {
    let dir = tempfile::tempdir().unwrap();
    let last_fence;
    {
        let s = EmbeddedStore::open(dir.path(), Fsync::Never).unwrap();
        s.enqueue(vec![job("a"), job("b"), job("c")], 10)
            .await
            .unwrap();
        let c = s.claim("w", 2, 1_000, 5, 10).await.unwrap();
        last_fence = c.jobs[1].lease.fence;
        s.ack("a", &c.jobs[0].lease.token, result(), 10)
            .await
            .unwrap();
        // b stays leased; c stays queued.
    }
    // A torn final line (crash mid-write) is ignored.
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("journal.jsonl"))
        .unwrap();
    f.write_all(b"{\"t\":\"job\",\"job\":{\"id\":").unwrap();
    drop(f);

    let s = EmbeddedStore::open(dir.path(), Fsync::Never).unwrap();
    assert!(matches!(
        s.status("a").await.unwrap().unwrap().state,
        JobState::Done { .. }
    ));
    assert!(matches!(
        s.status("b").await.unwrap().unwrap().state,
        JobState::Leased { .. }
    ));
    let d = s.depth(10).await.unwrap();
    assert_eq!((d.ready, d.leased), (1, 1));
    let c = s.claim("w", 5, 1_000, 5, 2_000).await.unwrap();
    assert_eq!(c.jobs.len(), 2, "c, and b after its lease expired");
    assert!(c.jobs.iter().all(|j| j.lease.fence > last_fence));
}

#[tokio::test]
async fn embedded_done_retention_forgets_finished_jobs() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = EmbeddedStore::open(dir.path(), Fsync::Never)
            .unwrap()
            .with_done_retention(1_000);
        s.enqueue(vec![job("a"), job("b")], 10).await.unwrap();
        let c = s.claim("w", 1, 60_000, 5, 10).await.unwrap();
        s.ack("a", &c.jobs[0].lease.token, result(), 100)
            .await
            .unwrap();
        s.claim("w", 0, 60_000, 5, 1_099).await.unwrap();
        assert!(
            s.status("a").await.unwrap().is_some(),
            "kept for the retention"
        );
        s.claim("w", 0, 60_000, 5, 1_100).await.unwrap();
        assert!(s.status("a").await.unwrap().is_none(), "forgotten after it");
        assert!(
            s.status("b").await.unwrap().is_some(),
            "unfinished jobs stay"
        );
    }
    let s = EmbeddedStore::open(dir.path(), Fsync::Never).unwrap();
    assert!(
        s.status("a").await.unwrap().is_none(),
        "forgetting is journaled"
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
    let c = s.claim("w", 1, 60_000, 5, 10).await.unwrap();
    s.ack("a", &c.jobs[0].lease.token, result(), 10)
        .await
        .unwrap();
    assert!(s.status("a").await.unwrap().is_some());
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert!(s.status("a").await.unwrap().is_none());
    assert!(s.enqueue(vec![job("a")], 10).await.unwrap()[0].new);
}
