//! The conformance suite every [`Store`] must pass: one public `async fn` per case, each taking a
//! fresh, empty store, and [`store_conformance_tests!`](crate::store_conformance_tests) to turn
//! them into one test per case for a store (`crates/server/tests/store_conformance.rs` does,
//! for the memory, SQLite and Redis stores). Compiled for tests and with the `testing` feature.
//!
//! A case panics (via `assert!`) on its first violation, naming it.

use std::time::Duration;

use ternflow_core::protocol::{
    CacheEntry, JobError, JobResult, JobState, Lease, NackResponse, ResultSource, ServerEvent,
    Vector,
};

use super::{
    AckInput, AckOutcome, Fenced, JobRecord, LockOutcome, PutOutcome, Quarantine, Released, Store,
    Written, MAX_HISTORY,
};

const T0: u64 = 1_000_000;
/// A hold no case reaches unless it tests the hold.
const HOLD: u64 = 3_600_000;

fn job(id: &str, priority: i32, available_at: u64) -> JobRecord {
    JobRecord {
        id: id.to_owned(),
        text: format!("text of {id}"),
        model_id: "m".to_owned(),
        priority,
        available_at,
        meta: Some(serde_json::json!({ "k": id })),
        trace_id: "0af7651916cd43dd8448eb211c80319c".to_owned(),
    }
}

fn result() -> JobResult {
    JobResult {
        model_id: "m".to_owned(),
        vector: Vector(vec![0.5, -0.25]),
        source: ResultSource::Engine,
        by: None,
    }
}

fn err(retryable: bool) -> JobError {
    JobError {
        code: "boom".to_owned(),
        message: "it broke".to_owned(),
        retryable,
    }
}

fn entry(fence: u64, expires_at: u64) -> CacheEntry {
    CacheEntry {
        model_id: "m".to_owned(),
        vector: Vector(vec![1.0, 2.0, 3.0]),
        fence,
        expires_at,
        by: None,
    }
}

/// One `#[tokio::test]` per conformance case, each on a fresh store from `$fresh`: an `async fn`
/// (path) returning `(store, guard)`, the guard kept alive for the test (a temporary directory,
/// a Redis server). Use it inside a module per store:
///
/// ```ignore
/// mod sqlite {
///     ternflow_server::store_conformance_tests!(super::fresh_sqlite);
/// }
/// ```
///
/// A failing case fails alone, and any case runs alone (`cargo test sqlite::locks`).
#[macro_export]
macro_rules! store_conformance_tests {
    ($fresh:path) => {
        $crate::store_conformance_tests!(@cases $fresh;
            enqueue_dedups,
            claim_orders_by_priority_then_fifo,
            fifo_holds_across_batches,
            delayed_jobs_wait,
            heartbeat_and_ack,
            expired_lease_is_redelivered,
            nack_backoff_dead_letter_redrive,
            release_hands_back,
            releases_past_the_free_ones_count,
            history_names_who_held_each_lease,
            cache_fences_and_ttl,
            cache_put_needs_a_lock_fence,
            sweep_removes_expired_entries_and_locks,
            cache_bytes_counts_live_entries,
            history_is_capped,
            ack_many_answers_each,
            heartbeat_many_answers_each,
            heartbeats_stop_at_the_hold,
            scan_done_reads_every_finished_job,
            locks,
            events_are_numbered_in_order,
            concurrent_events_arrive_in_id_order,
            ack_refuses_a_result_of_another_model,
            standing_counts_and_quarantines,
            provenance_index_and_undo,
            cache_entries_keep_their_writer,
            proposals_per_job_and_identity,
            usage_counters_add_up,
        );
    };
    (@cases $fresh:path; $($case:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let (store, _guard) = $fresh().await;
                $crate::store::conformance::$case(store).await;
            }
        )*
    };
}

/// A conformance case (see the [module docs](self)).
///
/// Usage counters add up over flushes, per name.
pub async fn usage_counters_add_up<S: Store>(s: S) {
    assert!(s.usage().await.unwrap().is_empty());
    let d = |pairs: &[(&str, u64)]| -> Vec<(String, u64)> {
        pairs.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect()
    };
    s.add_usage(&d(&[("jobs_enqueued", 3), ("jobs_acked", 1)]))
        .await
        .unwrap();
    s.add_usage(&d(&[("jobs_enqueued", 2)])).await.unwrap();
    s.add_usage(&[]).await.unwrap();
    let u = s.usage().await.unwrap();
    assert_eq!(u.get("jobs_enqueued"), Some(&5));
    assert_eq!(u.get("jobs_acked"), Some(&1));
    assert_eq!(u.len(), 2);
}

/// A conformance case (see the [module docs](self)).
pub async fn proposals_per_job_and_identity<S: Store>(s: S) {
    let p = s.propose("j1", "a", "d1").await.unwrap();
    assert_eq!(p, vec![("a".to_owned(), "d1".to_owned())]);
    s.propose("j2", "a", "other job").await.unwrap();
    s.propose("j1", "b", "d2").await.unwrap();
    let p = s.propose("j1", "a", "d2").await.unwrap();
    assert_eq!(
        p,
        vec![
            ("a".to_owned(), "d2".to_owned()),
            ("b".to_owned(), "d2".to_owned())
        ],
        "one proposal per identity, the latest"
    );
    s.clear_proposals("j1").await.unwrap();
    assert_eq!(s.propose("j1", "c", "d3").await.unwrap().len(), 1);
    assert_eq!(s.propose("j2", "b", "x").await.unwrap().len(), 2);
}

fn by(sub: &str) -> ternflow_core::protocol::Provenance {
    ternflow_core::protocol::Provenance {
        tenant: "default".to_owned(),
        sub: sub.to_owned(),
        worker: Some("w1".to_owned()),
        at: T0,
        verified: false,
    }
}

