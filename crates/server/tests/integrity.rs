//! Result verification end to end through the router (`crate::integrity`): shape checks, a liar
//! caught on probation, a patient liar caught by sampling at the rate the docs claim, quarantine
//! undoing everything the liar wrote, provenance for admins only, checked cache writes, and an
//! honest worker on every engine kernel never flagged.

mod common;

use std::sync::Arc;

use axum::http::StatusCode;
use common::{tokens, Api, ADMIN, PRODUCER, WORKER, WORKER_B64};
use serde_json::{json, Value};
use ternflow_core::keys::cache_key;
use ternflow_core::protocol::{
    AckBatchRequest, AckCacheWrite, AckItem, AckRequest, CachePut, JobResult, ResultSource,
    ServerEvent, Vector,
};
use ternflow_server::integrity::Policy;
use ternflow_server::{AppState, Config, Embedder, FakeClock, HashEmbedder, MemoryStore};

fn hash() -> HashEmbedder {
    HashEmbedder::default()
}

fn model() -> String {
    hash().model_id()
}

fn embed(text: &str) -> Vec<f32> {
    hash().embed_batch(&[text.to_owned()]).unwrap().remove(0)
}

fn setup(policy: Policy) -> (AppState, Api) {
    setup_with(policy, Arc::new(MemoryStore::new()))
}

fn setup_with(policy: Policy, store: Arc<MemoryStore>) -> (AppState, Api) {
    let cfg = Config {
        verify: policy,
        ..Config::default()
    };
    let state = AppState::new(store, tokens(), cfg)
        .with_clock(Arc::new(FakeClock::new(1_000_000)))
        .with_embedder(Arc::new(hash()));
    let api = Api(ternflow_server::app(state.clone()));
    (state, api)
}

fn policy(probation: u64, sample: f64) -> Policy {
    Policy {
        probation,
        sample,
        ..Policy::default()
    }
}

