//! The pipeline's branches, natively, with in-memory ports and a fake clock.

use futures_util::future::join;
use ternflow_core::breaker::BreakerState;
use ternflow_core::cache::mem_local::MemLocal;
use ternflow_core::keys::cache_key;
use ternflow_core::memory::{FakeClock, FakeEmbedder, MemServer, Watchdog};
use ternflow_core::metrics::names;
use ternflow_core::ports::{Clock, JobSource, LocalCache};
use ternflow_core::protocol::{CacheEntry, ResultSource, Vector};
use ternflow_core::queue::claim_loop::RunSummary;
use ternflow_core::queue::job::JobOutcome;
use ternflow_core::{Adapters, Config, Error, Pipeline, Ports, ResolveOptions};

const MODEL: &str = "0123456789abcdef";
const T0: u64 = 1_700_000_000_000;

struct Mem;
impl Ports for Mem {
    type Source = MemServer;
    type Local = MemLocal;
    type Remote = MemServer;
    type Locks = MemServer;
    type Engine = FakeEmbedder;
    type Backend = FakeEmbedder;
    type Clock = FakeClock;
}

struct Rig {
    clock: FakeClock,
    server: MemServer,
    local: MemLocal,
    engine: FakeEmbedder,
    backend: FakeEmbedder,
}

impl Rig {
    fn new() -> Self {
        let clock = FakeClock::at(T0);
        Rig {
            server: MemServer::new(clock.clone(), 30_000, 3),
            local: MemLocal::new(usize::MAX, 100),
            engine: FakeEmbedder::new(Some(MODEL), clock.clone()),
            backend: FakeEmbedder::new(Some(MODEL), clock.clone()),
            clock,
        }
    }

    fn pipeline(&self, cfg: Config) -> Pipeline<Mem> {
        self.pipeline_with_local(cfg, self.local.clone())
    }

    fn pipeline_with_local(&self, cfg: Config, local: MemLocal) -> Pipeline<Mem> {
        self.pipeline_with(
            Config { seed: 42, ..cfg },
            local,
            self.engine.clone(),
            self.backend.clone(),
        )
    }

    /// A pipeline whose engine is not loaded: every miss goes to the backend.
    fn backend_only(&self) -> Pipeline<Mem> {
        let unloaded = FakeEmbedder::new(None, self.clock.clone());
        self.pipeline_with(
            Config::default(),
            self.local.clone(),
            unloaded,
            self.backend.clone(),
        )
    }

    fn pipeline_with(
        &self,
        cfg: Config,
        local: MemLocal,
        engine: FakeEmbedder,
        backend: FakeEmbedder,
    ) -> Pipeline<Mem> {
        Pipeline::new(
            Adapters {
                source: self.server.clone(),
                local,
                remote: self.server.clone(),
                locks: self.server.clone(),
                engine,
                backend,
                clock: self.clock.clone(),
            },
            cfg,
        )
    }

    /// Runs `p`'s queue loop, raises stop after `after_ms` (virtual) with `grace_ms` to drain,
    /// and answers the loop's summary.
    fn run_queue_for(&self, p: &Pipeline<Mem>, after_ms: u64, grace_ms: u64) -> RunSummary {
        let wake = Watchdog(self.clock.clone());
        let stopper = async {
            self.clock.sleep(after_ms).await;
            p.stop.stop(self.clock.now_ms() + grace_ms);
        };
        self.clock.run(join(p.run_queue(&wake), stopper)).0
    }

    /// Enqueues `n` jobs with texts `"{prefix} {i}"`; their ids.
    fn enqueue_n(&self, prefix: &str, n: usize) -> Vec<String> {
        (0..n)
            .map(|i| self.server.enqueue(MODEL, &format!("{prefix} {i}")))
            .collect()
    }
}

#[test]
fn miss_embeds_with_the_engine_then_local_and_remote_hits() {
    let rig = Rig::new();
    let p = rig.pipeline(Config::default());
    let r = rig.clock.run(p.resolve("hello world", None, "")).unwrap();
    assert_eq!(r.source, ResultSource::Engine);
    assert_eq!(r.vector, FakeEmbedder::vector_for("hello world"));
    assert_eq!(rig.engine.calls.get(), 1);
    // Written through: remote entry and local entry.
    let key = cache_key(MODEL, "hello world");
    assert_eq!(rig.server.cache_entry(&key).unwrap().vector.0, r.vector);
    assert!(rig.local.contains(&key));

    let again = rig.clock.run(p.resolve("hello world", None, "")).unwrap();
    assert_eq!(again.source, ResultSource::Local);
    assert_eq!(again.vector, r.vector);

    // Another worker with an empty local cache gets it from the remote cache and fills its own.
    let other_local = MemLocal::new(usize::MAX, 10);
    let q = rig.pipeline_with_local(Config::default(), other_local.clone());
    let remote = rig.clock.run(q.resolve("hello world", None, "")).unwrap();
    assert_eq!(remote.source, ResultSource::Remote);
    assert!(other_local.contains(&key));
    assert_eq!(rig.engine.calls.get(), 1, "embedded once in all");
    assert_eq!(p.metrics.counter(names::LOCAL_HITS), 1);
    assert_eq!(q.metrics.counter(names::REMOTE_HITS), 1);
}

#[test]
fn resolve_many_answers_in_order_and_one_failure_fails_only_its_text() {
    let rig = Rig::new();
    let p = rig.pipeline(Config {
        max_text_bytes: 10,
        ..Config::default()
    });
    let texts: Vec<String> = ["a", "b", "much too long text", "c"]
        .iter()
        .map(|t| t.to_string())
        .collect();
    let mut seen = Vec::new();
    let first = rig
        .clock
        .run(p.resolve_many(&texts, None, |i, r| seen.push((i, r.is_ok()))));
    assert_eq!(first.len(), 4);
    for (t, r) in texts.iter().zip(&first) {
        match r {
            Ok(r) => {
                assert_eq!(r.vector, FakeEmbedder::vector_for(t));
                assert_eq!(r.source, ResultSource::Engine);
            }
            Err(e) => {
                assert_eq!(t, "much too long text");
                assert_eq!(e.code(), "text_too_long");
            }
        }
    }
    seen.sort();
    assert_eq!(seen, [(0, true), (1, true), (2, false), (3, true)]);
    // The same batch again: every valid text is a local hit, nothing embedded again.
    let calls = rig.engine.calls.get();
    let again = rig.clock.run(p.resolve_many(&texts, None, |_, _| {}));
    assert_eq!(rig.engine.calls.get(), calls);
    let sources: Vec<_> = again
        .iter()
        .map(|r| r.as_ref().map(|r| r.source).ok())
        .collect();
    assert_eq!(
        sources,
        [
            Some(ResultSource::Local),
            Some(ResultSource::Local),
            None,
            Some(ResultSource::Local)
        ]
    );
}