/// A conformance case (see the [module docs](self)).
pub async fn ack_refuses_a_result_of_another_model<S: Store>(s: S) {
    s.enqueue(vec![job("a", 0, T0), job("b", 0, T0)], T0)
        .await
        .unwrap();
    let c = s.claim("w", None, 2, 30_000, 5, T0).await.unwrap();
    let lease = |id: &str| {
        c.jobs
            .iter()
            .find(|j| j.id == id)
            .unwrap()
            .lease
            .token
            .clone()
    };
    let other = JobResult {
        model_id: "m2".to_owned(),
        ..result()
    };
    assert_eq!(
        s.ack("a", &lease("a"), other.clone(), T0 + 1)
            .await
            .unwrap(),
        AckOutcome::WrongModel {
            expected: "m".to_owned()
        },
        "an ack naming another model than the job's is refused"
    );
    let many = s
        .ack_many(
            vec![
                AckInput {
                    id: "b".into(),
                    token: lease("b"),
                    result: other,
                },
                AckInput {
                    id: "a".into(),
                    token: lease("a"),
                    result: result(),
                },
            ],
            T0 + 2,
        )
        .await
        .unwrap();
    assert!(matches!(many[0], AckOutcome::WrongModel { .. }), "{many:?}");
    assert!(
        matches!(many[1], AckOutcome::Done { .. }),
        "the lease survived the refusal"
    );
    let b = s.status("b").await.unwrap().unwrap();
    assert!(
        matches!(b.state, JobState::Leased { .. }),
        "a refused ack leaves the job leased: {b:?}"
    );
}

/// A conformance case (see the [module docs](self)).
pub async fn standing_counts_and_quarantines<S: Store>(s: S) {
    assert_eq!(s.standing("v1").await.unwrap(), Default::default());
    assert_eq!(s.add_verified("v1", 3).await.unwrap(), 3);
    assert_eq!(s.add_verified("v1", 2).await.unwrap(), 5);
    let q = Quarantine {
        at: T0,
        reason: "j:x differs".to_owned(),
    };
    assert!(s.quarantine("v1", q.clone()).await.unwrap());
    let again = Quarantine {
        at: T0 + 5,
        reason: "later".to_owned(),
    };
    assert!(
        !s.quarantine("v1", again).await.unwrap(),
        "the first reason is kept"
    );
    let st = s.standing("v1").await.unwrap();
    assert_eq!(st.quarantine, Some(q.clone()));
    assert_eq!(s.standing("v2").await.unwrap().quarantine, None);
    assert_eq!(s.quarantined(10).await.unwrap(), vec![("v1".to_owned(), q)]);
    assert!(s.lift_quarantine("v1").await.unwrap());
    assert!(!s.lift_quarantine("v1").await.unwrap());
    assert_eq!(
        s.standing("v1").await.unwrap(),
        Default::default(),
        "a lifted quarantine starts probation again"
    );
    assert!(s.quarantined(10).await.unwrap().is_empty());
}