/// Enqueues `texts` under the server's model; their job ids.
async fn enqueue(api: &Api, texts: &[String]) -> Vec<String> {
    let jobs: Vec<Value> = texts.iter().map(|t| json!({ "text": t })).collect();
    let r = api.enqueue(json!({ "jobs": jobs })).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    r.json["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn claim_as(api: &Api, token: &str, max: u32) -> Vec<Value> {
    let r = api
        .post(
            Some(token),
            "/v1/jobs/claim",
            json!({"worker": "w1", "max": max}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "claim: {}", r.text);
    r.json["jobs"].as_array().cloned().unwrap_or_default()
}

/// Claims and acks, as `token`, every job there is, batch by batch, with the vector `embed` gives
/// each text (and its cache write); how many it acked.
async fn drain(
    api: &Api,
    token: &str,
    model: &str,
    mut embed: impl FnMut(&str) -> Vec<f32>,
) -> usize {
    let mut n = 0;
    loop {
        let jobs = claim_as(api, token, 16).await;
        if jobs.is_empty() {
            return n;
        }
        let acks: Vec<AckItem> = jobs
            .iter()
            .map(|j| AckItem {
                id: j["id"].as_str().unwrap().to_owned(),
                ack: ack_body(j, embed(j["text"].as_str().unwrap()), model, true),
            })
            .collect();
        n += acks.len();
        let body = serde_json::to_value(AckBatchRequest { acks, worker: None }).unwrap();
        let r = api.post(Some(token), "/v1/jobs/ack", body).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert!(
            r.json["results"]
                .as_array()
                .unwrap()
                .iter()
                .all(|x| x["outcome"] == "done"),
            "{}",
            r.text
        );
    }
}

fn ack_body(job: &Value, vector: Vec<f32>, model: &str, cache: bool) -> AckRequest {
    let text = job["text"].as_str().unwrap();
    AckRequest {
        token: job["lease"]["token"].as_str().unwrap().to_owned(),
        worker: Some("w1".into()),
        result: JobResult {
            model_id: model.to_owned(),
            vector: Vector(vector),
            source: ResultSource::Engine,
            by: None,
        },
        cache: cache.then(|| AckCacheWrite {
            key: cache_key(model, text),
            fence: job["lease"]["fence"].as_u64().unwrap(),
            ttl_ms: None,
        }),
        timing: None,
    }
}

async fn ack(api: &Api, token: &str, job: &Value, body: &AckRequest) -> common::Resp {
    let id = job["id"].as_str().unwrap();
    api.post(
        Some(token),
        &format!("/v1/jobs/{id}/ack"),
        serde_json::to_value(body).unwrap(),
    )
    .await
}

fn texts(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{tag} text number {i}")).collect()
}

fn state_of(api_status: &common::Resp) -> String {
    api_status.json["state"].as_str().unwrap_or("").to_owned()
}

#[tokio::test]
async fn shape_checks_refuse_and_the_job_stays_leased() {
    let (_, api) = setup(Policy::default());
    enqueue(&api, &texts("shape", 1)).await;
    let job = claim_as(&api, WORKER, 1).await.remove(0);
    let text = job["text"].as_str().unwrap().to_owned();
    let m = model();
    let cases: Vec<(Vec<f32>, &str, &str)> = vec![
        (vec![0.6, 0.8, 0.0], &m, "bad_result"), // 3 components for an 8-dim model
        (vec![1e30; 8], &m, "bad_result"),       // finite but not a unit vector
        (embed(&text), "feedfacefeedface", "model_mismatch"), // another model than the job's
    ];
    for (v, model_id, code) in cases {
        let r = ack(&api, WORKER, &job, &ack_body(&job, v, model_id, true)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
        assert_eq!(r.json["error"]["code"], code, "{}", r.text);
    }
    let mut nan = ack_body(&job, embed(&text), &m, false);
    nan.result.vector.0[0] = f32::NAN;
    let r = ack(&api, WORKER, &job, &nan).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "not finite: {}", r.text);
    let big = ack_body(&job, vec![0.001; 350_000], "feedfacefeedface", false);
    let r = ack(&api, WORKER, &job, &big).await;
    assert!(r.status.is_client_error(), "{}", r.text);
    // Nothing was written, and the lease still holds for an honest retry.
    let r = api
        .get(Some(WORKER), &format!("/v1/cache/{}", cache_key(&m, &text)))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = ack(&api, WORKER, &job, &ack_body(&job, embed(&text), &m, true)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json["first"], true);
}

#[tokio::test]
async fn a_liar_on_probation_is_caught_on_its_first_result_and_nothing_is_served() {
    let (state, api) = setup(Policy::default());
    let ids = enqueue(&api, &texts("probation", 2)).await;
    let jobs = claim_as(&api, WORKER, 2).await;
    // Another text's true vector: unit norm, right dimension, finite.
    let other = embed("a different text altogether");
    let r = ack(
        &api,
        WORKER,
        &jobs[0],
        &ack_body(&jobs[0], other, &model(), true),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    assert_eq!(r.json["error"]["code"], "quarantined");
    // Nothing of it is visible: the job is not done, the cache holds nothing.
    let st = api.status(&ids[0]).await;
    assert_ne!(state_of(&st), "done", "{}", st.text);
    let key = cache_key(&model(), jobs[0]["text"].as_str().unwrap());
    let r = api.get(Some(WORKER_B64), &format!("/v1/cache/{key}")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    // Every further request of that identity is refused: claims, acks, heartbeats, PUTs.
    let honest = ack_body(
        &jobs[1],
        embed(jobs[1]["text"].as_str().unwrap()),
        &model(),
        true,
    );
    let refused = [
        api.post(
            Some(WORKER),
            "/v1/jobs/claim",
            json!({"worker": "w1", "max": 1}),
        )
        .await,
        ack(&api, WORKER, &jobs[1], &honest).await,
        api.post(
            Some(WORKER),
            &format!("/v1/jobs/{}/heartbeat", ids[1]),
            json!({"token": jobs[1]["lease"]["token"]}),
        )
        .await,
        api.put(Some(WORKER), &format!("/v1/cache/{key}"), json!({}))
            .await,
    ];
    for r in refused {
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
        assert_eq!(r.json["error"]["code"], "quarantined");
    }
    // Another identity works on; the admin sees the quarantine, with its reason, and lifts it.
    assert_eq!(
        claim_as(&api, WORKER_B64, 1).await.len(),
        0,
        "both jobs still leased"
    );
    let r = api.get(Some(ADMIN), "/v1/quarantine").await;
    assert_eq!(r.status, StatusCode::OK);
    let q = &r.json["quarantined"][0];
    assert!(
        q["sub"].as_str().unwrap().starts_with("static:"),
        "{}",
        r.text
    );
    assert!(
        q["reason"].as_str().unwrap().contains(&ids[0]),
        "{}",
        r.text
    );
    let alerts = state.metrics().counter_value("quarantines");
    assert_eq!(alerts, 1);
    let sub = q["sub"].as_str().unwrap().to_owned();
    assert_eq!(
        api.delete(Some(WORKER), &format!("/v1/quarantine/{sub}"))
            .await
            .status,
        StatusCode::FORBIDDEN,
        "workers cannot lift"
    );
    // A name with a newline never reaches the audit log.
    let r = api
        .delete(Some(ADMIN), "/v1/quarantine/a%0Aforged%20line")
        .await;
    assert_eq!(r.json["error"]["code"], "bad_id", "{}", r.text);
    let r = api
        .delete(Some(ADMIN), &format!("/v1/quarantine/{sub}"))
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let r = ack(&api, WORKER, &jobs[1], &honest).await;
    assert_eq!(r.status, StatusCode::OK, "lifted: {}", r.text);
}

/// A patient liar: honest for its whole probation, then lying on every result. Each lie is
/// sampled with probability p, so the lies it gets in before it is caught follow a geometric
/// law with mean 1/p (docs/security.md). Measured over many runs, each on a fresh server with
/// the virtual clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_liar_after_probation_is_caught_with_the_sampling_probability() {
    const K: usize = 3;
    for (p, runs) in [(0.25, 200usize), (0.05, 100)] {
        let mut lies_until_caught = Vec::with_capacity(runs);
        for run in 0..runs {
            let (state, api) = setup(policy(K as u64, p));
            let all = texts(&format!("patient {run}"), K + 400);
            enqueue(&api, &all).await;
            let mut lies = 0;
            for i in 0..all.len() {
                let jobs = claim_as(&api, WORKER, 1).await;
                let Some(job) = jobs.first() else {
                    panic!("run {run}: no job to claim at {i}")
                };
                let text = job["text"].as_str().unwrap();
                let v = if i < K {
                    embed(text)
                } else {
                    embed("the same lie every time")
                };
                let r = ack(&api, WORKER, job, &ack_body(job, v, &model(), true)).await;
                if r.status == StatusCode::FORBIDDEN {
                    assert!(i >= K, "run {run}: refused on probation at {i}: {}", r.text);
                    break;
                }
                assert_eq!(r.status, StatusCode::OK, "{}", r.text);
                if i >= K {
                    lies += 1;
                }
                state.verifier().settle().await;
                let st = api
                    .post(
                        Some(WORKER),
                        "/v1/jobs/claim",
                        json!({"worker": "w1", "max": 1}),
                    )
                    .await;
                if st.status == StatusCode::FORBIDDEN {
                    break;
                }
                // (that claim took a job: give it back)
                if let Some(j) = st.json["jobs"].as_array().and_then(|a| a.first()) {
                    let r = api
                        .post(
                            Some(WORKER),
                            &format!("/v1/jobs/{}/release", j["id"].as_str().unwrap()),
                            json!({"token": j["lease"]["token"]}),
                        )
                        .await;
                    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
                }
            }
            assert!(lies < 400, "run {run}: never caught");
            lies_until_caught.push(lies as f64);
        }
        let n = lies_until_caught.len() as f64;
        let mean = lies_until_caught.iter().sum::<f64>() / n;
        let expect = 1.0 / p;
        let se = ((1.0 - p) / (p * p)).sqrt() / n.sqrt();
        eprintln!("p = {p}: {runs} runs, lies before detection: mean {mean:.2} (1/p = {expect}, ±{se:.2})");
        assert!(
            (mean - expect).abs() < 4.0 * se,
            "p = {p}: mean lies before detection {mean:.2}, expected {expect} ± {:.2}",
            4.0 * se
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_requeues_results_deletes_cache_entries_and_tells_browsers() {
    // Probation of 2, then every result sampled: the liar is caught on its first lie.
    let store = Arc::new(MemoryStore::new());
    let (state, api) = setup_with(policy(2, 1.0), store.clone());
    let mut events = ternflow_server::EventBus::subscribe(store.as_ref());
    let all = texts("undo", 6);
    let ids = enqueue(&api, &all).await;
    // Honest for 5 results (2 on probation, 3 sampled and verified), with cache writes.
    for _ in 0..5 {
        let job = claim_as(&api, WORKER, 1).await.remove(0);
        let v = embed(job["text"].as_str().unwrap());
        let r = ack(&api, WORKER, &job, &ack_body(&job, v, &model(), true)).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        state.verifier().settle().await;
    }
    // The liar-to-be takes the sixth job; meanwhile a producer enqueues one of the first texts
    // again under another id, and the claim resolves it from the liar-to-be's cache entry.
    let job = claim_as(&api, WORKER, 1).await.remove(0);
    let r = api
        .enqueue(json!({"jobs": [{"id": "dup-1", "text": all[0]}]}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let resolved = claim_as(&api, WORKER_B64, 1).await.remove(0);
    assert_eq!(resolved["id"], "dup-1");
    assert_eq!(resolved["resolved"], true);
    // Then a lie, stored at once (not on probation) and found by the sampled check.
    let lie = embed("not this text");
    let r = ack(
        &api,
        WORKER,
        &job,
        &ack_body(&job, lie.clone(), &model(), true),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "stored before the check: {}",
        r.text
    );
    state.verifier().settle().await;
    // Quarantined; every result it wrote queued again, every cache entry gone.
    let r = api
        .post(
            Some(WORKER),
            "/v1/jobs/claim",
            json!({"worker": "w1", "max": 1}),
        )
        .await;
    assert_eq!(r.json["error"]["code"], "quarantined", "{}", r.text);
    for id in ids.iter().chain(std::iter::once(&"dup-1".to_owned())) {
        let st = api.status(id).await;
        assert_eq!(state_of(&st), "queued", "{id}: {}", st.text);
    }
    let mut invalidated = Vec::new();
    while let Ok((_, ev)) = events.try_recv() {
        if let ServerEvent::Invalidate(e) = ev {
            invalidated.extend(e.keys);
        }
    }
    for t in &all {
        let key = cache_key(&model(), t);
        let r = api.get(Some(WORKER_B64), &format!("/v1/cache/{key}")).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{key} still served");
        assert!(invalidated.contains(&key), "no invalidate event for {key}");
    }
    assert_eq!(state.metrics().counter_value("undone_results"), 7);
    assert_eq!(state.metrics().counter_value("undone_cache_entries"), 6);
    // An honest identity redoes them all; nothing poisoned is ever served again.
    let redone = drain(&api, WORKER_B64, &model(), embed).await;
    assert_eq!(redone, 7);
    for t in &all {
        let key = cache_key(&model(), t);
        let r = api.get(Some(ADMIN), &format!("/v1/cache/{key}")).await;
        let got: Vector = serde_json::from_value(r.json["vector"].clone()).unwrap();
        assert_eq!(got.0, embed(t), "{key}");
        assert!(
            r.json["by"]["sub"].as_str().unwrap() != "",
            "admins see the writer"
        );
    }
    assert_eq!(state.metrics().counter_value("quarantines"), 1);
}

/// k-of-n agreement for a model the server cannot run: a result is final when two identities
/// sent the same vector; the one that sent another is quarantined.
#[tokio::test]
async fn two_identities_must_agree_on_a_model_the_server_cannot_run() {
    let clock = FakeClock::new(1_000_000);
    let cfg = Config {
        verify: Policy {
            agreement: 2,
            ..Policy::default()
        },
        ..Config::default()
    };
    let state = AppState::new(Arc::new(MemoryStore::new()), tokens(), cfg)
        .with_clock(Arc::new(clock.clone()))
        .with_embedder(Arc::new(hash()));
    let api = Api(ternflow_server::app(state.clone()));
    let foreign = "feedfacefeedface";
    let r = api
        .enqueue(json!({"jobs": [{"id": "k1", "text": "agree on me", "model_id": foreign}]}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let honest = embed("agree on me"); // any unit vector: the server cannot check it
    let lie = embed("something else");
    let round = |token: &'static str, v: Vec<f32>| {
        let api = api.clone();
        let clock = clock.clone();
        async move {
            clock.advance(120_000); // past the retry backoff
            let job = claim_as(&api, token, 1).await.remove(0);
            let r = ack(&api, token, &job, &ack_body(&job, v, foreign, true)).await;
            (r.status, r.json)
        }
    };
    // The first result is not final: the job goes back to the queue.
    let (status, _) = round(WORKER, honest.clone()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(state_of(&api.status("k1").await), "queued");
    // A second identity disagrees: still not final.
    let (status, _) = round(WORKER_B64, lie).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(state_of(&api.status("k1").await), "queued");
    // A third agrees with the first: final, and the dissenter is quarantined.
    let (status, _) = round(ADMIN, honest.clone()).await;
    assert_eq!(status, StatusCode::OK);
    let st = api.get(Some(ADMIN), "/v1/jobs/k1").await;
    assert_eq!(state_of(&st), "done", "{}", st.text);
    let v: Vector = serde_json::from_value(st.json["result"]["vector"].clone()).unwrap();
    assert_eq!(v.0, honest);
    let q = api.get(Some(ADMIN), "/v1/quarantine").await;
    let subs: Vec<&str> = q.json["quarantined"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["sub"].as_str().unwrap())
        .collect();
    assert_eq!(subs.len(), 1, "{}", q.text);
    let r = api
        .post(
            Some(WORKER_B64),
            "/v1/jobs/claim",
            json!({"worker": "w", "max": 1}),
        )
        .await;
    assert_eq!(
        r.json["error"]["code"], "quarantined",
        "the dissenter: {}",
        r.text
    );
    assert_eq!(
        state.metrics().counter_value("results_pending_agreement"),
        2
    );
}

/// A worker that hands on a vector it took from the cache hands on its writer's work: the result
/// is recorded under the entry's writer, and taken back with the rest when that writer lies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relayed_cache_vector_belongs_to_the_entry_writer() {
    let (state, api) = setup(policy(0, 1.0));
    let r = api
        .enqueue(json!({"jobs": [{"id": "x1", "text": "shared"}, {"id": "x2", "text": "shared"}]}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let x1 = claim_as(&api, WORKER_B64, 1).await.remove(0);
    let x2 = claim_as(&api, WORKER, 1).await.remove(0);
    assert_eq!(
        (x1["id"].as_str(), x2["id"].as_str()),
        (Some("x1"), Some("x2"))
    );
    // WORKER embeds "shared" honestly and writes it through to the cache.
    let r = ack(
        &api,
        WORKER,
        &x2,
        &ack_body(&x2, embed("shared"), &model(), true),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    state.verifier().settle().await;
    // WORKER_B64 finds it in the cache and acks x1 with it.
    let mut relay = ack_body(&x1, embed("shared"), &model(), false);
    relay.result.source = ResultSource::Remote;
    let r = ack(&api, WORKER_B64, &x1, &relay).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let st = api.get(Some(ADMIN), "/v1/jobs/x1").await;
    let x2_by = api.get(Some(ADMIN), "/v1/jobs/x2").await.json["result"]["by"]["sub"].clone();
    assert_eq!(st.json["result"]["by"]["sub"], x2_by, "{}", st.text);
    // WORKER lies once; everything under its name goes back, x1 included.
    let r = api
        .enqueue(json!({"jobs": [{"id": "x3", "text": "third"}]}))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let x3 = claim_as(&api, WORKER, 1).await.remove(0);
    let r = ack(
        &api,
        WORKER,
        &x3,
        &ack_body(&x3, embed("a lie"), &model(), true),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    state.verifier().settle().await;
    for id in ["x1", "x2", "x3"] {
        assert_eq!(state_of(&api.status(id).await), "queued", "{id}");
    }
    // A vector said to come from the cache but not the entry's is the sender's own, checked.
    let again = claim_as(&api, WORKER_B64, 1).await.remove(0);
    let mut fake = ack_body(&again, embed("not it"), &model(), false);
    fake.result.source = ResultSource::Local;
    let r = ack(&api, WORKER_B64, &again, &fake).await;
    state.verifier().settle().await;
    let r2 = api
        .post(
            Some(WORKER_B64),
            "/v1/jobs/claim",
            json!({"worker": "w", "max": 1}),
        )
        .await;
    assert!(
        r.status == StatusCode::FORBIDDEN || r2.json["error"]["code"] == "quarantined",
        "a lie labelled as a cache hit is still a lie: {} / {}",
        r.text,
        r2.text
    );
}

/// One job acked twice in one batch: its own result (a lie) first, then the cache entry's vector
/// (a relay). Only the first ack of an id in a batch is taken, and it is checked as the
/// sender's own: the relay beside it does not make the lie the entry writer's, unchecked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_acked_twice_in_one_batch_is_taken_once_and_checked() {
    let (state, api) = setup(policy(100, 0.0));
    let r = api
        .enqueue(json!({"jobs": [{"id": "y1", "text": "shared"}, {"id": "y2", "text": "shared"}]}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let y1 = claim_as(&api, WORKER_B64, 1).await.remove(0);
    let y2 = claim_as(&api, WORKER, 1).await.remove(0);
    // WORKER embeds "shared" honestly and writes it through to the cache.
    let r = ack(
        &api,
        WORKER,
        &y2,
        &ack_body(&y2, embed("shared"), &model(), true),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    // WORKER_B64 (on probation) acks y1 with a lie, and again with the entry's vector.
    let lie = ack_body(&y1, embed("a lie"), &model(), false);
    let mut relay = ack_body(&y1, embed("shared"), &model(), false);
    relay.result.source = ResultSource::Remote;
    let acks = vec![
        AckItem {
            id: "y1".into(),
            ack: lie,
        },
        AckItem {
            id: "y1".into(),
            ack: relay,
        },
    ];
    let body = serde_json::to_value(AckBatchRequest { acks, worker: None }).unwrap();
    let r = api.post(Some(WORKER_B64), "/v1/jobs/ack", body).await;
    state.verifier().settle().await;
    let st = api.get(Some(ADMIN), "/v1/jobs/y1").await;
    // (Before the fix: "done", the lie stored as the cache entry writer's, "verified".)
    if let Ok(stored) = serde_json::from_value::<Vector>(st.json["result"]["vector"].clone()) {
        assert_ne!(
            stored.0,
            embed("a lie"),
            "the lie was stored: {} / {}",
            r.text,
            st.text
        );
    }
    assert_eq!(
        r.status,
        StatusCode::FORBIDDEN,
        "the first ack is the sender's own, checked on probation: {}",
        r.text
    );
    assert_eq!(
        state_of(&st),
        "leased",
        "nothing of the batch stored: {}",
        st.text
    );
    // An honest batch that names a job twice: the first ack is taken, the second refused.
    let r = api
        .enqueue(json!({"jobs": [{"id": "y3", "text": "third"}]}))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let y3 = claim_as(&api, WORKER, 1).await.remove(0);
    let honest = ack_body(&y3, embed("third"), &model(), false);
    let acks = vec![
        AckItem {
            id: "y3".into(),
            ack: honest.clone(),
        },
        AckItem {
            id: "y3".into(),
            ack: honest,
        },
    ];
    let body = serde_json::to_value(AckBatchRequest { acks, worker: None }).unwrap();
    let r = api.post(Some(WORKER), "/v1/jobs/ack", body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let out = r.json["results"].as_array().unwrap();
    assert_eq!(out[0]["outcome"], "done", "{}", r.text);
    assert_eq!(
        (out[1]["outcome"].as_str(), out[1]["error"]["code"].as_str()),
        (Some("refused"), Some("bad_body")),
        "{}",
        r.text
    );
}

/// A relay of a liar's cache entry that asks for a write-through does not re-sign the entry as
/// the relayer's (it would then outlive the liar's quarantine: relays are never sampled). The
/// relayer's lease is older than the entry (a job claimed after the entry existed is resolved by
/// the claim itself, with no ack), so its write-through is stale. Current-thread runtime: the
/// sampled check of the lie runs only when the test yields, after the relay.
#[tokio::test]
async fn relaying_a_cache_entry_does_not_launder_it() {
    let (state, api) = setup(policy(0, 1.0));
    let r = api
        .enqueue(json!({"jobs": [{"id": "z1", "text": "shared"}, {"id": "z2", "text": "shared"}]}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let z1 = claim_as(&api, WORKER_B64, 1).await.remove(0);
    let z2 = claim_as(&api, WORKER, 1).await.remove(0);
    // WORKER lies and writes the lie through to the cache (its check is sampled, later).
    let r = ack(
        &api,
        WORKER,
        &z2,
        &ack_body(&z2, embed("a lie"), &model(), true),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    // WORKER_B64 relays the entry for z1, asking for a write-through of it.
    let mut relay = ack_body(&z1, embed("a lie"), &model(), true);
    relay.result.source = ResultSource::Remote;
    let r = ack(&api, WORKER_B64, &z1, &relay).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let key = cache_key(&model(), "shared");
    let entry = api.get(Some(ADMIN), &format!("/v1/cache/{key}")).await;
    let liar = api.get(Some(ADMIN), "/v1/jobs/z2").await.json["result"]["by"]["sub"].clone();
    assert_eq!(
        entry.json["by"]["sub"], liar,
        "the entry is still its writer's: {}",
        entry.text
    );
    // The lie is found: the entry goes with its writer's quarantine, and so does the relay.
    state.verifier().settle().await;
    let gone = api.get(Some(ADMIN), &format!("/v1/cache/{key}")).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND, "{}", gone.text);
    assert_eq!(state_of(&api.status("z1").await), "queued");
}

#[tokio::test]
async fn provenance_is_recorded_and_shown_to_admins_only() {
    let (_, api) = setup(Policy::default());
    let ids = enqueue(&api, &texts("prov", 1)).await;
    let job = claim_as(&api, WORKER, 1).await.remove(0);
    let mut body = ack_body(&job, embed(job["text"].as_str().unwrap()), &model(), true);
    // Whatever a client claims as provenance is replaced by the server's.
    body.result.by = Some(ternflow_core::protocol::Provenance {
        tenant: "default".into(),
        sub: "someone-else".into(),
        worker: None,
        at: 1,
        verified: true,
    });
    body.worker = Some("bad\nname".into());
    assert_eq!(ack(&api, WORKER, &job, &body).await.status, StatusCode::OK);
    let admin = api.get(Some(ADMIN), &format!("/v1/jobs/{}", ids[0])).await;
    let by = &admin.json["result"]["by"];
    assert!(
        by["sub"].as_str().unwrap().starts_with("static:"),
        "{}",
        admin.text
    );
    assert_eq!(by["tenant"], "default");
    assert_eq!(by["verified"], true, "checked on probation");
    assert_eq!(by["at"], 1_000_000);
    assert!(
        by.get("worker").is_none(),
        "an unprintable name is not recorded"
    );
    for token in [WORKER, PRODUCER] {
        let r = api.get(Some(token), &format!("/v1/jobs/{}", ids[0])).await;
        assert_eq!(r.status, StatusCode::OK);
        assert!(r.json["result"].get("by").is_none(), "{}", r.text);
    }
    let key = cache_key(&model(), job["text"].as_str().unwrap());
    let r = api.get(Some(WORKER), &format!("/v1/cache/{key}")).await;
    assert!(r.json.get("by").is_none(), "{}", r.text);
    let r = api.get(Some(ADMIN), &format!("/v1/cache/{key}")).await;
    assert!(
        r.json["by"]["sub"].as_str().unwrap().starts_with("static:"),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn cache_writes_carry_their_text_and_are_checked() {
    let (_, api) = setup(Policy::default());
    let text = "a cached text";
    let key = cache_key(&model(), text);
    let fence = common::lock_fence(&api.0, &key).await;
    let put = |text: Option<&str>, v: Vec<f32>| {
        serde_json::to_value(CachePut {
            model_id: model(),
            vector: Vector(v),
            fence,
            ttl_ms: None,
            text: text.map(str::to_owned),
            worker: Some("w1".into()),
        })
        .unwrap()
    };
    let path = format!("/v1/cache/{key}");
    let r = api.put(Some(WORKER), &path, put(None, embed(text))).await;
    assert_eq!(r.json["error"]["code"], "text_required", "{}", r.text);
    let r = api
        .put(Some(WORKER), &path, put(Some("another text"), embed(text)))
        .await;
    assert_eq!(r.json["error"]["code"], "bad_result", "{}", r.text);
    let r = api
        .put(Some(WORKER), &path, put(Some(text), vec![0.5; 8]))
        .await;
    assert_eq!(
        r.json["error"]["code"], "bad_result",
        "not unit: {}",
        r.text
    );
    let r = api
        .put(Some(WORKER), &path, put(Some(text), embed(text)))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    // A lie in a fenced write, on probation: refused and quarantined.
    let key2 = cache_key(&model(), "second");
    let fence2 = common::lock_fence(&api.0, &key2).await;
    let lie = serde_json::to_value(CachePut {
        model_id: model(),
        vector: Vector(embed("not second")),
        fence: fence2,
        ttl_ms: None,
        text: Some("second".into()),
        worker: None,
    })
    .unwrap();
    let r = api
        .put(Some(WORKER), &format!("/v1/cache/{key2}"), lie)
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    // Its earlier, honest entry is gone too (every entry it wrote is undone).
    let r = api.get(Some(WORKER_B64), &path).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
}

/// The engine gives the same bits on every kernel, so an honest worker is never flagged
/// whatever kernel it runs: the server (its best native kernel) recomputes, on probation,
/// every result the worker computed with each kernel this machine has (scalar over `i8` rows,
/// AVX2 over row pairs), with the shipped model. The wasm kernel is held to the same bits by
/// `tests/node/engine.test.mjs` and by every browser and chaos test against a verifying server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_honest_worker_on_any_kernel_is_never_flagged() {
    use ternflow_engine::{Engine, Kernel};
    let bytes = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../models/ternlight-int4.bin"
    ))
    .unwrap();
    let server_engine = ternflow_server::EngineEmbedder::from_bytes(&bytes).unwrap();
    let model = server_engine.model_id();
    let cfg = Config {
        verify: policy(1_000, 1.0),
        ..Config::default()
    };
    let state = AppState::new(Arc::new(MemoryStore::new()), tokens(), cfg)
        .with_clock(Arc::new(FakeClock::new(1_000_000)))
        .with_embedder(Arc::new(server_engine));
    let api = Api(ternflow_server::app(state.clone()));
    let corpus = include_str!("../../engine/tests/data/determinism_corpus.txt");
    let texts: Vec<String> = corpus
        .lines()
        .step_by(12) // short, long (past the token window) and non-ASCII texts alike
        .map(str::to_owned)
        .collect();
    let mut worker = Engine::from_bytes(&bytes).unwrap();
    let kernels = Kernel::available();
    let mut n = 0;
    for (round, &k) in kernels.iter().enumerate() {
        worker.set_kernel(k);
        let tagged: Vec<String> = texts.iter().map(|t| format!("{t} ({round})")).collect();
        enqueue(&api, &tagged).await;
        n += drain(&api, WORKER, &model, |t| worker.embed(t)).await;
    }
    assert_eq!(n, texts.len() * kernels.len());
    assert!(
        kernels.len() >= 2 || !cfg!(target_arch = "x86_64"),
        "{kernels:?}"
    );
    assert_eq!(state.metrics().counter_value("results_verified"), n as u64);
    assert_eq!(state.metrics().counter_value("quarantines"), 0);
}