#[test]
fn engine_not_loaded_or_failing_falls_back_to_the_backend() {
    let rig = Rig::new();
    let p = rig.backend_only();
    let r = rig.clock.run(p.resolve("a", Some(MODEL), "")).unwrap();
    assert_eq!(r.source, ResultSource::Backend);

    let q = rig.pipeline(Config::default());
    rig.engine.broken.set(true);
    let r = rig.clock.run(q.resolve("b", None, "")).unwrap();
    assert_eq!(r.source, ResultSource::Backend);
    assert_eq!(q.metrics.counter(names::ENGINE_ERRORS), 1);
    assert_eq!(r.vector, FakeEmbedder::vector_for("b"));
}

#[test]
fn engine_breaker_opens_then_half_opens_and_closes() {
    let rig = Rig::new();
    let p = rig.pipeline(Config {
        engine_breaker_failures: 2,
        breaker_open_ms: 1_000,
        ..Config::default()
    });
    rig.engine.broken.set(true);
    for t in ["x1", "x2"] {
        assert_eq!(
            rig.clock.run(p.resolve(t, None, "")).unwrap().source,
            ResultSource::Backend
        );
    }
    assert_eq!(p.breakers().0, BreakerState::Open);
    let calls = rig.engine.calls.get();
    rig.clock.run(p.resolve("x3", None, "")).unwrap();
    assert_eq!(
        rig.engine.calls.get(),
        calls,
        "open breaker: engine not called"
    );

    rig.engine.broken.set(false);
    rig.clock.advance(1_001);
    assert_eq!(p.breakers().0, BreakerState::HalfOpen);
    assert_eq!(
        rig.clock.run(p.resolve("x4", None, "")).unwrap().source,
        ResultSource::Engine
    );
    assert_eq!(p.breakers().0, BreakerState::Closed);
}

#[test]
fn backend_breaker_opens_and_refuses_fast() {
    let rig = Rig::new();
    let p = rig.pipeline(Config {
        backend_breaker_failures: 2,
        breaker_open_ms: 5_000,
        ..Config::default()
    });
    rig.engine.broken.set(true);
    rig.backend.broken.set(true);
    for t in ["y1", "y2"] {
        assert!(rig.clock.run(p.resolve(t, None, "")).is_err());
    }
    assert_eq!(p.breakers().1, BreakerState::Open);
    let calls = rig.backend.calls.get();
    let e = rig.clock.run(p.resolve("y3", None, "")).unwrap_err();
    assert!(matches!(e, Error::BackendUnavailable(_)), "{e}");
    assert!(e.is_retryable());
    assert_eq!(rig.backend.calls.get(), calls);
    assert_eq!(p.metrics.counter(names::BACKEND_REFUSED), 1);
    rig.backend.broken.set(false);
    rig.clock.advance(5_000);
    assert_eq!(
        rig.clock.run(p.resolve("y4", None, "")).unwrap().source,
        ResultSource::Backend
    );
    assert_eq!(p.breakers().1, BreakerState::Closed);
}

#[test]
fn backend_is_rate_limited() {
    let rig = Rig::new();
    let p = rig.pipeline(Config {
        backend_rate_per_s: 1.0,
        backend_burst: 2,
        ..Config::default()
    });
    rig.engine.broken.set(true);
    assert!(rig.clock.run(p.resolve("r1", None, "")).is_ok());
    assert!(rig.clock.run(p.resolve("r2", None, "")).is_ok());
    let e = rig.clock.run(p.resolve("r3", None, "")).unwrap_err();
    assert!(e.to_string().contains("rate limited"), "{e}");
    rig.clock.advance(1_000);
    assert!(rig.clock.run(p.resolve("r3", None, "")).is_ok());
}

#[test]
fn job_is_acked_with_its_result() {
    let rig = Rig::new();
    let p = rig.pipeline(Config::default());
    let id = rig.server.enqueue(MODEL, "queued text");
    let job = rig.clock.run(rig.server.claim(1, 0)).unwrap().remove(0);
    assert_eq!(
        rig.clock.run(p.run_job(&job)),
        JobOutcome::Done(ResultSource::Engine)
    );
    let res = rig.server.result(&id).unwrap();
    assert_eq!(res.vector.0, FakeEmbedder::vector_for("queued text"));
    assert_eq!(res.model_id, MODEL);
    // A default job id is leased to one worker at a time: the lease is the single-flight lock,
    // and its fence orders the cache write.
    assert_eq!(p.metrics.counter(names::LOCKS_ACQUIRED), 0);
    let entry = rig
        .server
        .cache_entry(&cache_key(MODEL, "queued text"))
        .unwrap();
    assert_eq!(entry.fence, job.lease.fence, "written through by the ack");
    // The claim said the remote cache had nothing: no GET of our own.
    assert!(job.cache_checked && job.cached.is_none());
    assert_eq!(rig.server.cache_gets.get(), 0);
}