/// A conformance case (see the [module docs](self)).
pub async fn provenance_index_and_undo<S: Store>(s: S) {
    s.enqueue(vec![job("a", 0, T0), job("b", 0, T0)], T0)
        .await
        .unwrap();
    let c = s.claim("w", None, 2, 30_000, 5, T0).await.unwrap();
    for j in &c.jobs {
        let r = JobResult {
            by: Some(by("liar")),
            ..result()
        };
        assert!(matches!(
            s.ack(&j.id, &j.lease.token, r, T0 + 1).await.unwrap(),
            AckOutcome::Done { .. }
        ));
    }
    s.note_written(
        "liar",
        vec![Written::Job("a".into()), Written::Cache("m:k".into())],
    )
    .await
    .unwrap();
    s.note_written(
        "liar",
        vec![Written::Job("a".into()), Written::Job("b".into())],
    )
    .await
    .unwrap();
    assert_eq!(
        s.written_by("liar").await.unwrap(),
        vec![
            Written::Cache("m:k".into()),
            Written::Job("a".into()),
            Written::Job("b".into())
        ],
        "each item once"
    );
    assert!(s.written_by("honest").await.unwrap().is_empty());
    let st = s.status("a").await.unwrap().unwrap();
    match st.state {
        JobState::Done { result, .. } => {
            assert_eq!(result.by, Some(by("liar")), "kept with the result")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        s.job_inputs(&["a".into(), "nope".into()]).await.unwrap(),
        vec![Some(("text of a".to_owned(), "m".to_owned())), None]
    );
    let back = s
        .requeue_done(&["a".into(), "nope".into()], T0 + 2)
        .await
        .unwrap();
    assert_eq!(back, vec!["a".to_owned()]);
    assert!(
        s.requeue_done(&["a".into()], T0 + 3)
            .await
            .unwrap()
            .is_empty(),
        "only finished jobs are re-queued"
    );
    let again = s.claim("w2", None, 5, 30_000, 5, T0 + 4).await.unwrap();
    assert_eq!(
        again.jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        vec!["a"],
        "the re-queued job is delivered again"
    );
    assert!(matches!(
        s.status("b").await.unwrap().unwrap().state,
        JobState::Done { .. }
    ));
}

/// A conformance case (see the [module docs](self)).
pub async fn cache_entries_keep_their_writer<S: Store>(s: S) {
    let e = CacheEntry {
        by: Some(by("v9")),
        ..entry(3, T0 + 10_000)
    };
    let put = s.cache_put("m:k", e, Fenced::ByLease, T0).await.unwrap();
    assert_eq!(put, PutOutcome::Stored { replaced: false });
    let got = s.cache_get("m:k", T0 + 1).await.unwrap().unwrap();
    assert_eq!(got.by, Some(by("v9")));
    let many = s.cache_get_many(&["m:k".into()], T0 + 1).await.unwrap();
    assert_eq!(many[0].as_ref().unwrap().by, Some(by("v9")));
    // A newer write without a writer drops the old one's.
    let put = s
        .cache_put("m:k", entry(4, T0 + 10_000), Fenced::ByLease, T0 + 2)
        .await
        .unwrap();
    assert_eq!(put, PutOutcome::Stored { replaced: true });
    assert_eq!(s.cache_get("m:k", T0 + 3).await.unwrap().unwrap().by, None);
}

/// A conformance case (see the [module docs](self)).
pub async fn scan_done_reads_every_finished_job<S: Store>(s: S) {
    let jobs: Vec<JobRecord> = (0..25).map(|i| job(&format!("s{i:02}"), 0, T0)).collect();
    s.enqueue(jobs, T0).await.unwrap();
    let claimed = s.claim("w", None, 25, 10_000, 5, T0).await.unwrap().jobs;
    assert_eq!(claimed.len(), 25);
    let mut done = std::collections::BTreeSet::new();
    for (i, j) in claimed.iter().enumerate() {
        match i % 5 {
            // Left leased: not finished.
            0 => {}
            // Dead-lettered: not done either.
            1 => {
                s.nack(&j.id, &j.lease.token, err(false), T0, 5, T0)
                    .await
                    .unwrap();
            }
            _ => {
                let r = s.ack(&j.id, &j.lease.token, result(), T0 + i as u64).await;
                assert!(matches!(r.unwrap(), AckOutcome::Done { .. }));
                done.insert(j.id.clone());
            }
        }
    }
    // Pages of 4 until the cursor runs out; every done job exactly as acked, nothing else.
    let (mut cursor, mut seen, mut pages) = (String::new(), std::collections::BTreeSet::new(), 0);
    loop {
        let page = s.scan_done(&cursor, 4).await.unwrap();
        pages += 1;
        assert!(pages < 1_000, "the scan ends");
        for d in page.jobs {
            assert_eq!(d.text, format!("text of {}", d.id), "the job's own text");
            assert_eq!(d.result, result(), "the acked result");
            seen.insert(d.id);
        }
        match page.next {
            Some(n) => cursor = n,
            None => break,
        }
    }
    assert_eq!(seen, done, "a scan reads every done job and only those");
    assert!(pages > 1, "more than one page of 4");
}

/// A conformance case (see the [module docs](self)).
pub async fn enqueue_dedups<S: Store>(s: S) {
    let out = s
        .enqueue(vec![job("a", 0, T0), job("b", 0, T0), job("a", 0, T0)], T0)
        .await
        .unwrap();
    let flags: Vec<_> = out.iter().map(|e| (e.id.as_str(), e.new)).collect();
    assert_eq!(
        flags,
        [("a", true), ("b", true), ("a", false)],
        "dedup in a batch"
    );
    let c = s.claim("w", None, 1, 1_000, 5, T0).await.unwrap();
    let tok = c.jobs[0].lease.token.clone();
    assert!(matches!(
        s.ack("a", &tok, result(), T0).await.unwrap(),
        AckOutcome::Done { .. }
    ));
    let again = s.enqueue(vec![job("a", 0, T0)], T0).await.unwrap();
    assert!(!again[0].new, "a done job is not re-enqueued");
    let st = s.status("a").await.unwrap().unwrap();
    assert!(matches!(st.state, JobState::Done { .. }), "done stays done");
    let d = s.depth(T0).await.unwrap();
    assert_eq!((d.ready, d.leased), (1, 0));
}

/// A conformance case (see the [module docs](self)).
pub async fn claim_orders_by_priority_then_fifo<S: Store>(s: S) {
    s.enqueue(
        vec![
            job("low", -1, T0),
            job("n1", 0, T0),
            job("hi", 5, T0),
            job("n2", 0, T0),
        ],
        T0,
    )
    .await
    .unwrap();
    let c = s.claim("w", None, 3, 1_000, 5, T0).await.unwrap();
    let ids: Vec<_> = c.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["hi", "n1", "n2"], "priority, then FIFO");
    assert!(c.jobs.iter().all(|j| j.attempt == 1));
    assert!(
        c.jobs
            .windows(2)
            .all(|w| w[0].lease.fence < w[1].lease.fence),
        "fences grow"
    );
    assert_ne!(c.jobs[0].lease.token, c.jobs[1].lease.token);
    assert_eq!(c.jobs[0].lease.expires_at, T0 + 1_000);
    assert_eq!(c.jobs[0].text, "text of hi");
    assert_eq!(c.jobs[0].meta, Some(serde_json::json!({ "k": "hi" })));
    assert_eq!(c.jobs[0].traceparent, "0af7651916cd43dd8448eb211c80319c");
    let d = s.depth(T0).await.unwrap();
    assert_eq!((d.ready, d.leased), (1, 3));
    let st = s.status("n1").await.unwrap().unwrap();
    assert!(matches!(st.state, JobState::Leased { ref worker, .. } if worker == "w"));
    assert!(s.status("nope").await.unwrap().is_none());
}

/// A conformance case (see the [module docs](self)).
///
/// FIFO holds across enqueue batches, and a delayed job queues behind the jobs enqueued ready
/// while it waited.
pub async fn fifo_holds_across_batches<S: Store>(s: S) {
    s.enqueue(vec![job("a", 0, T0), job("b", 0, T0)], T0)
        .await
        .unwrap();
    s.enqueue(vec![job("late", 0, T0 + 10)], T0).await.unwrap();
    s.enqueue(vec![job("c", 0, T0)], T0).await.unwrap();
    let c = s.claim("w", None, 2, 1_000, 5, T0).await.unwrap();
    let ids: Vec<_> = c.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    s.enqueue(vec![job("d", 0, T0 + 5), job("e", 1, T0 + 5)], T0 + 5)
        .await
        .unwrap();
    let c = s.claim("w", None, 1, 1_000, 5, T0 + 5).await.unwrap();
    assert_eq!(
        c.jobs[0].id, "e",
        "a higher priority first, whatever its batch"
    );
    let c = s.claim("w", None, 10, 1_000, 5, T0 + 20).await.unwrap();
    let ids: Vec<_> = c.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(
        ids,
        ["c", "d", "late"],
        "FIFO across batches; a delayed job queues when due"
    );
    assert!(
        c.jobs
            .windows(2)
            .all(|w| w[0].lease.fence < w[1].lease.fence),
        "fences grow"
    );
}

