//! HTTP behaviour through `app(state)` with `oneshot`: auth, queue semantics with a fake clock,
//! cache fences, locks, limits, embed, CORS, metrics.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use common::{call, call_raw, lock_fence, state_with, Api, ADMIN, PRODUCER, WORKER};
use serde_json::{json, Value};
use ternflow_core::codec::encode_vector;
use ternflow_server::{app, AppState, Config, Embedder, MemoryStore};

/// One unit vector of the hash embedder's 8 dimensions for every job: these tests are about
/// the queue, so `state_with` turns recomputation off (tests/integrity.rs covers it); the
/// shape checks still apply.
fn vector() -> String {
    encode_vector(&[0.5, 0.5, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0])
}

fn ack_body(token: &str) -> Value {
    json!({"token": token, "result": {"model_id": "00000000deadbeef", "vector": vector(), "source": "engine"}})
}

fn error_code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("<no error body>")
}

#[tokio::test]
async fn auth_and_roles() {
    let (state, _) = state_with(Config::default());
    let app = app(state);
    let api = Api(app.clone());
    let r = api.post(None, "/v1/jobs", json!({"text": "x"})).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(error_code(&r.json), "unauthorized");
    let r = api
        .post(Some("bogus"), "/v1/jobs", json!({"text": "x"}))
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = api
        .post(Some(WORKER), "/v1/jobs", json!({"text": "x"}))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(error_code(&r.json), "forbidden");
    let claim = json!({"worker": "w"});
    let r = api
        .post(Some(PRODUCER), "/v1/jobs/claim", claim.clone())
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = api.get(Some(WORKER), "/v1/dlq").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = api.get(Some(PRODUCER), "/metrics").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // Admin passes every gate.
    let r = api.post(Some(ADMIN), "/v1/jobs/claim", claim).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = api.get(Some(ADMIN), "/v1/dlq").await;
    assert_eq!(r.status, StatusCode::OK);
    // `?token=` only on /v1/events.
    let r = api.get(None, &format!("/v1/dlq?token={ADMIN}")).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    // Public routes.
    let r = api.get(None, "/openapi.json").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json["openapi"], "3.0.3");
    let r = call(&app, "PATCH", "/v1/jobs", Some(ADMIN), None).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(error_code(&r.json), "method_not_allowed");
    let r = api.get(Some(ADMIN), "/nope").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(error_code(&r.json), "not_found");
}