#[test]
fn a_job_s_ack_carries_its_steps_under_the_delivery_s_traceparent() {
    use ternflow_core::protocol::Step;
    let rig = Rig::new();
    let p = rig.pipeline(Config::default());
    rig.engine.latency_ms.set(7);
    let id = rig.server.enqueue(MODEL, "timed text");
    let job = rig.clock.run(rig.server.claim(1, 0)).unwrap().remove(0);
    rig.clock.run(p.run_job(&job));
    let acks = rig.server.ack_timings.borrow().clone();
    assert_eq!(acks.len(), 1);
    let (acked, sent_with, timing) = &acks[0];
    assert_eq!(acked, &id);
    // The job's requests carry the delivery's own traceparent (its span is the steps' parent).
    assert_eq!(sent_with, &job.traceparent);
    let timing = timing.clone().expect("the ack reports its steps");
    assert_eq!(timing.traceparent, job.traceparent);
    let steps: Vec<(Step, u64, bool)> = timing
        .steps
        .iter()
        .map(|s| (s.step, s.us, s.failed))
        .collect();
    // The local cache missed (no time on the fake clock), the engine took its 7 ms; the claim
    // said the remote cache had nothing, so no remote step.
    assert_eq!(
        steps,
        [(Step::LocalCache, 0, false), (Step::Engine, 7_000, false)]
    );
    assert!(timing.run_us >= 7_000, "{timing:?}");
    assert!(timing
        .steps
        .iter()
        .all(|s| s.start_us + s.us <= timing.run_us));

    // An engine that fails: its step is marked failed, the backend's follows.
    rig.engine.broken.set(true);
    rig.server.ack_timings.borrow_mut().clear();
    rig.server.enqueue(MODEL, "timed fallback");
    let job = rig.clock.run(rig.server.claim(1, 0)).unwrap().remove(0);
    assert_eq!(
        rig.clock.run(p.run_job(&job)),
        JobOutcome::Done(ResultSource::Backend)
    );
    let timing = rig.server.ack_timings.borrow()[0].2.clone().unwrap();
    let steps: Vec<(Step, bool)> = timing.steps.iter().map(|s| (s.step, s.failed)).collect();
    assert_eq!(
        steps,
        [
            (Step::LocalCache, false),
            (Step::Engine, true),
            (Step::Backend, false)
        ]
    );
    // A text resolved outside a job (a page's embed) records nothing and keeps no state.
    rig.clock.run(p.resolve("outside a job", None, "")).unwrap();
}

#[test]
fn a_claim_carrying_the_cached_entry_is_a_remote_hit_without_a_get() {
    let rig = Rig::new();
    let p = rig.pipeline(Config::default());
    rig.server.put_cache(
        &cache_key(MODEL, "known"),
        CacheEntry {
            model_id: MODEL.into(),
            vector: Vector(vec![0.6, 0.8]),
            fence: 1,
            expires_at: u64::MAX,
            by: None,
        },
    );
    let id = rig.server.enqueue(MODEL, "known");
    let job = rig.clock.run(rig.server.claim(1, 0)).unwrap().remove(0);
    assert!(job.cached.is_some());
    assert_eq!(
        rig.clock.run(p.run_job(&job)),
        JobOutcome::Done(ResultSource::Remote)
    );
    assert_eq!(rig.server.cache_gets.get(), 0);
    assert_eq!(rig.engine.calls.get(), 0);
    assert_eq!(rig.server.result(&id).unwrap().vector.0, vec![0.6, 0.8]);
}

#[test]
fn oversized_text_goes_to_the_dlq_with_its_reason() {
    let rig = Rig::new();
    let p = rig.pipeline(Config {
        max_text_bytes: 10,
        ..Config::default()
    });
    let id = rig.server.enqueue(MODEL, "this text is far too long");
    let job = rig.clock.run(rig.server.claim(1, 0)).unwrap().remove(0);
    assert_eq!(
        rig.clock.run(p.run_job(&job)),
        JobOutcome::Dead("text_too_long".into())
    );
    let dead = rig.server.dead();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].0, id);
    assert!(!dead[0].1.retryable);
    assert!(dead[0].1.message.contains("limit is 10"));
    assert_eq!(rig.engine.calls.get(), 0);
}

#[test]
fn model_mismatch_is_permanent() {
    let rig = Rig::new();
    let p = rig.pipeline(Config::default());
    rig.server.enqueue("ffffffffffffffff", "other model");
    let job = rig.clock.run(rig.server.claim(1, 0)).unwrap().remove(0);
    assert_eq!(
        rig.clock.run(p.run_job(&job)),
        JobOutcome::Dead("model_mismatch".into())
    );
}

#[test]
fn transient_failures_are_retried_in_the_worker() {
    let rig = Rig::new();
    let p = rig.pipeline(Config::default());
    rig.engine.broken.set(true);
    rig.backend.fail_next.set(2);
    let id = rig.server.enqueue(MODEL, "flaky");
    let job = rig.clock.run(rig.server.claim(1, 0)).unwrap().remove(0);
    let t = rig.clock.now_ms();
    assert_eq!(
        rig.clock.run(p.run_job(&job)),
        JobOutcome::Done(ResultSource::Backend)
    );
    assert_eq!(p.metrics.counter(names::RETRIES), 2);
    assert!(rig.clock.now_ms() > t, "backed off between tries");
    assert!(rig.server.result(&id).is_some());
}

#[test]
fn exhausted_retries_nack_then_the_server_dead_letters() {
    let rig = Rig::new(); // server: 3 deliveries at most
    let p = rig.pipeline(Config::default());
    rig.engine.broken.set(true);
    rig.backend.broken.set(true);
    let id = rig.server.enqueue(MODEL, "doomed");
    let mut outcomes = vec![];
    for _ in 0..3 {
        let job = rig.clock.run(rig.server.claim(1, 0)).unwrap().remove(0);
        outcomes.push(rig.clock.run(p.run_job(&job)));
    }
    assert!(matches!(outcomes[0], JobOutcome::Retry(_)));
    assert!(matches!(outcomes[1], JobOutcome::Retry(_)));
    assert!(matches!(outcomes[2], JobOutcome::Dead(_)));
    let dead = rig.server.dead();
    assert_eq!(dead[0].0, id);
    assert!(
        dead[0].1.retryable,
        "the reason records that it was transient"
    );
}

#[test]
fn server_unreachable_then_back_loses_nothing() {
    let rig = Rig::new();
    let p = rig.pipeline(Config::default());
    let id = rig.server.enqueue(MODEL, "resilient");
    let job = rig.clock.run(rig.server.claim(1, 0)).unwrap().remove(0);
    // The server goes down mid-job: cache and lock calls degrade, the ack fails, retries back off.
    rig.server.down.set(true);
    let clock = rig.clock.clone();
    let server = rig.server.clone();
    let watcher = async move {
        // Bring it back after the worker has retried a while.
        while clock.now_ms() < T0 + 250 {
            clock.sleep(10).await;
        }
        server.down.set(false);
    };
    let (outcome, ()) = rig.clock.run(join(p.run_job(&job), watcher));
    // Embedded once before the outage was noticed at the ack; the retries sent that vector again
    // (the job keeps it: queue results are not written to the local cache by default).
    assert_eq!(outcome, JobOutcome::Done(ResultSource::Engine));
    assert_eq!(rig.engine.calls.get(), 1);
    assert!(p.metrics.counter(names::RETRIES) >= 1);
    assert!(rig.server.result(&id).is_some());
}