/// A conformance case (see the [module docs](self)).
pub async fn delayed_jobs_wait<S: Store>(s: S) {
    s.enqueue(vec![job("later", 0, T0 + 500)], T0)
        .await
        .unwrap();
    let st = s.status("later").await.unwrap().unwrap();
    assert_eq!(
        st.state,
        JobState::Queued {
            available_at: T0 + 500
        }
    );
    assert_eq!(s.depth(T0).await.unwrap().delayed, 1);
    assert!(s
        .claim("w", None, 1, 1_000, 5, T0 + 499)
        .await
        .unwrap()
        .jobs
        .is_empty());
    assert_eq!(
        s.depth(T0 + 500).await.unwrap().ready,
        1,
        "due counts as ready"
    );
    let c = s.claim("w", None, 1, 1_000, 5, T0 + 500).await.unwrap();
    assert_eq!(c.jobs.len(), 1, "delayed job delivered when due");
}

/// A conformance case (see the [module docs](self)).
pub async fn heartbeat_and_ack<S: Store>(s: S) {
    s.enqueue(vec![job("j", 0, T0)], T0).await.unwrap();
    let c = s.claim("w", None, 1, 1_000, 5, T0).await.unwrap();
    let lease = c.jobs[0].lease.clone();
    let hb = s
        .heartbeat("j", &lease.token, 2_000, HOLD, T0 + 900)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((hb.fence, hb.expires_at), (lease.fence, T0 + 2_900));
    assert!(s
        .heartbeat("j", "wrong", 2_000, HOLD, T0)
        .await
        .unwrap()
        .is_none());
    // Not re-delivered before the extended expiry.
    assert!(s
        .claim("w2", None, 1, 1_000, 5, T0 + 2_000)
        .await
        .unwrap()
        .jobs
        .is_empty());
    assert_eq!(
        s.ack("j", "wrong", result(), T0).await.unwrap(),
        AckOutcome::Stale
    );
    assert_eq!(
        s.ack("nope", "t", result(), T0).await.unwrap(),
        AckOutcome::Missing
    );
    assert_eq!(
        s.ack("j", &lease.token, result(), T0).await.unwrap(),
        AckOutcome::Done {
            fence: lease.fence,
            text_hash: ternflow_core::keys::text_hash("text of j"),
        },
        "the ack reports the lease's fence and the text's hash (for the write-through)"
    );
    assert_eq!(
        s.ack("j", &lease.token, result(), T0).await.unwrap(),
        AckOutcome::Repeated,
        "ack is idempotent for the holder"
    );
    let st = s.status("j").await.unwrap().unwrap();
    assert_eq!(
        st.state,
        JobState::Done {
            result: result(),
            info: None
        }
    );
    assert!(s
        .heartbeat("j", &lease.token, 1_000, HOLD, T0)
        .await
        .unwrap()
        .is_none());
    assert_eq!(s.depth(T0).await.unwrap().leased, 0);
}

/// A conformance case (see the [module docs](self)).
pub async fn heartbeats_stop_at_the_hold<S: Store>(s: S) {
    s.enqueue(vec![job("a", 0, T0), job("b", 0, T0)], T0)
        .await
        .unwrap();
    let c = s.claim("w", None, 2, 1_000, 5, T0).await.unwrap();
    let lease = |id: &str| c.jobs.iter().find(|j| j.id == id).unwrap().lease.clone();
    let (a, b) = (lease("a"), lease("b"));
    // A heartbeat extends a lease, but never past the hold after the delivery began.
    let hb = s
        .heartbeat("a", &a.token, 1_000, 1_200, T0 + 500)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(hb.expires_at, T0 + 1_200, "capped at leased_at + hold");
    let many = s
        .heartbeat_many(vec![("b".into(), b.token.clone())], 1_000, 1_200, T0 + 500)
        .await
        .unwrap();
    assert_eq!(many[0].as_ref().map(|l| l.expires_at), Some(T0 + 1_200));
    // Once the hold is used up the lease is not extended: the token no longer holds the job.
    assert!(s
        .heartbeat("a", &a.token, 1_000, 1_200, T0 + 1_200)
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        s.heartbeat_many(
            vec![("b".into(), b.token.clone())],
            1_000,
            1_200,
            T0 + 1_300
        )
        .await
        .unwrap(),
        [None]
    );
    // The jobs are delivered again after their capped expiry, as any expired lease.
    let again = s.claim("w2", None, 2, 1_000, 5, T0 + 1_201).await.unwrap();
    assert_eq!(again.jobs.len(), 2);
    assert!(again.jobs.iter().all(|j| j.attempt == 2));
}

/// A conformance case (see the [module docs](self)).
pub async fn heartbeat_many_answers_each<S: Store>(s: S) {
    s.enqueue(vec![job("a", 0, T0), job("b", 0, T0), job("c", 0, T0)], T0)
        .await
        .unwrap();
    let c = s.claim("w", None, 3, 1_000, 5, T0).await.unwrap();
    let lease = |id: &str| c.jobs.iter().find(|j| j.id == id).unwrap().lease.clone();
    let (a, b, cc) = (lease("a"), lease("b"), lease("c"));
    assert_eq!(
        s.ack("c", &cc.token, result(), T0).await.unwrap(),
        AckOutcome::Done {
            fence: cc.fence,
            text_hash: ternflow_core::keys::text_hash("text of c"),
        }
    );
    let got = s
        .heartbeat_many(
            vec![
                ("a".into(), a.token.clone()),
                ("b".into(), "forged".into()),
                ("c".into(), cc.token.clone()),
                ("nope".into(), "t".into()),
                ("b".into(), b.token.clone()),
            ],
            5_000,
            HOLD,
            T0 + 800,
        )
        .await
        .unwrap();
    let extended = |l: &Lease| Lease {
        expires_at: T0 + 5_800,
        ..l.clone()
    };
    assert_eq!(
        got,
        [Some(extended(&a)), None, None, None, Some(extended(&b))],
        "each lease answered on its own: a forged token, a done job or an unknown id changes \
         nothing for the others"
    );
    assert!(
        s.claim("w2", None, 3, 1_000, 5, T0 + 5_000)
            .await
            .unwrap()
            .jobs
            .is_empty(),
        "both extended leases hold past their first expiry"
    );
    assert!(s
        .heartbeat_many(Vec::new(), 1_000, HOLD, T0)
        .await
        .unwrap()
        .is_empty());
}