#[tokio::test]
async fn enqueue_dedups_and_done_stays_done() {
    let (state, _) = state_with(Config::default());
    let app = app(state);
    let api = Api(app.clone());
    let batch =
        json!({"jobs": [{"text": "a"}, {"text": "b"}, {"text": "a"}, {"id": "x1", "text": "a"}]});
    let r = api.enqueue(batch).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let news: Vec<bool> = r.json["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["new"].as_bool().unwrap())
        .collect();
    assert_eq!(news, [true, true, false, true]);
    let id_a = r.json["jobs"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(id_a, ternflow_core::keys::job_id("00000000deadbeef", "a"));
    let r = api
        .post(
            Some(WORKER),
            "/v1/jobs/claim",
            json!({"worker": "w", "max": 10}),
        )
        .await;
    let jobs = r.json["jobs"].as_array().unwrap().clone();
    assert_eq!(jobs.len(), 3);
    for j in &jobs {
        assert_eq!(j["model_id"], "00000000deadbeef");
        let tp = j["traceparent"].as_str().unwrap();
        assert!(tp.starts_with("00-") && tp.len() == 55, "{tp}");
        let id = j["id"].as_str().unwrap();
        let tok = j["lease"]["token"].as_str().unwrap();
        let r = api
            .post(Some(WORKER), &format!("/v1/jobs/{id}/ack"), ack_body(tok))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    }
    let r = api.enqueue(json!({"text": "a"})).await;
    assert_eq!(r.json["jobs"][0]["new"], false);
    let r = api.get(Some(PRODUCER), &format!("/v1/jobs/{id_a}")).await;
    assert_eq!(r.json["state"], "done");
    assert_eq!(r.json["result"]["vector"], vector());
    let r = api.get(Some(PRODUCER), "/v1/jobs/unknown").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn lease_expiry_redelivery_and_stale_tokens() {
    let (state, clock) = state_with(Config {
        lease_ms: 10_000,
        ..Config::default()
    });
    let app = app(state);
    let api = Api(app.clone());
    api.enqueue(json!({"id": "j", "text": "t"})).await;
    let claim = |w: &str| json!({"worker": w});
    let r = api.post(Some(WORKER), "/v1/jobs/claim", claim("w1")).await;
    let first = r.json["jobs"][0].clone();
    let tok1 = first["lease"]["token"].as_str().unwrap().to_owned();
    assert_eq!(first["attempt"], 1);
    // Heartbeat extends.
    clock.advance(9_000);
    let r = api
        .post(Some(WORKER), "/v1/jobs/j/heartbeat", json!({"token": tok1}))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json["lease"]["expires_at"], 1_000_000 + 9_000 + 10_000);
    clock.advance(9_000);
    let r = api.post(Some(WORKER), "/v1/jobs/claim", claim("w2")).await;
    assert_eq!(r.json["jobs"].as_array().unwrap().len(), 0, "still leased");
    // Expired: re-delivered to w2 with a new token and fence.
    clock.advance(1_001);
    let r = api.post(Some(WORKER), "/v1/jobs/claim", claim("w2")).await;
    let second = r.json["jobs"][0].clone();
    assert_eq!(second["attempt"], 2);
    assert!(second["lease"]["fence"].as_u64() > first["lease"]["fence"].as_u64());
    // The first holder lost it.
    let r = api
        .post(Some(WORKER), "/v1/jobs/j/heartbeat", json!({"token": tok1}))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(error_code(&r.json), "lease_lost");
    let r = api
        .post(Some(WORKER), "/v1/jobs/j/ack", ack_body(&tok1))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    let tok2 = second["lease"]["token"].as_str().unwrap();
    let r = api
        .post(Some(WORKER), "/v1/jobs/j/ack", ack_body(tok2))
        .await;
    assert_eq!(
        (r.status, r.json["first"].clone()),
        (StatusCode::OK, json!(true))
    );
    let r = api
        .post(Some(WORKER), "/v1/jobs/j/ack", ack_body(tok2))
        .await;
    assert_eq!(
        (r.status, r.json["first"].clone()),
        (StatusCode::OK, json!(false)),
        "idempotent"
    );
    let r = api
        .post(
            Some(WORKER),
            "/v1/jobs/nope/heartbeat",
            json!({"token": "t"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn nack_backoff_dead_letter_and_redrive() {
    let (state, clock) = state_with(Config {
        max_attempts: 2,
        ..Config::default()
    });
    let app = app(state);
    let api = Api(app.clone());
    api.enqueue(json!({"id": "j", "text": "t", "meta": {"k": 1}}))
        .await;
    let claim = json!({"worker": "w"});
    let nack =
        |tok: &str| json!({"token": tok, "error": {"code": "engine_failed", "message": "boom"}});
    let r = api
        .post(Some(WORKER), "/v1/jobs/claim", claim.clone())
        .await;
    let tok = r.json["jobs"][0]["lease"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = api.post(Some(WORKER), "/v1/jobs/j/nack", nack(&tok)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json["outcome"], "retry");
    let at = r.json["available_at"].as_u64().unwrap();
    assert!(
        (1_000_500..=1_001_000).contains(&at),
        "first backoff 0.5–1 s, got {at}"
    );
    let r = api
        .post(Some(WORKER), "/v1/jobs/claim", claim.clone())
        .await;
    assert!(
        r.json["jobs"].as_array().unwrap().is_empty(),
        "not during the backoff"
    );
    clock.advance(1_000);
    let r = api
        .post(Some(WORKER), "/v1/jobs/claim", claim.clone())
        .await;
    assert_eq!(r.json["jobs"][0]["attempt"], 2);
    let tok = r.json["jobs"][0]["lease"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = api.post(Some(WORKER), "/v1/jobs/j/nack", nack(&tok)).await;
    assert_eq!(r.json["outcome"], "dead");
    let r = api.post(Some(WORKER), "/v1/jobs/j/nack", nack(&tok)).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    let r = api.get(Some(ADMIN), "/v1/dlq").await;
    let e = &r.json["entries"][0];
    assert_eq!(e["job"]["id"], "j");
    assert_eq!(e["job"]["meta"], json!({"k": 1}));
    assert_eq!(e["error"]["code"], "engine_failed");
    assert_eq!(e["history"].as_array().unwrap().len(), 2);
    let r = api.get(Some(WORKER), "/v1/jobs/j").await;
    assert_eq!(r.json["state"], "dead");
    let r = api.post_empty(Some(ADMIN), "/v1/dlq/j/redrive").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json["state"], "queued");
    let r = api.post_empty(Some(ADMIN), "/v1/dlq/j/redrive").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = api.post(Some(WORKER), "/v1/jobs/claim", claim).await;
    assert_eq!(r.json["jobs"][0]["attempt"], 1);
}

#[tokio::test]
async fn cache_fences_and_invalidation() {
    let (state, clock) = state_with(Config::default());
    let app = app(state);
    let api = Api(app.clone());
    let model = "00000000deadbeef";
    let key = ternflow_core::keys::cache_key(model, "some text");
    let key = key.as_str();
    let put = |fence: u64| json!({"model_id": model, "vector": vector(), "fence": fence, "ttl_ms": 10_000});
    let r = api.get(Some(WORKER), &format!("/v1/cache/{key}")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    // A fence the server never issued for this key (here the largest u64) is refused, so it
    // cannot lock honest writers out for the entry's TTL.
    let r = api
        .put(Some(WORKER), &format!("/v1/cache/{key}"), put(u64::MAX))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert_eq!(error_code(&r.json), "bad_fence");
    let lock = lock_fence(&app, key).await;
    let r = api
        .put(Some(WORKER), &format!("/v1/cache/{key}"), put(lock))
        .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "the honest holder after the forgery: {}",
        r.text
    );
    let exp = r.json["expires_at"].as_u64().unwrap();
    assert!(
        (1_009_000..=1_011_000).contains(&exp),
        "ttl ± 10 % jitter: {exp}"
    );
    // A claimed job whose text the cache holds is finished by the claim itself...
    api.enqueue(json!({"jobs": [{"id": "hit", "text": "some text", "model_id": model}]}))
        .await;
    let job = &api.claim(1).await[0];
    assert_eq!(
        (job["resolved"].clone(), job["cached"]["fence"].clone()),
        (json!(true), json!(lock)),
        "{job}"
    );
    let r = api.get(Some(WORKER), "/v1/jobs/hit").await;
    assert_eq!(
        (r.json["state"].clone(), r.json["result"]["source"].clone()),
        (json!("done"), json!("remote")),
        "{}",
        r.text
    );
    // ...and an ack sent anyway (a worker that predates `resolved`) is a harmless repeat.
    let tok = job["lease"]["token"].as_str().unwrap();
    let r = api
        .post(Some(WORKER), "/v1/jobs/hit/ack", ack_body(tok))
        .await;
    assert_eq!(
        (r.status, r.json["first"].clone()),
        (StatusCode::OK, json!(false))
    );
    let r = api.get(Some(ADMIN), "/metrics").await;
    assert!(
        r.text.contains("ternflow_jobs_resolved_at_claim_total 1\n"),
        "{}",
        r.text
    );
    // Once the entry is gone (invalidated), a job lease on the same text (a newer fence)
    // writes through its ack...
    let r = api.delete(Some(ADMIN), &format!("/v1/cache/{key}")).await;
    assert!(r.status.is_success(), "{}", r.text);
    api.enqueue(json!({"jobs": [{"id": "j", "text": "some text", "model_id": model}]}))
        .await;
    let job = &api.claim(1).await[0];
    assert_eq!(job["resolved"], Value::Null, "{job}");
    let lease = job["lease"].clone();
    let newer = lease["fence"].as_u64().unwrap();
    assert!(newer > lock);
    let mut body = ack_body(lease["token"].as_str().unwrap());
    body["cache"] = json!({"key": key, "fence": 0, "ttl_ms": 10_000});
    let r = api.post(Some(WORKER), "/v1/jobs/j/ack", body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    // ...so the lock holder, still live, now holds an older fence.
    let r = api
        .put(Some(WORKER), &format!("/v1/cache/{key}"), put(lock))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(error_code(&r.json), "stale_fence");
    assert_eq!(
        r.json["entry"]["fence"], newer,
        "the body carries the stored entry, fenced with the lease's fence (not the body's 0)"
    );
    let r = api.get(Some(WORKER), &format!("/v1/cache/{key}")).await;
    assert_eq!(
        (r.status, r.json["fence"].clone()),
        (StatusCode::OK, json!(newer))
    );
    let bad = json!({"model_id": "ffffffffffffffff", "vector": vector(), "fence": lock});
    let r = api
        .put(Some(WORKER), &format!("/v1/cache/{key}"), bad)
        .await;
    assert_eq!(error_code(&r.json), "model_mismatch");
    let r = api.put(Some(WORKER), "/v1/cache/bad%20key", put(1)).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    clock.advance(40_000);
    let r = api.get(Some(WORKER), &format!("/v1/cache/{key}")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "expired");
    let fresh = lock_fence(&app, key).await;
    let r = api
        .put(Some(WORKER), &format!("/v1/cache/{key}"), put(fresh))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let r = api.delete(Some(WORKER), &format!("/v1/cache/{key}")).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = api.delete(Some(WORKER), &format!("/v1/cache/{key}")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn lock_contention_and_compare_and_delete() {
    let (state, clock) = state_with(Config::default());
    let app = app(state);
    let api = Api(app.clone());
    let r = api
        .post(Some(WORKER), "/v1/locks/k1", json!({"ttl_ms": 5_000}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let g1 = r.json.clone();
    let r = call_raw(&app, "POST", "/v1/locks/k1", Some(WORKER), None, Vec::new()).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(error_code(&r.json), "lock_held");
    assert_eq!(r.headers["retry-after"], "5");
    let tok1 = g1["token"].as_str().unwrap();
    let r = api
        .post(
            Some(WORKER),
            "/v1/locks/k1/renew",
            json!({"token": tok1, "ttl_ms": 8_000}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json["fence"], g1["fence"]);
    let r = api
        .delete_with(Some(WORKER), "/v1/locks/k1", json!({"token": "nope"}))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "compare-and-delete");
    let r = api
        .delete_with(Some(WORKER), "/v1/locks/k1", json!({"token": tok1}))
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = api.post_empty(Some(WORKER), "/v1/locks/k1").await;
    assert!(r.json["fence"].as_u64() > g1["fence"].as_u64());
    // Let it leak: expire without release.
    clock.advance(60_000);
    let r = api.get(Some(ADMIN), "/metrics").await;
    assert!(
        r.text.contains("ternflow_lock_leaked_total 1\n"),
        "{}",
        r.text
    );
    assert!(r.text.contains("ternflow_locks_held 0\n"));
}

#[tokio::test]
async fn limits_and_malformed_bodies() {
    let (state, _) = state_with(Config {
        max_body_bytes: 4_096,
        max_text_bytes: 100,
        ..Config::default()
    });
    let app = app(state);
    let api = Api(app.clone());
    let big = json!({"text": "x".repeat(10_000)});
    let r = api.enqueue(big).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error_code(&r.json), "too_large");
    let long = json!({"text": "x".repeat(200)});
    let r = api.enqueue(long).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error_code(&r.json), "text_too_long");
    let r = call_raw(
        &app,
        "POST",
        "/v1/jobs",
        Some(PRODUCER),
        Some("application/json"),
        b"{nope".to_vec(),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&r.json), "bad_json");
    let r = call_raw(
        &app,
        "POST",
        "/v1/jobs",
        Some(PRODUCER),
        None,
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&r.json), "bad_content_type");
    let r = api.enqueue(json!({"jobs": []})).await;
    assert_eq!(error_code(&r.json), "empty_batch");
    let r = api.enqueue(json!({"text": "x", "priority": 5000})).await;
    assert_eq!(error_code(&r.json), "bad_priority");
    let r = api
        .post(
            Some(WORKER),
            "/v1/jobs/claim",
            json!({"worker": "w", "max": 0}),
        )
        .await;
    assert_eq!(error_code(&r.json), "bad_max");
    let bad_vec =
        json!({"token": "t", "result": {"model_id": "m", "vector": "!!", "source": "engine"}});
    let r = api.post(Some(WORKER), "/v1/jobs/j/ack", bad_vec).await;
    assert_eq!(error_code(&r.json), "bad_json");
    let r = api
        .post(
            Some(WORKER),
            "/v1/embed",
            json!({"texts": ["x".repeat(200)]}),
        )
        .await;
    assert_eq!(error_code(&r.json), "text_too_long");
}

#[tokio::test]
async fn embed_batches_and_reports_model() {
    let (state, _) = state_with(Config::default());
    let app = app(state);
    let api = Api(app.clone());
    let r = api
        .post(Some(WORKER), "/v1/embed", json!({"texts": ["a", "b", "a"]}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json["model_id"], "00000000deadbeef");
    let v = r.json["vectors"].as_array().unwrap();
    assert_eq!(v.len(), 3);
    assert_eq!(v[0], v[2]);
    assert_ne!(v[0], v[1]);
    let decoded = ternflow_core::codec::decode_vector(v[0].as_str().unwrap()).unwrap();
    let norm: f32 = decoded.iter().map(|x| x * x).sum();
    assert!((norm - 1.0).abs() < 1e-4);
    let r = api
        .post(Some(WORKER), "/v1/embed", json!({"texts": []}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

#[derive(Debug)]
struct SlowEmbedder;

impl Embedder for SlowEmbedder {
    fn model_id(&self) -> String {
        "5105105105105105".to_owned()
    }
    fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        std::thread::sleep(Duration::from_millis(300));
        Ok(texts.iter().map(|_| vec![1.0]).collect())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embed_queue_full_is_429_with_retry_after() {
    let state = AppState::new(
        Arc::new(MemoryStore::new()),
        common::tokens(),
        Config {
            embed_queue: 1,
            embed_batch: 1,
            ..Config::default()
        },
    )
    .with_embedder(Arc::new(SlowEmbedder));
    let app = app(state);
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let app = app.clone();
        let api = Api(app.clone());
        tasks.push(tokio::spawn(async move {
            api.post(Some(WORKER), "/v1/embed", json!({"texts": ["x"]}))
                .await
        }));
    }
    let mut ok = 0;
    let mut limited = 0;
    for t in tasks {
        let r = t.await.unwrap();
        match r.status {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                assert!(r.headers.contains_key("retry-after"));
                limited += 1;
            }
            s => panic!("unexpected {s}"),
        }
    }
    assert!(ok >= 1 && limited >= 1, "ok {ok}, limited {limited}");
}

#[tokio::test]
async fn no_model_is_503() {
    let state = AppState::new(
        Arc::new(MemoryStore::new()),
        common::tokens(),
        Config::default(),
    );
    let r = call(
        &app(state),
        "POST",
        "/v1/embed",
        Some(WORKER),
        Some(json!({"texts": ["x"]})),
    )
    .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.headers.contains_key("retry-after"));
}

#[tokio::test]
async fn long_poll_claim_is_woken_by_enqueue() {
    let state = AppState::new(
        Arc::new(MemoryStore::new()),
        common::tokens(),
        Config::default(),
    );
    let app = app(state);
    let api = Api(app.clone());
    let a = app.clone();
    let started = std::time::Instant::now();
    let waiter = tokio::spawn(async move {
        call(
            &a,
            "POST",
            "/v1/jobs/claim",
            Some(WORKER),
            Some(json!({"worker": "w", "wait_ms": 10_000})),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    api.enqueue(json!({"text": "wake"})).await;
    let r = waiter.await.unwrap();
    assert_eq!(r.json["jobs"][0]["text"], "wake");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "woken, not timed out"
    );
    // An empty queue answers after wait_ms.
    let started = std::time::Instant::now();
    let r = api
        .post(
            Some(WORKER),
            "/v1/jobs/claim",
            json!({"worker": "w", "wait_ms": 300}),
        )
        .await;
    assert!(r.json["jobs"].as_array().unwrap().is_empty());
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn cors_allow_list_and_corp() {
    let (state, _) = state_with(Config {
        cors_origins: vec!["https://app.example".to_owned()],
        cors_allow_localhost: true,
        ..Config::default()
    });
    let app = app(state);
    let api = Api(app.clone());
    for (origin, allowed) in [
        ("https://app.example", true),
        ("http://127.0.0.1:43817", true),
        ("https://evil.example", false),
    ] {
        let req = axum::http::Request::builder()
            .method("OPTIONS")
            .uri("/v1/jobs/claim")
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type",
            )
            .body(axum::body::Body::empty())
            .unwrap();
        let resp = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap();
        let acao = resp.headers().get("access-control-allow-origin");
        assert_eq!(acao.is_some(), allowed, "{origin}");
        if allowed {
            assert_eq!(acao.unwrap(), origin);
        }
    }
    let r = api.get(Some(ADMIN), "/v1/stats").await;
    assert_eq!(r.headers["cross-origin-resource-policy"], "cross-origin");
    let r = api.get(None, "/v1/stats").await;
    assert_eq!(
        r.headers["cross-origin-resource-policy"], "cross-origin",
        "errors too"
    );
}

#[tokio::test]
async fn metrics_stats_and_worker_snapshots() {
    let (state, _) = state_with(Config::default());
    let app = app(state);
    let api = Api(app.clone());
    api.enqueue(json!({"text": "a"})).await;
    let snap = json!({"worker": "w1", "counters": {"jobs_done": 3, "cache_hits_local": 2}, "gauges": {"in_flight": 1.0}});
    let r = api.post(Some(WORKER), "/v1/metrics", snap).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let r = api.get(Some(ADMIN), "/v1/stats").await;
    assert_eq!(r.json["queue"]["ready"], 1);
    assert_eq!(r.json["counters"]["jobs_enqueued"], 1);
    assert_eq!(r.json["workers"]["w1"]["counters"]["jobs_done"], 3);
    let r = api.get(Some(ADMIN), "/metrics").await;
    assert_eq!(
        r.headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    for needle in [
        "ternflow_queue_ready 1\n",
        "ternflow_jobs_in_flight 0\n",
        "ternflow_jobs_enqueued_total 1\n",
        "ternflow_embed_latency_seconds_count",
        "ternflow_worker_events_total{tenant=\"default\",worker=\"w1\",name=\"jobs_done\"} 3\n",
        "ternflow_worker_reading{tenant=\"default\",worker=\"w1\",name=\"in_flight\"} 1\n",
    ] {
        assert!(r.text.contains(needle), "missing {needle:?}");
    }
}

#[test]
fn openapi_error_codes_are_the_closed_set() {
    let doc: Value = serde_json::from_str(include_str!("../openapi.json")).unwrap();
    let listed: Vec<&str> = doc["components"]["schemas"]["ErrorBody"]["properties"]["error"]
        ["properties"]["code"]["enum"]
        .as_array()
        .expect("ErrorBody.error.code lists its values")
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let all: Vec<&str> = ternflow_core::ErrorCode::ALL
        .iter()
        .map(|c| c.as_str())
        .collect();
    assert_eq!(
        listed, all,
        "openapi.json's error codes vs ErrorCode, in order"
    );
}

#[tokio::test]
async fn openapi_lists_exactly_the_routes_served() {
    let (state, _) = state_with(Config {
        max_wait_ms: 0,
        ..Config::default()
    });
    let app = app(state);
    let doc: Value = serde_json::from_str(include_str!("../openapi.json")).unwrap();
    let mut served = 0;
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            if path == "/v1/events" {
                continue; // a stream; covered by tests/sse_and_shutdown.rs
            }
            let uri = path
                .replace("{id}", "x")
                .replace("{key}", "m:x")
                .replace("{sub}", "s");
            let r = call(
                &app,
                &method.to_uppercase(),
                &uri,
                Some(ADMIN),
                Some(json!({})),
            )
            .await;
            assert_ne!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            assert_ne!(
                r.json["error"]["message"], "no such route",
                "{method} {path}"
            );
            served += 1;
        }
    }
    // 34 operations in the router (routes/mod.rs; `/dashboard/` only redirects), the SSE route
    // checked elsewhere.
    assert_eq!(
        served, 33,
        "the document lists every operation the router serves"
    );
}

#[tokio::test]
async fn embed_with_the_real_engine() {
    use ternflow_engine::{testing, EmbeddingFormat, Engine};
    let file = testing::generate(&testing::tiny_config(EmbeddingFormat::Int4), 7);
    let mut reference = Engine::from_bytes(&file).unwrap();
    let embedder = ternflow_server::EngineEmbedder::from_bytes(&file).unwrap();
    let model_id = embedder.model_id();
    assert_eq!(model_id, reference.model_id());
    let state = AppState::new(
        Arc::new(MemoryStore::new()),
        common::tokens(),
        Config::default(),
    )
    .with_embedder(Arc::new(embedder));
    let app = app(state);
    let api = Api(app.clone());
    let r = api
        .post(
            Some(WORKER),
            "/v1/embed",
            json!({"texts": ["Hello, world!", "ternary weights"]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json["model_id"], model_id.as_str());
    for (i, text) in ["Hello, world!", "ternary weights"].iter().enumerate() {
        let got =
            ternflow_core::codec::decode_vector(r.json["vectors"][i].as_str().unwrap()).unwrap();
        assert_eq!(got, reference.embed(text), "{text}");
    }
    // Jobs without a model_id get the server's, and their ids hash it.
    let r = api.enqueue(json!({"text": "x"})).await;
    assert_eq!(
        r.json["jobs"][0]["id"],
        ternflow_core::keys::job_id(&model_id, "x")
    );
}

#[tokio::test]
async fn model_file_is_served_with_its_id() {
    use ternflow_engine::{testing, EmbeddingFormat};
    let (state, _) = state_with(Config::default());
    let app_without = app(state);
    let r = call(&app_without, "GET", "/v1/model", None, None).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json["error"]["code"], "not_found");

    let file = testing::generate(&testing::tiny_config(EmbeddingFormat::Int8), 3);
    let embedder = ternflow_server::EngineEmbedder::from_bytes(&file).unwrap();
    let model_id = embedder.model_id();
    let state = AppState::new(
        Arc::new(MemoryStore::new()),
        common::tokens(),
        Config::default(),
    )
    .with_embedder(Arc::new(embedder))
    .with_model_file(file.clone());
    let app = app(state);
    let api = Api(app.clone());
    let r = api.get(None, "/v1/model").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers["x-ternflow-model-id"], model_id.as_str());
    let etag = r.headers["etag"].to_str().unwrap().to_owned();
    assert_eq!(etag, format!("\"{model_id}\""));
    assert_eq!(r.bytes.len(), file.len());
    assert!(r.bytes == file, "the exact file");

    let req = axum::http::Request::builder()
        .uri("/v1/model")
        .header("if-none-match", etag)
        .body(axum::body::Body::empty())
        .unwrap();
    let resp = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_MODIFIED);
}

#[tokio::test]
async fn ack_can_carry_the_cache_write_through() {
    let (state, _) = state_with(Config::default());
    let app = app(state);
    let api = Api(app.clone());
    let r = api.enqueue(json!({"jobs": [{"id": "a", "text": "x", "model_id": "00000000deadbeef"}, {"id": "b", "text": "y", "model_id": "00000000deadbeef"}]}))
    .await;
    assert_eq!(r.json["jobs"].as_array().unwrap().len(), 2);
    let r = api
        .post(
            Some(WORKER),
            "/v1/jobs/claim",
            json!({"worker": "w", "max": 2}),
        )
        .await;
    let jobs = r.json["jobs"].as_array().unwrap().clone();
    let lease = |id: &str| {
        let j = jobs.iter().find(|j| j["id"] == id).unwrap();
        (
            j["lease"]["token"].as_str().unwrap().to_owned(),
            j["lease"]["fence"].as_u64().unwrap(),
        )
    };

    // A write for another key than the job's text (here another model's) is dropped, and the
    // job is still done: a write-through never fails the ack.
    let (tok_b, fence_b) = lease("b");
    let mut bad = ack_body(&tok_b);
    bad["cache"] = json!({"key": "other:k", "fence": fence_b});
    let r = api.post(Some(WORKER), "/v1/jobs/b/ack", bad).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = api.get(Some(WORKER), "/v1/jobs/b").await;
    assert_eq!(r.json["state"], "done");
    let r = api.get(Some(WORKER), "/v1/cache/other:k").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    // A good one stores the result under the text's key with the lease's fence from the store,
    // whatever fence the body names.
    let (tok_a, fence_a) = lease("a");
    let ka = ternflow_core::keys::cache_key("00000000deadbeef", "x");
    let mut body = ack_body(&tok_a);
    body["cache"] = json!({"key": ka, "fence": u64::MAX, "ttl_ms": 60000});
    let r = api.post(Some(WORKER), "/v1/jobs/a/ack", body).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = api.get(Some(WORKER), &format!("/v1/cache/{ka}")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json["fence"], fence_a);
    assert_eq!(r.json["vector"], vector());
    assert_eq!(r.json["model_id"], "00000000deadbeef");
}

#[tokio::test]
async fn claims_carry_the_cache_entry_of_the_text() {
    let (state, _) = state_with(Config::default());
    let app = app(state);
    let api = Api(app.clone());
    let model = "00000000deadbeef";
    let key = ternflow_core::keys::cache_key(model, "cached text");
    let fence = lock_fence(&app, &key).await;
    let r = api
        .put(
            Some(WORKER),
            &format!("/v1/cache/{key}"),
            json!({"model_id": model, "vector": vector(), "fence": fence}),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.json);
    api.enqueue(json!({"jobs": [{"text": "cached text", "model_id": model}, {"text": "fresh text", "model_id": model}]}))
    .await;
    let r = api
        .post(
            Some(WORKER),
            "/v1/jobs/claim",
            json!({"worker": "w", "max": 2}),
        )
        .await;
    let jobs = r.json["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2);
    for j in jobs {
        assert_eq!(j["cache_checked"], true);
        if j["text"] == "cached text" {
            assert_eq!(j["cached"]["fence"], fence);
            assert_eq!(j["cached"]["vector"], vector());
        } else {
            assert!(j.get("cached").is_none(), "{j}");
        }
    }
}

#[tokio::test]
async fn jobs_get_their_own_trace_unless_the_producer_sends_one() {
    let (state, _) = state_with(Config::default());
    let app = app(state);
    let api = Api(app.clone());
    api.enqueue(json!({"jobs": [{"text": "t1"}, {"text": "t2"}]}))
        .await;
    let req = axum::http::Request::builder()
        .method("POST")
        .uri("/v1/jobs")
        .header("authorization", format!("Bearer {PRODUCER}"))
        .header("content-type", "application/json")
        .header(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
        .body(axum::body::Body::from(
            json!({"jobs": [{"text": "t3"}, {"text": "t4"}]}).to_string(),
        ))
        .unwrap();
    let resp = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap();
    assert!(resp.status().is_success());
    let r = api
        .post(
            Some(WORKER),
            "/v1/jobs/claim",
            json!({"worker": "w", "max": 4}),
        )
        .await;
    let trace = |text: &str| {
        let j = r.json["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["text"] == text)
            .unwrap()
            .clone();
        j["traceparent"]
            .as_str()
            .unwrap()
            .split('-')
            .nth(1)
            .unwrap()
            .to_owned()
    };
    assert_ne!(trace("t1"), trace("t2"), "a trace per job");
    assert_eq!(trace("t3"), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(trace("t4"), "4bf92f3577b34da6a3ce929d0e0e4736");
}

#[tokio::test]
async fn every_rejection_is_a_json_error_body() {
    let (state, _) = state_with(Config {
        max_body_bytes: 1_024,
        ..Config::default()
    });
    let app = app(state);
    let big = vec![b'x'; 4_096];
    // (method, uri, token, content type, body, status, code)
    type Case<'a> = (
        &'a str,
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        Vec<u8>,
        u16,
        &'a str,
    );
    let cases: Vec<Case> = vec![
        (
            "GET",
            "/v1/dlq?limit=abc",
            Some(ADMIN),
            None,
            vec![],
            400,
            "bad_query",
        ),
        (
            "GET",
            "/v1/events?last_event_id=abc",
            Some(WORKER),
            None,
            vec![],
            400,
            "bad_query",
        ),
        (
            "GET",
            "/v1/jobs/%FF",
            Some(WORKER),
            None,
            vec![],
            400,
            "bad_path",
        ),
        (
            "GET",
            "/v1/jobs/bad%20id",
            Some(WORKER),
            None,
            vec![],
            400,
            "bad_id",
        ),
        (
            "POST",
            "/v1/jobs",
            Some(PRODUCER),
            Some("application/json"),
            b"{".to_vec(),
            400,
            "bad_json",
        ),
        (
            "POST",
            "/v1/jobs",
            Some(PRODUCER),
            Some("text/plain"),
            b"{}".to_vec(),
            400,
            "bad_content_type",
        ),
        // The lock's body is optional, but when there is one it is JSON like every other.
        (
            "POST",
            "/v1/locks/ct",
            Some(WORKER),
            Some("text/plain"),
            b"{\"ttl_ms\": 5000}".to_vec(),
            400,
            "bad_content_type",
        ),
        (
            "POST",
            "/v1/locks/ct",
            Some(WORKER),
            Some("application/json"),
            b"{\"ttl_ms\": ".to_vec(),
            400,
            "bad_json",
        ),
        (
            "POST",
            "/v1/jobs",
            Some(PRODUCER),
            Some("application/json"),
            big.clone(),
            413,
            "too_large",
        ),
        (
            "POST",
            "/v1/locks/k",
            Some(WORKER),
            Some("application/json"),
            big,
            413,
            "too_large",
        ),
        (
            "POST",
            "/v1/locks/k",
            Some(WORKER),
            Some("application/json"),
            b"nope".to_vec(),
            400,
            "bad_json",
        ),
        (
            "POST",
            "/v1/jobs",
            None,
            Some("application/json"),
            b"{}".to_vec(),
            401,
            "unauthorized",
        ),
        (
            "POST",
            "/v1/jobs",
            Some("forged"),
            Some("application/json"),
            b"{}".to_vec(),
            401,
            "unauthorized",
        ),
        (
            "POST",
            "/v1/jobs/claim",
            Some(PRODUCER),
            Some("application/json"),
            b"{}".to_vec(),
            403,
            "forbidden",
        ),
        (
            "GET",
            "/v1/nope",
            Some(ADMIN),
            None,
            vec![],
            404,
            "not_found",
        ),
        (
            "DELETE",
            "/v1/jobs",
            Some(ADMIN),
            None,
            vec![],
            405,
            "method_not_allowed",
        ),
        (
            "GET",
            "/v1/jobs/none",
            Some(WORKER),
            None,
            vec![],
            404,
            "not_found",
        ),
    ];
    for (method, uri, token, ct, body, status, code) in cases {
        let r = call_raw(&app, method, uri, token, ct, body).await;
        assert_eq!(r.status.as_u16(), status, "{method} {uri}: {}", r.text);
        assert_eq!(
            r.headers["content-type"], "application/json",
            "{method} {uri}"
        );
        assert_eq!(error_code(&r.json), code, "{method} {uri}: {}", r.text);
        assert!(
            r.json["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{method} {uri}"
        );
    }
    // The scheme is case-insensitive.
    let req = axum::http::Request::builder()
        .uri("/v1/jobs/none")
        .header("authorization", format!("bearer {WORKER}"))
        .body(axum::body::Body::empty())
        .unwrap();
    let resp = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_token_over_its_rate_gets_429_with_retry_after() {
    let (state, _) = state_with(Config {
        rate_per_token: 1,
        rate_burst: 5,
        ..Config::default()
    });
    let app = app(state);
    let api = Api(app.clone());
    for _ in 0..5 {
        let r = api.get(Some(WORKER), "/v1/jobs/none").await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
    }
    let r = api.get(Some(WORKER), "/v1/jobs/none").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(error_code(&r.json), "too_many_requests");
    assert!(
        r.headers["retry-after"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
    // Another token has its own bucket.
    let r = api.get(Some(PRODUCER), "/v1/jobs/none").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_1001st_worker_reports_metrics() {
    let (state, _) = state_with(Config::default());
    let app = app(state);
    let api = Api(app.clone());
    for i in 0..1_001 {
        let r = api
            .post(
                Some(WORKER),
                "/v1/metrics",
                json!({"worker": format!("w{i}"), "counters": {"jobs_done": i}}),
            )
            .await;
        assert_eq!(r.status, StatusCode::NO_CONTENT, "worker {i}: {}", r.text);
    }
    let r = api.get(Some(ADMIN), "/v1/stats").await;
    let workers = r.json["workers"].as_object().unwrap();
    assert_eq!(workers.len(), 1_000, "bounded");
    assert!(workers.contains_key("w1000"), "the newest is kept");
}

#[tokio::test]
async fn a_batch_ack_answers_each_job_on_its_own() {
    let (state, _) = state_with(Config::default());
    let app = app(state);
    let api = Api(app.clone());
    let model = "00000000deadbeef";
    let jobs: Vec<Value> = (0..3)
        .map(|i| json!({"id": format!("b{i}"), "text": format!("text {i}"), "model_id": model}))
        .collect();
    api.enqueue(json!({ "jobs": jobs })).await;
    let r = api
        .post(
            Some(WORKER),
            "/v1/jobs/claim",
            json!({"worker": "w", "max": 3}),
        )
        .await;
    let claimed = r.json["jobs"].as_array().unwrap().clone();
    let token = |id: &str| {
        claimed.iter().find(|j| j["id"] == id).unwrap()["lease"]["token"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let good = |id: &str, tok: &str| {
        let mut b = ack_body(tok);
        b["id"] = json!(id);
        b["result"]["model_id"] = json!(model);
        b
    };
    let mut with_cache = good("b0", &token("b0"));
    with_cache["cache"] =
        json!({"key": ternflow_core::keys::cache_key(model, "text 0"), "fence": 0});
    let mut empty = good("b2", &token("b2"));
    empty["result"]["vector"] = json!("");
    // A vector that does not even decode (a NaN; not base64) is refused on its own too, in its
    // place in the answer: it does not fail the batch.
    let mut nan = good("b2", &token("b2"));
    nan["result"]["vector"] = json!("AADAfw==");
    let mut garbage = good("b2", &token("b2"));
    garbage["result"]["vector"] = json!("!!");
    let body = json!({"acks": [
        with_cache,
        nan,
        good("b1", "not-the-token"),
        empty,
        garbage,
        good("nope", "t"),
    ]});
    let r = api.post(Some(WORKER), "/v1/jobs/ack", body.clone()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let outcomes: Vec<(&str, &str)> = r.json["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["id"].as_str().unwrap(), x["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("b0", "done"),
            ("b2", "refused"),
            ("b1", "lease_lost"),
            ("b2", "refused"),
            ("b2", "refused"),
            ("nope", "missing")
        ]
    );
    for i in [1, 3, 4] {
        assert_eq!(r.json["results"][i]["error"]["code"], "bad_result", "{i}");
    }
    // The lost and refused ones changed nothing; the good one wrote through with its lease.
    let st = |id: &'static str| {
        let app = app.clone();
        let api = Api(app.clone());
        async move { api.get(Some(WORKER), &format!("/v1/jobs/{id}")).await.json["state"].clone() }
    };
    assert_eq!(st("b0").await, "done");
    assert_eq!(st("b1").await, "leased");
    assert_eq!(st("b2").await, "leased");
    let key = ternflow_core::keys::cache_key(model, "text 0");
    let r = api.get(Some(WORKER), &format!("/v1/cache/{key}")).await;
    assert_eq!(r.status, StatusCode::OK, "write-through of the batch");
    // The same batch again: the done one is a repeat (idempotent), nothing acked twice.
    let r = api.post(Some(WORKER), "/v1/jobs/ack", body).await;
    assert_eq!(r.json["results"][0]["outcome"], "repeated");
    let r = api.get(Some(ADMIN), "/v1/stats").await;
    assert_eq!(r.json["counters"]["jobs_acked"], 1);
}

#[tokio::test]
async fn a_batch_heartbeat_extends_each_held_lease_on_its_own() {
    let (state, _) = state_with(Config::default());
    let app = app(state);
    let api = Api(app.clone());
    let model = "00000000deadbeef";
    let jobs: Vec<Value> = (0..2)
        .map(|i| json!({"id": format!("h{i}"), "text": format!("text {i}"), "model_id": model}))
        .collect();
    api.enqueue(json!({ "jobs": jobs })).await;
    let r = api
        .post(
            Some(WORKER),
            "/v1/jobs/claim",
            json!({"worker": "w", "max": 2}),
        )
        .await;
    let claimed = r.json["jobs"].as_array().unwrap().clone();
    let lease = |id: &str| claimed.iter().find(|j| j["id"] == id).unwrap()["lease"].clone();
    let body = json!({"leases": [
        {"id": "h0", "token": lease("h0")["token"]},
        {"id": "h1", "token": "forged"},
        {"id": "nope", "token": "t"},
    ]});
    let r = api.post(Some(WORKER), "/v1/jobs/heartbeat", body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let results = r.json["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    assert_eq!(results[0]["id"], "h0");
    assert_eq!(results[0]["lease"]["token"], lease("h0")["token"]);
    assert_eq!(results[0]["lease"]["fence"], lease("h0")["fence"]);
    assert!(
        results[0]["lease"]["expires_at"].as_u64() >= lease("h0")["expires_at"].as_u64(),
        "extended"
    );
    assert!(
        results[1].get("lease").is_none(),
        "a forged token extends nothing"
    );
    assert!(
        results[2].get("lease").is_none(),
        "an unknown job is not an error"
    );
    let r = api
        .post(Some(WORKER), "/v1/jobs/heartbeat", json!({"leases": []}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json["error"]["code"], "empty_batch");
    let r = api
        .post(Some(PRODUCER), "/v1/jobs/heartbeat", json!({"leases": []}))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "workers only");
    // Nacks in one request: one dead-lettered, one forged, one unknown; each on its own.
    let r = api
        .post(
            Some(WORKER),
            "/v1/jobs/nack",
            json!({"nacks": [
                {"id": "h1", "token": lease("h1")["token"],
                 "error": {"code": "bad_input", "message": "no", "retryable": false}},
                {"id": "h0", "token": "forged", "error": {"code": "x", "message": "y"}},
                {"id": "nope", "token": "t", "error": {"code": "x", "message": "y"}},
            ]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let outcomes: Vec<&str> = r.json["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["dead", "lease_lost", "missing"]);
    let r = api.get(Some(WORKER), "/v1/jobs/h1").await;
    assert_eq!(r.json["state"], "dead");
    assert_eq!(r.json["error"]["code"], "bad_input");
    let r = api.get(Some(WORKER), "/v1/jobs/h0").await;
    assert_eq!(r.json["state"], "leased", "a forged nack changes nothing");
    // A status poll can leave the vectors out.
    let mut ack = ack_body(lease("h0")["token"].as_str().unwrap());
    ack["result"]["model_id"] = json!(model);
    let r = api.post(Some(WORKER), "/v1/jobs/h0/ack", ack).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = api
        .post(
            Some(WORKER),
            "/v1/jobs/status",
            json!({"ids": ["h0"], "vectors": false}),
        )
        .await;
    assert_eq!(r.json["jobs"][0]["state"], "done");
    assert_eq!(r.json["jobs"][0]["result"]["vector"], "");
    assert_eq!(r.json["jobs"][0]["result"]["source"], "engine");
    let r = api
        .post(Some(WORKER), "/v1/jobs/status", json!({"ids": ["h0"]}))
        .await;
    assert_ne!(
        r.json["jobs"][0]["result"]["vector"], "",
        "vectors by default"
    );
}

#[tokio::test]
async fn a_model_less_job_is_embedded_with_the_claiming_workers_model() {
    // A server without a model of its own: jobs enqueued without a model id.
    let state = AppState::new(
        Arc::new(MemoryStore::new()),
        common::tokens(),
        Config::default(),
    );
    let app = app(state);
    let api = Api(app.clone());
    let r = api.enqueue(json!({"text": "no model named"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let id = r.json["jobs"][0]["id"].as_str().unwrap().to_owned();
    let worker_model = "00000000cafef00d";
    let r = api
        .post(
            Some(WORKER),
            "/v1/jobs/claim",
            json!({"worker": "w", "max": 1, "model_id": worker_model}),
        )
        .await;
    let job = r.json["jobs"][0].clone();
    assert_eq!(
        job["model_id"], worker_model,
        "the claim fills the worker's model in"
    );
    // The worker keys its result and write-through with that model: the ack is accepted, the
    // job is done and the vector is cached under the worker's model.
    let key = ternflow_core::keys::cache_key(worker_model, "no model named");
    let mut body = ack_body(job["lease"]["token"].as_str().unwrap());
    body["result"]["model_id"] = json!(worker_model);
    body["cache"] = json!({"key": key, "fence": 0});
    let r = api
        .post(Some(WORKER), &format!("/v1/jobs/{id}/ack"), body)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = api.get(Some(PRODUCER), &format!("/v1/jobs/{id}")).await;
    assert_eq!(r.json["state"], "done");
    assert_eq!(r.json["result"]["model_id"], worker_model);
    let r = api.get(Some(WORKER), &format!("/v1/cache/{key}")).await;
    assert_eq!(r.status, StatusCode::OK, "cached under the worker's model");
}

#[tokio::test]
async fn many_statuses_in_one_request_in_order() {
    let (state, _) = state_with(Config::default());
    let app = app(state);
    let api = Api(app.clone());
    api.enqueue(json!({"jobs": [{"id": "s1", "text": "a"}, {"id": "s2", "text": "b"}]}))
        .await;
    let jobs = api.claim(1).await;
    let tok = jobs[0]["lease"]["token"].as_str().unwrap();
    let id = jobs[0]["id"].as_str().unwrap().to_owned();
    let r = api
        .post(Some(WORKER), &format!("/v1/jobs/{id}/ack"), ack_body(tok))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = api
        .post(
            Some(PRODUCER),
            "/v1/jobs/status",
            json!({"ids": ["s2", "nope", "s1"]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let ids: Vec<&str> = r.json["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["s2", "s1"], "in the request's order");
    assert_eq!(r.json["missing"], json!(["nope"]));
    let done = r.json["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == id)
        .unwrap();
    assert_eq!(done["state"], "done");
    assert!(
        done["result"]["vector"].is_string(),
        "the result rides along"
    );
    let too_many: Vec<String> = (0..1_001).map(|i| format!("x{i}")).collect();
    let r = api
        .post(
            Some(PRODUCER),
            "/v1/jobs/status",
            json!({ "ids": too_many }),
        )
        .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
}