#[test]
fn lease_lost_mid_job_abandons_without_ack() {
    let rig = Rig::new();
    let p = rig.pipeline(Config::default());
    rig.engine.latency_ms.set(20_000); // longer than a heartbeat interval
    let id = rig.server.enqueue(MODEL, "slow");
    let job = rig.clock.run(rig.server.claim(1, 0)).unwrap().remove(0);
    rig.server.steal_lease(&id);
    assert_eq!(rig.clock.run(p.run_job(&job)), JobOutcome::LeaseLost);
    assert!(rig.server.result(&id).is_none());
    assert!(p.metrics.counter(names::LEASES_LOST) >= 1);
}

#[test]
fn heartbeats_keep_a_long_job_alive() {
    let rig = Rig::new(); // 30 s leases
    let p = rig.pipeline(Config::default());
    rig.engine.latency_ms.set(100_000);
    let id = rig.server.enqueue(MODEL, "very slow");
    let job = rig.clock.run(rig.server.claim(1, 0)).unwrap().remove(0);
    assert_eq!(
        rig.clock.run(p.run_job(&job)),
        JobOutcome::Done(ResultSource::Engine)
    );
    assert!(p.metrics.counter(names::HEARTBEATS) >= 3);
    assert!(rig.server.result(&id).is_some());
}

#[test]
fn the_queue_loop_keeps_every_lease_alive_with_one_heartbeat_request_per_round() {
    let rig = Rig::new(); // 30 s leases
    let p = rig.pipeline(Config {
        concurrency: 4,
        ..Config::default()
    });
    // Each job takes 40 s (the fake engine waits rather than computes, so the four overlap):
    // beyond their 30 s leases.
    rig.engine.latency_ms.set(40_000);
    let ids = rig.enqueue_n("slow", 4);
    let wake = Watchdog(rig.clock.clone());
    let stopper = async {
        while ids.iter().any(|id| rig.server.result(id).is_none()) {
            rig.clock.sleep(1_000).await;
        }
        p.stop.stop(rig.clock.now_ms() + 1_000);
    };
    let (sum, ()) = rig.clock.run(join(p.run_queue(&wake), stopper));
    assert_eq!((sum.done, sum.lost), (4, 0), "{sum:?}");
    assert_eq!(
        rig.server.heartbeat_calls.get(),
        0,
        "no per-job heartbeat while the loop runs"
    );
    let batches = rig.server.heartbeat_batches.get();
    assert!(batches >= 3, "{batches} heartbeat rounds over 40 s");
    assert_eq!(
        p.metrics.counter(names::HEARTBEAT_BATCHES),
        u64::from(batches)
    );
    // Rounds carry several leases: more leases extended than requests sent.
    assert!(p.metrics.counter(names::HEARTBEATS) > u64::from(batches));
}

#[test]
fn a_lease_the_batched_heartbeat_finds_lost_abandons_only_that_job() {
    let rig = Rig::new();
    let p = rig.pipeline(Config {
        concurrency: 3,
        ..Config::default()
    });
    rig.engine.latency_ms.set(20_000); // past the first heartbeat round (10 s)
    let ids = rig.enqueue_n("held", 3);
    let wake = Watchdog(rig.clock.clone());
    let thief = async {
        rig.clock.sleep(5).await;
        rig.server.steal_lease(&ids[2]); // the last to reach the engine
        while ids[..2].iter().any(|id| rig.server.result(id).is_none()) {
            rig.clock.sleep(1_000).await;
        }
        p.stop.stop(rig.clock.now_ms() + 1_000);
    };
    let (sum, ()) = rig.clock.run(join(p.run_queue(&wake), thief));
    assert_eq!((sum.done, sum.lost), (2, 1), "{sum:?}");
    assert!(rig.server.result(&ids[2]).is_none(), "never acked");
    assert!(rig.server.heartbeat_batches.get() >= 1);
}

#[test]
fn jobs_failing_together_are_nacked_in_one_batch_request() {
    let rig = Rig::new();
    let p = rig.pipeline(Config {
        concurrency: 8,
        max_text_bytes: 8,
        ..Config::default()
    });
    let ids: Vec<String> = (0..8)
        .map(|i| {
            rig.server
                .enqueue(MODEL, &format!("far too long a text {i}"))
        })
        .collect();
    let wake = Watchdog(rig.clock.clone());
    let stopper = async {
        while rig.server.dead().len() < ids.len() {
            rig.clock.sleep(10).await;
        }
        p.stop.stop(rig.clock.now_ms() + 1_000);
    };
    let (sum, ()) = rig.clock.run(join(p.run_queue(&wake), stopper));
    assert_eq!(sum.dead, 8, "{sum:?}");
    assert_eq!(
        rig.server.nack_calls.get(),
        0,
        "no one-job nack in the loop"
    );
    let batches = rig.server.nack_batches.get();
    assert!(batches <= 2, "8 nacks in {batches} requests");
    assert_eq!(p.metrics.counter(names::NACK_BATCHES), u64::from(batches));
    for (_, e) in rig.server.dead() {
        assert_eq!(e.code, "text_too_long");
    }
}

#[test]
fn two_workers_on_one_key_embed_once() {
    let rig = Rig::new();
    rig.engine.latency_ms.set(50);
    let a = rig.pipeline_with_local(Config::default(), MemLocal::new(usize::MAX, 10));
    let b = rig.pipeline_with_local(Config::default(), MemLocal::new(usize::MAX, 10));
    let (ra, rb) = rig.clock.run(join(
        a.resolve("same text", None, ""),
        b.resolve("same text", None, ""),
    ));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(ra.vector, rb.vector);
    assert_eq!(rig.engine.calls.get(), 1, "single flight");
    let sources = [ra.source, rb.source];
    assert!(sources.contains(&ResultSource::Engine) && sources.contains(&ResultSource::Remote));
    assert!(a.metrics.counter(names::LOCK_FAILURES) + b.metrics.counter(names::LOCK_FAILURES) >= 1);
}