/// A conformance case (see the [module docs](self)).
pub async fn expired_lease_is_redelivered<S: Store>(s: S) {
    s.enqueue(vec![job("j", 0, T0)], T0).await.unwrap();
    let first = s
        .claim("w1", None, 1, 1_000, 5, T0)
        .await
        .unwrap()
        .jobs
        .remove(0);
    assert!(s
        .claim("w2", None, 1, 1_000, 5, T0 + 999)
        .await
        .unwrap()
        .jobs
        .is_empty());
    let c = s.claim("w2", None, 1, 1_000, 5, T0 + 1_000).await.unwrap();
    assert_eq!(c.expired, ["j"]);
    let second = &c.jobs[0];
    assert_eq!((second.id.as_str(), second.attempt), ("j", 2));
    assert!(second.lease.fence > first.lease.fence);
    assert_ne!(second.lease.token, first.lease.token);
    let old = &first.lease.token;
    assert!(
        s.heartbeat("j", old, 1_000, HOLD, T0 + 1_001)
            .await
            .unwrap()
            .is_none(),
        "old lease lost"
    );
    assert_eq!(
        s.ack("j", old, result(), T0 + 1_001).await.unwrap(),
        AckOutcome::Stale
    );
    // Expiry of the last allowed attempt dead-letters the job.
    let c = s.claim("w3", None, 1, 1_000, 2, T0 + 2_000).await.unwrap();
    assert_eq!(c.dead, ["j"]);
    assert!(c.jobs.is_empty());
    let dlq = s.dlq(10).await.unwrap();
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].history.len(), 2);
    assert_eq!(dlq[0].history[0].error.code, "lease_expired");
    assert_eq!(dlq[0].history[1].worker, "w2");
}

/// A conformance case (see the [module docs](self)).
pub async fn nack_backoff_dead_letter_redrive<S: Store>(s: S) {
    s.enqueue(vec![job("j", 0, T0), job("fatal", 0, T0)], T0)
        .await
        .unwrap();
    let mut now = T0;
    for attempt in 1..=3u32 {
        let c = s.claim("w", None, 2, 1_000, 3, now).await.unwrap();
        let j = c.jobs.iter().find(|j| j.id == "j").expect("j delivered");
        assert_eq!(j.attempt, attempt);
        let r = s
            .nack("j", &j.lease.token, err(true), now + 100, 3, now)
            .await
            .unwrap()
            .unwrap();
        if attempt < 3 {
            assert_eq!(
                r,
                NackResponse::Retry {
                    available_at: now + 100
                }
            );
            assert!(
                s.claim("w", None, 1, 1_000, 3, now + 99)
                    .await
                    .unwrap()
                    .jobs
                    .iter()
                    .all(|j| j.id != "j"),
                "not before the backoff"
            );
            now += 100;
        } else {
            assert_eq!(r, NackResponse::Dead, "max attempts → dead");
        }
        // Take `fatal` out of the way on the first round.
        if let Some(f) = c.jobs.iter().find(|j| j.id == "fatal") {
            let r = s
                .nack("fatal", &f.lease.token, err(false), now, 3, now)
                .await
                .unwrap();
            assert_eq!(r, Some(NackResponse::Dead), "non-retryable → dead at once");
        }
    }
    assert!(s
        .nack("j", "stale", err(true), now, 3, now)
        .await
        .unwrap()
        .is_none());
    let st = s.status("j").await.unwrap().unwrap();
    match st.state {
        JobState::Dead { error, history } => {
            assert_eq!(error.code, "boom");
            assert_eq!(history.len(), 3);
            assert_eq!(
                history.iter().map(|a| a.attempt).collect::<Vec<_>>(),
                [1, 2, 3]
            );
        }
        other => panic!("expected dead, got {other:?}"),
    }
    let dlq = s.dlq(10).await.unwrap();
    let ids: Vec<_> = dlq.iter().map(|e| e.job.id.as_str()).collect();
    assert!(ids.contains(&"j") && ids.contains(&"fatal"), "{ids:?}");
    let e = dlq.iter().find(|e| e.job.id == "j").unwrap();
    assert_eq!(e.job.text, "text of j");
    assert_eq!(s.depth(now).await.unwrap().dead, 2);
    assert_eq!(s.dlq(1).await.unwrap().len(), 1);
    assert!(s.redrive("j", now).await.unwrap());
    assert!(
        !s.redrive("j", now).await.unwrap(),
        "only dead jobs redrive"
    );
    assert!(!s.redrive("missing", now).await.unwrap());
    let c = s.claim("w", None, 1, 1_000, 3, now).await.unwrap();
    assert_eq!(
        (c.jobs[0].id.as_str(), c.jobs[0].attempt),
        ("j", 1),
        "fresh attempts"
    );
    assert_eq!(s.depth(now).await.unwrap().dead, 1);
}

/// A conformance case (see the [module docs](self)).
pub async fn release_hands_back<S: Store>(s: S) {
    s.enqueue(vec![job("j", 0, T0)], T0).await.unwrap();
    let c = s.claim("w", None, 1, 1_000, 5, T0).await.unwrap();
    assert_eq!(
        s.release("j", "wrong", 3, 5, T0).await.unwrap(),
        Released::NotHeld
    );
    assert_eq!(
        s.release("j", &c.jobs[0].lease.token, 3, 5, T0)
            .await
            .unwrap(),
        Released::Free
    );
    let again = s.claim("w", None, 1, 1_000, 5, T0).await.unwrap();
    assert_eq!(
        again.jobs[0].attempt, 1,
        "a handed-back lease does not count"
    );
    assert_eq!(
        s.release("j", &c.jobs[0].lease.token, 3, 5, T0)
            .await
            .unwrap(),
        Released::NotHeld,
        "a released lease's token holds nothing"
    );
}

/// A conformance case (see the [module docs](self)).
///
/// A job's first `free` releases use no attempt; past them each release counts as one, joins
/// the history as `released`, and the one on the last allowed attempt dead-letters the job; a
/// redrive gives the releases back.
pub async fn releases_past_the_free_ones_count<S: Store>(s: S) {
    s.enqueue(vec![job("j", 0, T0)], T0).await.unwrap();
    let mut seen = Vec::new();
    for i in 0..5u64 {
        let now = T0 + i;
        let c = s.claim("hog", None, 1, 1_000, 3, now).await.unwrap();
        assert_eq!(
            c.jobs.len(),
            1,
            "release {i}: the released job is ready at once"
        );
        let out = s
            .release("j", &c.jobs[0].lease.token, 2, 3, now)
            .await
            .unwrap();
        seen.push((c.jobs[0].attempt, out));
    }
    assert_eq!(
        seen,
        [
            (1, Released::Free),
            (1, Released::Free),
            (1, Released::Counted),
            (2, Released::Counted),
            (3, Released::Dead),
        ]
    );
    assert!(s
        .claim("hog", None, 1, 1_000, 3, T0 + 10)
        .await
        .unwrap()
        .jobs
        .is_empty());
    let dlq = s.dlq(10).await.unwrap();
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].error.code, "released");
    let counted: Vec<(u32, &str)> = dlq[0]
        .history
        .iter()
        .map(|a| (a.attempt, a.worker.as_str()))
        .collect();
    assert_eq!(
        counted,
        [(1, "hog"), (2, "hog"), (3, "hog")],
        "each counted release, by whom"
    );
    assert!(dlq[0].history.iter().all(|a| a.error.code == "released"));
    // A redrive starts the job over, free releases included.
    assert!(s.redrive("j", T0 + 20).await.unwrap());
    let c = s.claim("w", None, 1, 1_000, 3, T0 + 21).await.unwrap();
    assert_eq!(c.jobs[0].attempt, 1);
    assert_eq!(
        s.release("j", &c.jobs[0].lease.token, 2, 3, T0 + 21)
            .await
            .unwrap(),
        Released::Free
    );
}

/// A conformance case (see the [module docs](self)).
///
/// Each failed delivery's history entry names who held the lease: the worker's own name and
/// the claiming token's identity the server passed (an expired lease and a nack alike), and a
/// delivery claimed without one does not inherit the previous holder's.
pub async fn history_names_who_held_each_lease<S: Store>(s: S) {
    s.enqueue(vec![job("j", 0, T0)], T0).await.unwrap();
    let c = s
        .claim("w1", Some("visitor-1"), 1, 1_000, 5, T0)
        .await
        .unwrap();
    assert_eq!(c.jobs.len(), 1);
    let c = s.claim("w2", None, 1, 1_000, 5, T0 + 1_000).await.unwrap();
    assert_eq!(c.expired, ["j"]);
    assert_eq!(c.jobs.len(), 1, "the expired lease is delivered again");
    let c = s
        .claim("w3", Some("visitor-3"), 1, 1_000, 5, T0 + 2_000)
        .await
        .unwrap();
    assert_eq!(c.jobs.len(), 1);
    let error = JobError {
        code: "engine".to_owned(),
        message: "no".to_owned(),
        retryable: false,
    };
    let out = s
        .nack(
            "j",
            &c.jobs[0].lease.token,
            error,
            T0 + 2_000,
            5,
            T0 + 2_000,
        )
        .await
        .unwrap();
    assert_eq!(out, Some(NackResponse::Dead));
    let dlq = s.dlq(10).await.unwrap();
    let who: Vec<(u32, &str, Option<&str>, &str)> = dlq[0]
        .history
        .iter()
        .map(|a| {
            (
                a.attempt,
                a.worker.as_str(),
                a.sub.as_deref(),
                a.error.code.as_str(),
            )
        })
        .collect();
    assert_eq!(
        who,
        [
            (1, "w1", Some("visitor-1"), "lease_expired"),
            (2, "w2", None, "lease_expired"),
            (3, "w3", Some("visitor-3"), "engine"),
        ]
    );
}

/// A conformance case (see the [module docs](self)).
pub async fn cache_fences_and_ttl<S: Store>(s: S) {
    assert!(s.cache_get("k", T0).await.unwrap().is_none());
    assert_eq!(
        s.cache_put("k", entry(5, T0 + 1_000), Fenced::ByLease, T0)
            .await
            .unwrap(),
        PutOutcome::Stored { replaced: false }
    );
    assert_eq!(
        s.cache_get("k", T0).await.unwrap(),
        Some(entry(5, T0 + 1_000))
    );
    // Many keys in one step: in order, absent ones and expired ones as None.
    let keys = ["nope".to_owned(), "k".to_owned(), "k".to_owned()];
    assert_eq!(
        s.cache_get_many(&keys, T0).await.unwrap(),
        vec![None, Some(entry(5, T0 + 1_000)), Some(entry(5, T0 + 1_000))]
    );
    assert_eq!(
        s.cache_get_many(&keys, T0 + 1_000).await.unwrap(),
        vec![None, None, None],
        "expired"
    );
    assert!(s.cache_get_many(&[], T0).await.unwrap().is_empty());
    assert_eq!(
        s.cache_put("k", entry(3, T0 + 1_000), Fenced::ByLease, T0)
            .await
            .unwrap(),
        PutOutcome::Stale(entry(5, T0 + 1_000)),
        "an older fence is refused"
    );
    assert_eq!(
        s.cache_put("k", entry(5, T0 + 2_000), Fenced::ByLease, T0)
            .await
            .unwrap(),
        PutOutcome::Stored { replaced: true },
        "the same fence may rewrite"
    );
    assert!(
        s.cache_get("k", T0 + 2_000).await.unwrap().is_none(),
        "expired"
    );
    assert_eq!(
        s.cache_put("k", entry(1, T0 + 5_000), Fenced::ByLease, T0 + 2_000)
            .await
            .unwrap(),
        PutOutcome::Stored { replaced: false },
        "an expired entry does not block"
    );
    assert!(s.cache_delete("k").await.unwrap());
    assert!(!s.cache_delete("k").await.unwrap());
    assert!(s.cache_get("k", T0).await.unwrap().is_none());
}