#[test]
fn fence_conflict_adopts_the_newer_value() {
    let rig = Rig::new();
    let p = rig.pipeline(Config::default());
    let key = cache_key(MODEL, "contested");
    // A newer writer (higher fence) stored its value while we embedded: simulate by storing an
    // entry with a fence far above any we will be granted, but expired so our read misses.
    rig.server.put_cache(
        &key,
        CacheEntry {
            model_id: MODEL.into(),
            vector: Vector(vec![9.0, 9.0]),
            fence: 1_000,
            expires_at: 0,
            by: None,
        },
    );
    let r = rig.clock.run(p.resolve("contested", None, "")).unwrap();
    assert_eq!(r.vector, vec![9.0, 9.0], "the newer value wins");
    assert_eq!(p.metrics.counter(names::FENCE_CONFLICTS), 1);
}

#[test]
fn held_lock_waits_and_rechecks_then_proceeds_after_giving_up() {
    let rig = Rig::new();
    let p = rig.pipeline(Config::default());
    let key = cache_key(MODEL, "locked");
    rig.server.hold_lock(&key, 3_600_000);
    let r = rig.clock.run(p.resolve("locked", None, "")).unwrap();
    assert_eq!(r.source, ResultSource::Engine);
    assert_eq!(p.metrics.counter(names::LOCK_FAILURES), 10);
    assert!(
        p.metrics.counter(names::REMOTE_MISSES) >= 9,
        "re-checked the cache while waiting"
    );
}

#[test]
fn a_lock_won_after_waiting_rechecks_the_cache_before_embedding() {
    let rig = Rig::new();
    let p = rig.pipeline(Config::default());
    let key = cache_key(MODEL, "finished meanwhile");
    rig.server.hold_lock(&key, 3_600_000);
    // GET 1: the pre-lock check; GET 2: the check after the first wait. Right after answering
    // it (a miss), the holder writes the entry and unlocks, so the next acquire succeeds.
    *rig.server.finish_after_get.borrow_mut() = Some((
        2,
        key.clone(),
        CacheEntry {
            model_id: MODEL.into(),
            vector: Vector(vec![7.0, 7.0]),
            fence: 1,
            expires_at: u64::MAX,
            by: None,
        },
    ));
    let r = rig
        .clock
        .run(p.resolve("finished meanwhile", None, ""))
        .unwrap();
    assert_eq!(r.source, ResultSource::Remote);
    assert_eq!(r.vector, vec![7.0, 7.0]);
    assert_eq!(
        p.metrics.counter(names::ENGINE_EMBEDS),
        0,
        "embedded once, elsewhere"
    );
    assert_eq!(p.metrics.counter(names::LOCKS_ACQUIRED), 1);
    assert_eq!(rig.server.cache_gets.get(), 3);
}

#[test]
fn local_ttl_expiry_and_size_bound() {
    let rig = Rig::new();
    let local = MemLocal::new(usize::MAX, 3);
    let p = rig.pipeline_with_local(
        Config {
            local_ttl_ms: 1_000,
            ttl_jitter: 0.0,
            ..Config::default()
        },
        local.clone(),
    );
    for t in ["a", "b", "c", "d"] {
        rig.clock.run(p.resolve(t, None, "")).unwrap();
        rig.clock.advance(10);
    }
    assert_eq!(local.len(), 3, "bounded");
    assert!(
        !local.contains(&cache_key(MODEL, "a")),
        "least recently used evicted"
    );
    let key = cache_key(MODEL, "d");
    assert!(rig
        .clock
        .run(local.get(&key, rig.clock.now_ms()))
        .unwrap()
        .is_some());
    rig.clock.advance(1_001);
    assert!(
        rig.clock
            .run(local.get(&key, rig.clock.now_ms()))
            .unwrap()
            .is_none(),
        "expired"
    );
}

#[test]
fn broken_local_cache_does_not_fail_the_text() {
    let rig = Rig::new();
    let p = rig.pipeline(Config::default());
    rig.local.broken.set(true);
    assert!(rig.clock.run(p.resolve("z", None, "")).is_ok());
    assert!(p.metrics.counter(names::LOCAL_ERRORS) >= 2);
}

#[test]
fn invalidate_drops_local_entries() {
    let rig = Rig::new();
    let p = rig.pipeline(Config::default());
    rig.clock.run(p.resolve("inv", None, "")).unwrap();
    let key = cache_key(MODEL, "inv");
    assert!(rig.local.contains(&key));
    rig.clock.run(p.invalidate(std::slice::from_ref(&key)));
    assert!(!rig.local.contains(&key));
    assert_eq!(p.metrics.counter(names::INVALIDATIONS), 1);
}

#[test]
fn a_reset_empties_the_local_cache_and_the_next_resolve_refills_it() {
    let rig = Rig::new();
    let p = rig.pipeline(Config::default());
    for t in ["r1", "r2"] {
        rig.clock.run(p.resolve(t, None, "")).unwrap();
    }
    let keys = [cache_key(MODEL, "r1"), cache_key(MODEL, "r2")];
    assert!(keys.iter().all(|k| rig.local.contains(k)));
    rig.clock.run(p.resync());
    assert!(
        keys.iter().all(|k| !rig.local.contains(k)),
        "nothing local is trusted"
    );
    assert_eq!(p.metrics.counter(names::RESETS), 1);
    rig.clock.run(p.resolve("r1", None, "")).unwrap();
    assert!(rig.local.contains(&keys[0]));
    // A local cache that fails to clear is counted, not fatal.
    rig.local.broken.set(true);
    rig.clock.run(p.resync());
    assert_eq!(p.metrics.counter(names::RESETS), 2);
    assert!(p.metrics.counter(names::LOCAL_ERRORS) >= 1);
}

#[test]
fn queue_loop_runs_everything_with_bounded_concurrency_and_drains_on_stop() {
    let rig = Rig::new();
    let p = rig.pipeline(Config {
        concurrency: 3,
        ..Config::default()
    });
    rig.engine.latency_ms.set(5);
    let ids = rig.enqueue_n("text", 10);
    let wake = Watchdog(rig.clock.clone());
    let stopper = async {
        while ids.iter().any(|id| rig.server.result(id).is_none()) {
            // 3 working at most, plus at most 3 more whose acks are on their way.
            assert!(p.metrics.gauge("in_flight").unwrap_or(0.0) <= 6.0);
            rig.clock.sleep(1).await;
        }
        p.stop.stop(rig.clock.now_ms() + 10_000);
    };
    let (sum, ()) = rig.clock.run(join(p.run_queue(&wake), stopper));
    assert_eq!(sum.done, 10);
    assert_eq!(sum.claimed, 10);
    assert_eq!(rig.server.ready_len(), 0);
}