/// A conformance case (see the [module docs](self)).
pub async fn cache_put_needs_a_lock_fence<S: Store>(s: S) {
    let put = |fence, at| s.cache_put("m:k", entry(fence, T0 + 10_000), Fenced::ByLock, at);
    assert_eq!(
        put(u64::MAX, T0).await.unwrap(),
        PutOutcome::Unfenced,
        "a fence the server never issued is refused"
    );
    let LockOutcome::Granted(g) = s.lock_acquire("m:k", 1_000, T0).await.unwrap() else {
        panic!("free lock must be granted");
    };
    assert_eq!(
        put(g.fence + 1, T0).await.unwrap(),
        PutOutcome::Unfenced,
        "only the lock's own fence"
    );
    assert_eq!(
        put(g.fence, T0).await.unwrap(),
        PutOutcome::Stored { replaced: false },
        "the honest holder is accepted after the forged write"
    );
    assert_eq!(
        put(g.fence, T0 + 1_000).await.unwrap(),
        PutOutcome::Unfenced,
        "an expired lock vouches for nothing"
    );
    let LockOutcome::Granted(g2) = s.lock_acquire("m:k", 1_000, T0 + 1_000).await.unwrap() else {
        panic!("expired lock must be granted");
    };
    assert_eq!(
        put(g.fence, T0 + 1_001).await.unwrap(),
        PutOutcome::Unfenced,
        "a stale holder is refused once the lock moved on"
    );
    assert_eq!(
        put(g2.fence, T0 + 1_001).await.unwrap(),
        PutOutcome::Stored { replaced: true }
    );
    assert!(s.lock_acquire("other", 1_000, T0).await.is_ok());
    assert_eq!(
        s.cache_put(
            "m:x",
            entry(g2.fence, T0 + 10_000),
            Fenced::ByLock,
            T0 + 1_001
        )
        .await
        .unwrap(),
        PutOutcome::Unfenced,
        "a lock on one key vouches for no other key"
    );
}

/// A conformance case (see the [module docs](self)).
pub async fn cache_bytes_counts_live_entries<S: Store>(s: S) {
    let one = crate::quota::entry_bytes("a", 3);
    assert_eq!(s.cache_bytes(T0).await.unwrap(), 0, "an empty cache");
    s.cache_put("a", entry(1, T0 + 100), Fenced::ByLease, T0)
        .await
        .unwrap();
    s.cache_put("b", entry(1, T0 + 10_000), Fenced::ByLease, T0)
        .await
        .unwrap();
    assert_eq!(s.cache_bytes(T0).await.unwrap(), 2 * one);
    // A replacement counts once, at its new size.
    let mut big = entry(2, T0 + 10_000);
    big.vector = Vector(vec![0.5; 10]);
    s.cache_put("b", big, Fenced::ByLease, T0).await.unwrap();
    let b = crate::quota::entry_bytes("b", 10);
    assert_eq!(
        s.cache_bytes(T0).await.unwrap(),
        one + b,
        "replaced, not added"
    );
    // A stale write (older fence) changes nothing.
    s.cache_put("b", entry(1, T0 + 10_000), Fenced::ByLease, T0)
        .await
        .unwrap();
    assert_eq!(s.cache_bytes(T0).await.unwrap(), one + b, "a stale write");
    // Expired entries stop counting once swept (at once where the store reads expiry).
    s.sweep(T0 + 1_000, 1_000).await.unwrap();
    assert_eq!(s.cache_bytes(T0 + 1_000).await.unwrap(), b, "expired");
    assert!(s.cache_delete("b").await.unwrap());
    assert_eq!(s.cache_bytes(T0 + 1_000).await.unwrap(), 0, "deleted");
}

/// A conformance case (see the [module docs](self)).
pub async fn sweep_removes_expired_entries_and_locks<S: Store>(s: S) {
    s.cache_put("a", entry(1, T0 + 100), Fenced::ByLease, T0)
        .await
        .unwrap();
    s.cache_put("b", entry(1, T0 + 10_000), Fenced::ByLease, T0)
        .await
        .unwrap();
    s.lock_acquire("l", 100, T0).await.unwrap();
    let n = s.sweep(T0 + 1_000, 1_000).await.unwrap();
    assert!(
        s.cache_get("b", T0 + 1_000).await.unwrap().is_some(),
        "live entries stay"
    );
    if n == 0 {
        // Native expiry (Redis TTLs): nothing for the sweeper to do.
        return;
    }
    assert_eq!(n, 2, "the expired entry and the expired lock, nothing else");
    // Gone from the store, even for a reader whose clock lags behind the sweeper's.
    assert!(s.cache_get("a", T0).await.unwrap().is_none(), "swept");
    assert!(
        matches!(
            s.lock_acquire("l", 100, T0).await.unwrap(),
            LockOutcome::Granted(_)
        ),
        "a swept lock is free even for a clock that lags"
    );
    assert_eq!(
        s.sweep(T0 + 50, 1_000).await.unwrap(),
        0,
        "nothing live is swept"
    );
}

/// A conformance case (see the [module docs](self)).
pub async fn history_is_capped<S: Store>(s: S) {
    s.enqueue(vec![job("h", 0, T0)], T0).await.unwrap();
    let long = JobError {
        code: "boom".to_owned(),
        message: "x".repeat(100_000),
        retryable: true,
    };
    let mut now = T0;
    for _ in 0..(MAX_HISTORY + 5) {
        let c = s.claim("w", None, 1, 1_000, 1_000, now).await.unwrap();
        let tok = c.jobs[0].lease.token.clone();
        s.nack("h", &tok, long.clone(), now, 1_000, now)
            .await
            .unwrap()
            .unwrap();
        now += 1;
    }
    let c = s.claim("w", None, 1, 1_000, 1_000, now).await.unwrap();
    let mut last = long;
    last.retryable = false;
    s.nack("h", &c.jobs[0].lease.token, last, now, 1_000, now)
        .await
        .unwrap();
    let dead = s.dlq(10).await.unwrap();
    assert_eq!(
        dead[0].history.len(),
        MAX_HISTORY,
        "history keeps the last attempts"
    );
    assert_eq!(
        dead[0].history.last().unwrap().attempt,
        (MAX_HISTORY + 6) as u32,
        "the newest attempt is kept"
    );
    assert!(
        dead[0].error.message.len() <= super::MAX_ERROR_MESSAGE + 4,
        "messages are cut"
    );
}

/// A conformance case (see the [module docs](self)).
pub async fn ack_many_answers_each<S: Store>(s: S) {
    s.enqueue(vec![job("a", 0, T0), job("b", 0, T0)], T0)
        .await
        .unwrap();
    let c = s.claim("w", None, 2, 1_000, 5, T0).await.unwrap();
    let tok = |id: &str| {
        c.jobs
            .iter()
            .find(|j| j.id == id)
            .unwrap()
            .lease
            .token
            .clone()
    };
    let input = |id: &str, token: String| super::AckInput {
        id: id.to_owned(),
        token,
        result: result(),
    };
    let out = s
        .ack_many(
            vec![
                input("a", tok("a")),
                input("b", "stale".into()),
                input("zz", "t".into()),
                input("a", tok("a")),
            ],
            T0,
        )
        .await
        .unwrap();
    assert!(matches!(out[0], AckOutcome::Done { .. }), "{out:?}");
    assert_eq!(
        out[1..],
        [AckOutcome::Stale, AckOutcome::Missing, AckOutcome::Repeated],
        "each ack answered on its own, in order"
    );
    assert!(matches!(
        s.status("b").await.unwrap().unwrap().state,
        JobState::Leased { .. }
    ));
}

/// A conformance case (see the [module docs](self)).
pub async fn locks<S: Store>(s: S) {
    let LockOutcome::Granted(g1) = s.lock_acquire("k", 1_000, T0).await.unwrap() else {
        panic!("first acquire must succeed");
    };
    assert_eq!(g1.expires_at, T0 + 1_000);
    assert_eq!(
        s.lock_acquire("k", 1_000, T0 + 10).await.unwrap(),
        LockOutcome::Held {
            expires_at: T0 + 1_000
        }
    );
    assert!(s
        .lock_renew("k", "wrong", 1_000, T0)
        .await
        .unwrap()
        .is_none());
    let r = s
        .lock_renew("k", &g1.token, 2_000, T0 + 500)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((r.fence, r.expires_at), (g1.fence, T0 + 2_500));
    assert!(
        !s.lock_release("k", "wrong").await.unwrap(),
        "compare-and-delete"
    );
    assert!(s.lock_release("k", &g1.token).await.unwrap());
    assert!(!s.lock_release("k", &g1.token).await.unwrap());
    let LockOutcome::Granted(g2) = s.lock_acquire("k", 1_000, T0 + 600).await.unwrap() else {
        panic!("free lock must be granted");
    };
    assert!(g2.fence > g1.fence, "fences grow");
    // Expiry frees it; the stale holder can neither renew nor delete the new holder's lock.
    let LockOutcome::Granted(g3) = s.lock_acquire("k", 1_000, T0 + 1_600).await.unwrap() else {
        panic!("expired lock must be granted");
    };
    assert!(g3.fence > g2.fence);
    assert!(s
        .lock_renew("k", &g2.token, 1_000, T0 + 1_600)
        .await
        .unwrap()
        .is_none());
    assert!(!s.lock_release("k", &g2.token).await.unwrap());
    assert!(
        s.lock_renew("k", &g3.token, 1_000, T0 + 2_601)
            .await
            .unwrap()
            .is_none(),
        "expired"
    );
}

/// A conformance case (see the [module docs](self)).
pub async fn events_are_numbered_in_order<S: Store>(s: S) {
    let mut rx = s.subscribe();
    let a = ServerEvent::Jobs(ternflow_core::protocol::JobsEvent { depth: 1 });
    let b = ServerEvent::Invalidate(ternflow_core::protocol::InvalidateEvent {
        keys: vec!["m:x".to_owned()],
    });
    let ia = s.publish(a.clone()).await.unwrap();
    let ib = s.publish(b.clone()).await.unwrap();
    assert!(ib > ia);
    assert_eq!(recv(&mut rx).await, (ia, a));
    assert_eq!(recv(&mut rx).await, (ib, b));
}

async fn recv(
    rx: &mut tokio::sync::broadcast::Receiver<super::NumberedEvent>,
) -> super::NumberedEvent {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("event delivered")
        .expect("channel open")
}

/// A conformance case (see the [module docs](self)).
pub async fn concurrent_events_arrive_in_id_order<S: Store>(s: S) {
    let s = std::sync::Arc::new(s);
    let mut rx = s.subscribe();
    let mut tasks = Vec::new();
    for t in 0..4u64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..50 {
                let ev =
                    ServerEvent::Jobs(ternflow_core::protocol::JobsEvent { depth: t * 100 + i });
                s.publish(ev).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut last = 0;
    for _ in 0..200 {
        let (id, _) = recv(&mut rx).await;
        assert!(id > last, "event ids leave in order ({id} after {last})");
        last = id;
    }
}