#[test]
fn queue_jobs_write_the_local_cache_only_when_queue_local_writes_is_set() {
    for (writes, text) in [(false, "a queue text"), (true, "another queue text")] {
        let rig = Rig::new();
        let p = rig.pipeline(Config {
            queue_local_writes: writes,
            ..Config::default()
        });
        let id = rig.server.enqueue(MODEL, text);
        let job = rig.clock.run(rig.server.claim(1, 0)).unwrap().remove(0);
        let outcome = rig.clock.run(p.run_job(&job));
        assert_eq!(outcome, JobOutcome::Done(ResultSource::Engine));
        let key = cache_key(MODEL, text);
        // The remote cache has it either way (the ack carried the write).
        assert_eq!(
            rig.server.result(&id).unwrap().vector.0,
            FakeEmbedder::vector_for(text)
        );
        assert!(rig.server.cache_entry(&key).is_some());
        assert_eq!(
            rig.local.contains(&key),
            writes,
            "queue_local_writes {writes}"
        );
        // A text this browser stored itself is still read by a queue job.
        if !writes {
            rig.clock.run(p.resolve(text, None, "")).unwrap();
            assert!(rig.local.contains(&key), "the page's own resolve writes");
            rig.server.enqueue_as("again", MODEL, text);
            let job = rig.clock.run(rig.server.claim(1, 0)).unwrap().remove(0);
            let outcome = rig.clock.run(p.run_job(&job));
            assert_eq!(outcome, JobOutcome::Done(ResultSource::Local));
        }
    }
}

#[test]
fn jobs_the_server_resolved_at_claim_are_never_acked_nor_written_locally_by_default() {
    resolved_at_claim(Config::default(), None);
}

#[test]
fn jobs_the_server_resolved_at_claim_are_kept_locally_when_queue_local_writes_is_set() {
    let cfg = Config {
        queue_local_writes: true,
        ..Config::default()
    };
    resolved_at_claim(cfg, Some(vec![0.6, 0.8]));
}

/// Three jobs the server finishes at claim from its cache and one it does not; `local`: what
/// the local cache then holds for each of the three.
fn resolved_at_claim(cfg: Config, local: Option<Vec<f32>>) {
    let rig = Rig::new();
    rig.server.resolve_cached.set(true);
    let p = rig.pipeline(Config {
        concurrency: 4,
        ..cfg
    });
    for i in 0..3 {
        rig.server.put_cache(
            &cache_key(MODEL, &format!("cached {i}")),
            CacheEntry {
                model_id: MODEL.into(),
                vector: Vector(vec![0.6, 0.8]),
                fence: 1,
                expires_at: u64::MAX,
                by: None,
            },
        );
    }
    let ids: Vec<String> = (0..3)
        .map(|i| rig.server.enqueue(MODEL, &format!("cached {i}")))
        .chain([rig.server.enqueue(MODEL, "not cached")])
        .collect();
    let wake = Watchdog(rig.clock.clone());
    let stopper = async {
        while ids.iter().any(|id| rig.server.result(id).is_none()) {
            rig.clock.sleep(1).await;
        }
        // let the loop take in what it has; the resolved jobs finish without any request
        rig.clock.sleep(50).await;
        p.stop.stop(rig.clock.now_ms() + 10_000);
    };
    let (sum, ()) = rig.clock.run(join(p.run_queue(&wake), stopper));
    assert_eq!((sum.claimed, sum.done, sum.lost), (4, 4, 0), "{sum:?}");
    // Only the miss was embedded and acked; every job was acked exactly once, the three hits
    // by the claim itself.
    assert_eq!(rig.engine.calls.get(), 1);
    let counts = rig.server.ack_counts.borrow().clone();
    assert!(
        ids.iter().all(|id| counts.get(id) == Some(&1)),
        "{counts:?}"
    );
    assert_eq!(
        rig.server.acks_received.get(),
        1,
        "only the miss's ack was sent"
    );
    for (i, id) in ids.iter().enumerate().take(3) {
        let key = cache_key(MODEL, &format!("cached {i}"));
        let held = rig
            .clock
            .run(rig.local.get(&key, rig.clock.now_ms()))
            .unwrap();
        assert_eq!(held, local, "what the local cache holds");
        let r = rig.server.result(id).unwrap();
        assert_eq!(r.source, ResultSource::Remote);
    }
    assert_eq!(p.metrics.counter(names::REMOTE_HITS), 3);
    assert_eq!(rig.server.cache_gets.get(), 0);
}

#[test]
fn stop_deadline_hands_back_the_jobs_of_a_claim_still_on_its_way() {
    let rig = Rig::new();
    let p = rig.pipeline(Config {
        concurrency: 2,
        ..Config::default()
    });
    // The claim leases the jobs at once, but its answer arrives only after the stop deadline.
    rig.server.claim_reply_ms.set(500);
    let ids = rig.enqueue_n("late", 2);
    let sum = rig.run_queue_for(&p, 10, 100);
    assert_eq!(sum.handed_back, 2, "{sum:?}");
    assert_eq!(rig.server.ready_len(), 2, "not left leased to nobody");
    assert!(ids.iter().all(|id| rig.server.attempt(id) == 0));
}

#[test]
fn stop_deadline_hands_unfinished_jobs_back() {
    let rig = Rig::new();
    let p = rig.pipeline(Config {
        concurrency: 2,
        ..Config::default()
    });
    rig.engine.latency_ms.set(1_000_000);
    let ids = rig.enqueue_n("long", 2);
    let sum = rig.run_queue_for(&p, 10, 100);
    assert_eq!(sum.handed_back, 2);
    assert_eq!(rig.server.ready_len(), 2, "back in the queue");
    assert!(
        ids.iter().all(|id| rig.server.attempt(id) == 0),
        "a hand-back is a release: it uses no attempt"
    );
    assert!(ids.iter().all(|id| rig.server.result(id).is_none()));
}

#[test]
fn jobs_finishing_together_share_one_ack_request() {
    let rig = Rig::new();
    let p = rig.pipeline(Config {
        concurrency: 8,
        ..Config::default()
    });
    rig.engine.latency_ms.set(5);
    let ids = rig.enqueue_n("together", 8);
    let sum = rig.run_queue_for(&p, 5_000, 1_000);
    assert_eq!(sum.done, 8);
    assert!(ids.iter().all(|id| rig.server.result(id).is_some()));
    let batches = rig.server.ack_batches.get();
    assert!(batches <= 2, "8 acks in {batches} requests");
    assert_eq!(p.metrics.counter(names::ACK_BATCHES), u64::from(batches));
}

#[test]
fn a_lost_lease_inside_a_batch_does_not_drop_the_other_acks() {
    let rig = Rig::new();
    let p = rig.pipeline(Config {
        concurrency: 4,
        ..Config::default()
    });
    rig.engine.latency_ms.set(5);
    let ids = rig.enqueue_n("batch", 4);
    let wake = Watchdog(rig.clock.clone());
    let thief = async {
        // After the claim, before the engine finishes: one lease goes to someone else.
        rig.clock.sleep(2).await;
        rig.server.steal_lease(&ids[1]);
        rig.clock.sleep(5_000).await;
        p.stop.stop(rig.clock.now_ms() + 1_000);
    };
    let (sum, ()) = rig.clock.run(join(p.run_queue(&wake), thief));
    assert_eq!((sum.done, sum.lost), (3, 1), "{sum:?}");
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(rig.server.result(id).is_some(), i != 1, "job {i}");
    }
}

#[test]
fn a_5xx_batch_ack_is_sent_again_and_nothing_is_lost_or_acked_twice() {
    let rig = Rig::new();
    let p = rig.pipeline(Config {
        concurrency: 6,
        ..Config::default()
    });
    rig.engine.latency_ms.set(5);
    rig.server.fail_ack_batches.set(2);
    let ids = rig.enqueue_n("flaky", 6);
    let sum = rig.run_queue_for(&p, 30_000, 1_000);
    assert_eq!(sum.done, 6, "{sum:?}");
    assert!(
        rig.server.ack_batches.get() >= 3,
        "the failed batches were sent again"
    );
    let counts = rig.server.ack_counts.borrow();
    for id in &ids {
        assert_eq!(counts.get(id), Some(&1), "{id} acked exactly once");
    }
    assert!(p.metrics.counter(names::RETRIES) >= 6);
}

#[test]
fn the_http_handler_answers_through_the_pipeline() {
    use ternflow_core::http_handler::respond;
    let rig = Rig::new();
    let p = rig.pipeline(Config::default());
    let json = |r: &ternflow_core::http_handler::Reply| -> serde_json::Value {
        serde_json::from_slice(&r.body).unwrap()
    };
    let ok = rig
        .clock
        .run(respond(&p, "POST", br#"{"texts": ["a", "a", "b"]}"#));
    assert_eq!(ok.status, 200);
    let body = json(&ok);
    assert_eq!(
        body["sources"],
        serde_json::json!(["engine", "local", "engine"])
    );
    let first: Vec<f32> = serde_json::from_value(body["vectors"][0].clone()).unwrap();
    assert_eq!(first, FakeEmbedder::vector_for("a"));
    let get = rig.clock.run(respond(&p, "GET", b""));
    assert_eq!(
        (get.status, json(&get)["error"]["code"].clone()),
        (405, "method_not_allowed".into())
    );
    let bad = rig.clock.run(respond(&p, "POST", br#"{"texts": "a"}"#));
    assert_eq!(
        (bad.status, json(&bad)["error"]["code"].clone()),
        (400, "bad_request".into())
    );
    // No engine and no backend for a text: the first failure is the reply.
    rig.engine.broken.set(true);
    rig.backend.broken.set(true);
    let down = rig
        .clock
        .run(respond(&p, "POST", br#"{"texts": ["a", "c"]}"#));
    assert_eq!(down.status, 400, "{}", json(&down));
    assert!(json(&down)["error"]["code"].is_string());
}

#[test]
fn a_text_cut_at_max_tokens_stays_out_of_the_shared_cache_and_says_so() {
    use ternflow_core::http_handler::respond;
    let rig = Rig::new();
    let p = rig.pipeline(Config::default());
    let json = |r: &ternflow_core::http_handler::Reply| -> serde_json::Value {
        serde_json::from_slice(&r.body).unwrap()
    };
    let long = "one two three four five six";
    let body = serde_json::json!({"texts": [long, "one two"], "maxTokens": 3}).to_string();
    let r = rig.clock.run(respond(&p, "POST", body.as_bytes()));
    assert_eq!(r.status, 200, "{}", json(&r));
    let v = json(&r);
    assert_eq!(v["sources"], serde_json::json!(["engine", "engine"]));
    assert_eq!(
        v["info"],
        serde_json::json!([
            {"tokens": 3, "chunks": 1, "truncated": true},
            {"tokens": 2, "chunks": 1, "truncated": false},
        ])
    );
    let cut: Vec<f32> = serde_json::from_value(v["vectors"][0].clone()).unwrap();
    assert_eq!(cut, FakeEmbedder::vector_cut(long, 3));
    assert_ne!(cut, FakeEmbedder::vector_for(long));
    // The cut vector is not the text's embedding: local only, under a key of its own; the text
    // within the limit took the usual path (its vector is the whole text's, shared).
    assert!(rig.server.cache_entry(&cache_key(MODEL, long)).is_none());
    assert!(rig
        .local
        .contains(&format!("{}.t3", cache_key(MODEL, long))));
    assert!(!rig.local.contains(&cache_key(MODEL, long)));
    assert!(rig
        .server
        .cache_entry(&cache_key(MODEL, "one two"))
        .is_some());

    // Again: both from the local cache, described the same (counted, not remembered); the
    // whole text is embedded afresh, not served the cut vector.
    let again = json(&rig.clock.run(respond(&p, "POST", body.as_bytes())));
    assert_eq!(again["sources"], serde_json::json!(["local", "local"]));
    assert_eq!(again["info"], v["info"]);
    let whole = json(
        &rig.clock.run(respond(
            &p,
            "POST",
            serde_json::json!({ "texts": [long] })
                .to_string()
                .as_bytes(),
        )),
    );
    assert_eq!(whole["sources"], serde_json::json!(["engine"]));
    assert_eq!(
        whole["info"],
        serde_json::json!([{"tokens": 6, "chunks": 1, "truncated": false}])
    );
    let w: Vec<f32> = serde_json::from_value(whole["vectors"][0].clone()).unwrap();
    assert_eq!(w, FakeEmbedder::vector_for(long));
}

#[test]
fn a_cut_text_the_engine_cannot_count_goes_to_the_backend_with_its_limit() {
    let rig = Rig::new();
    let unloaded = || FakeEmbedder::new(None, rig.clock.clone());
    let p = rig.pipeline_with(
        Config::default(),
        rig.local.clone(),
        unloaded(),
        rig.backend.clone(),
    );
    let texts = vec!["a b c d".to_owned()];
    let options = ResolveOptions {
        max_tokens: Some(2),
        info: true,
        trace: None,
    };
    let batch = rig
        .clock
        .run(p.resolve_many_with(&texts, Some(MODEL), options.clone(), |_, _| {}));
    assert_eq!(batch.info, None, "no engine to count with");
    let r = batch.results.into_iter().next().unwrap().unwrap();
    assert_eq!(r.source, ResultSource::Backend);
    assert_eq!(r.vector, FakeEmbedder::vector_cut("a b c d", 2));
    assert_eq!(
        p.metrics.counter(names::ENGINE_ERRORS),
        0,
        "not the engine's failure"
    );
    assert!(rig
        .server
        .cache_entry(&cache_key(MODEL, "a b c d"))
        .is_none());

    // A backend that embeds whole texts only refuses it, and that is not its failure either:
    // its breaker stays closed however often it is asked.
    let fresh = MemLocal::new(usize::MAX, 100);
    let q = rig.pipeline_with(Config::default(), fresh, unloaded(), unloaded());
    for _ in 0..10 {
        let batch =
            rig.clock
                .run(q.resolve_many_with(&texts, Some(MODEL), options.clone(), |_, _| {}));
        let e = batch.results.into_iter().next().unwrap().unwrap_err();
        assert!(e.to_string().contains("cannot embed part of a text"), "{e}");
    }
    assert_eq!(q.breakers().1, BreakerState::Closed);
    assert_eq!(q.metrics.counter(names::BACKEND_ERRORS), 0);
}

#[test]
fn a_caller_s_trace_is_continued_by_each_text_s_requests() {
    use ternflow_core::trace::TraceParent;
    let rig = Rig::new();
    let p = rig.backend_only();
    let page = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    let texts = vec!["traced one".to_owned(), "traced two".to_owned()];
    let options = ResolveOptions {
        trace: page.clone(),
        ..ResolveOptions::default()
    };
    let batch = rig
        .clock
        .run(p.resolve_many_with(&texts, Some(MODEL), options, |_, _| {}));
    assert!(batch.results.iter().all(Result::is_ok));
    let seen: Vec<TraceParent> = rig
        .backend
        .traces
        .borrow()
        .iter()
        .map(|t| TraceParent::parse(t).expect("a traceparent on every backend call"))
        .collect();
    assert_eq!(seen.len(), 2, "both texts went to the backend");
    let page = page.unwrap();
    for t in &seen {
        // In the page's trace, each text a span of its own under the page's.
        assert_eq!(t.trace_id, page.trace_id);
        assert_ne!(t.parent_id, page.parent_id);
        assert_eq!(t.flags, page.flags);
    }
    assert_ne!(seen[0].parent_id, seen[1].parent_id);

    // Without one, each text starts a trace of its own.
    rig.backend.traces.borrow_mut().clear();
    let texts = vec!["untraced one".to_owned(), "untraced two".to_owned()];
    rig.clock
        .run(p.resolve_many_with(&texts, Some(MODEL), ResolveOptions::default(), |_, _| {}));
    let seen: Vec<String> = rig
        .backend
        .traces
        .borrow()
        .iter()
        .map(|t| TraceParent::parse(t).unwrap().trace_id)
        .collect();
    assert_eq!(seen.len(), 2);
    assert_ne!(seen[0], seen[1]);
    assert!(seen.iter().all(|t| *t != page.trace_id));
}

#[test]
fn a_paused_loop_claims_nothing_until_it_is_resumed() {
    let rig = Rig::new();
    let p = rig.pipeline(Config {
        concurrency: 2,
        ..Config::default()
    });
    rig.engine.latency_ms.set(5);
    let ids = rig.enqueue_n("paused", 10);
    p.pause.set(true);
    let wake = Watchdog(rig.clock.clone());
    let driver = async {
        rig.clock.sleep(2_000).await;
        let ready_while_paused = rig.server.ready_len();
        p.pause.set(false);
        rig.clock.sleep(5_000).await;
        p.stop.stop(rig.clock.now_ms() + 1_000);
        ready_while_paused
    };
    let (sum, ready_while_paused) = rig.clock.run(join(p.run_queue(&wake), driver));
    assert_eq!(ready_while_paused, 10, "no claim in 2 s of pause");
    assert_eq!(sum.done, 10, "all done once resumed: {sum:?}");
    assert!(ids.iter().all(|id| rig.server.result(id).is_some()));
}

#[test]
fn a_cpu_budget_keeps_the_engine_busy_its_share_of_the_time() {
    // 10 s (virtual) of a full queue, embeds of 8 ms, four in flight: busy time measured by the
    // budget against the time that passed, and the jobs done against a run without a budget.
    let run = |share: f64| {
        let rig = Rig::new();
        let p = rig.pipeline(Config {
            concurrency: 4,
            ..Config::default()
        });
        rig.engine.latency_ms.set(8);
        rig.enqueue_n("budget", 6_000);
        p.cpu.set_share(share);
        let sum = rig.run_queue_for(&p, 10_000, 0);
        (sum.done, p.cpu.busy_ms() as f64 / 10_000.0)
    };
    let (full, full_busy) = run(1.0);
    let (quarter, busy) = run(0.25);
    assert!(
        full_busy > 0.9,
        "without a budget the engine is busy: {full_busy:.3}"
    );
    assert!(
        (0.22..=0.28).contains(&busy),
        "busy {busy:.3} of the time, budget 0.25"
    );
    let ratio = quarter as f64 / full as f64;
    assert!(
        (0.2..=0.3).contains(&ratio),
        "{quarter} jobs vs {full} without a budget"
    );
}
