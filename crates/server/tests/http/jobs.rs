//! The queue routes: enqueue, claim (long poll), heartbeat, ack, nack, release (one and many),
//! status, the dead-letter queue, batches, traces, and the cache entry a claim or an ack
//! carries.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{json, Value};
use ternflow_server::{app, AppState, Config, MemoryStore};

use crate::common::{call, lock_fence, state_with, Api, ADMIN, PRODUCER, WORKER, WORKER_B64};
use crate::{ack_body, error_code, vector};

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
async fn long_poll_claim_is_woken_by_enqueue() {
    let state = AppState::new(
        Arc::new(MemoryStore::new()),
        crate::common::tokens(),
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
async fn a_batch_release_hands_each_held_lease_back_on_its_own() {
    let (state, _) = state_with(Config {
        free_releases: 1,
        ..Config::default()
    });
    let app = app(state);
    let api = Api(app.clone());
    let jobs: Vec<Value> = (0..2)
        .map(|i| json!({"id": format!("r{i}"), "text": format!("text {i}")}))
        .collect();
    api.enqueue(json!({ "jobs": jobs })).await;
    let claim = || async {
        let r = api
            .post(
                Some(WORKER),
                "/v1/jobs/claim",
                json!({"worker": "w", "max": 2}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        r.json["jobs"].as_array().unwrap().clone()
    };
    let claimed = claim().await;
    assert_eq!(claimed.len(), 2);
    let token = |jobs: &[Value], id: &str| {
        jobs.iter().find(|j| j["id"] == id).unwrap()["lease"]["token"].clone()
    };
    let release = |leases: Value| {
        let api = Api(app.clone());
        async move {
            let r = api
                .post(
                    Some(WORKER),
                    "/v1/jobs/release",
                    json!({ "leases": leases }),
                )
                .await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.text);
            r.json["results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| {
                    (
                        x["id"].as_str().unwrap().to_owned(),
                        x["outcome"].as_str().unwrap().to_owned(),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    let got = release(json!([
        {"id": "r0", "token": token(&claimed, "r0")},
        {"id": "r1", "token": "forged"},
        {"id": "nope", "token": "t"},
    ]))
    .await;
    let want = |v: &[(&str, &str)]| {
        v.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        got,
        want(&[("r0", "released"), ("r1", "lost"), ("nope", "lost")])
    );
    let r = api.get(Some(WORKER), "/v1/jobs/r0").await;
    assert_eq!(
        r.json["state"], "queued",
        "claimable again at once: {}",
        r.text
    );
    let r = api.get(Some(WORKER), "/v1/jobs/r1").await;
    assert_eq!(
        r.json["state"], "leased",
        "a forged release changes nothing"
    );
    // The same token again: the lease is no longer its to give.
    let again = release(json!([{"id": "r0", "token": token(&claimed, "r0")}])).await;
    assert_eq!(again, want(&[("r0", "lost")]));
    // Past the job's one free release, a release counts as an attempt.
    let second = claim().await;
    assert_eq!(second.len(), 1, "r0 again");
    let got = release(json!([
        {"id": "r0", "token": token(&second, "r0")},
        {"id": "r1", "token": token(&claimed, "r1")},
    ]))
    .await;
    assert_eq!(got, want(&[("r0", "counted"), ("r1", "released")]));
    // Bounds and roles.
    let r = api
        .post(Some(WORKER), "/v1/jobs/release", json!({"leases": []}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json["error"]["code"], "empty_batch");
    let many: Vec<Value> = (0..257)
        .map(|i| json!({"id": format!("x{i}"), "token": "t"}))
        .collect();
    let r = api
        .post(Some(WORKER), "/v1/jobs/release", json!({ "leases": many }))
        .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(r.json["error"]["code"], "batch_too_large");
    let r = api
        .post(
            Some(PRODUCER),
            "/v1/jobs/release",
            json!({"leases": [{"id": "r1", "token": "t"}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "workers only");
}

#[tokio::test]
async fn a_sessions_end_hands_back_what_its_page_never_heard_of_and_refuses_its_claims() {
    let (state, _) = state_with(Config::default());
    let app = app(state);
    let api = Api(app.clone());
    let jobs: Vec<Value> = (0..6)
        .map(|i| json!({"id": format!("s{i}"), "text": format!("text {i}")}))
        .collect();
    api.enqueue(json!({ "jobs": jobs })).await;
    let claim = |token: &'static str, session: &'static str, max: u32, wait_ms: u64| {
        let api = Api(app.clone());
        async move {
            api.post(
                Some(token),
                "/v1/jobs/claim",
                json!({"worker": "w", "max": max, "wait_ms": wait_ms, "session": session}),
            )
            .await
        }
    };
    let state_of = |id: &'static str| {
        let api = Api(app.clone());
        async move {
            let r = api.get(Some(WORKER), &format!("/v1/jobs/{id}")).await;
            r.json["state"].as_str().unwrap().to_owned()
        }
    };
    let ids = |v: &Value| -> Vec<String> {
        let mut ids: Vec<String> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["id"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    };
    let r = claim(WORKER, "page-1", 2, 0).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let first = r.json["jobs"].as_array().unwrap().clone();
    let r = claim(WORKER, "page-1", 2, 0).await;
    let second = r.json["jobs"].as_array().unwrap().clone();
    assert_eq!((first.len(), second.len()), (2, 2));
    // Another identity's worker: its session is its own.
    let r = claim(WORKER_B64, "page-1", 1, 0).await;
    assert_eq!(r.json["jobs"].as_array().unwrap().len(), 1, "{}", r.text);
    let other = r.json["jobs"][0]["id"].as_str().unwrap().to_owned();

    // The page heard of the first claim only; its hand-back names those and the session.
    let named: Vec<Value> = first
        .iter()
        .map(|j| json!({"id": j["id"], "token": j["lease"]["token"]}))
        .collect();
    let r = api
        .post(
            Some(WORKER),
            "/v1/jobs/release",
            json!({"leases": named, "session": "page-1"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(ids(&r.json["results"]), ids(&Value::Array(first.clone())));
    assert_eq!(
        ids(&r.json["from_session"]),
        ids(&Value::Array(second.clone())),
        "the claim the page never heard of is handed back too: {}",
        r.text
    );
    for j in first.iter().chain(&second) {
        let id = j["id"].as_str().unwrap().to_owned();
        let id: &'static str = Box::leak(id.into_boxed_str());
        assert_eq!(state_of(id).await, "queued", "{id} claimable again at once");
    }
    let other: &'static str = Box::leak(other.into_boxed_str());
    assert_eq!(
        state_of(other).await,
        "leased",
        "another identity's lease is kept"
    );

    // A claim under the ended session is refused, and takes nothing.
    let r = claim(WORKER, "page-1", 6, 0).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert_eq!(r.json["error"]["code"], "session_ended");
    let depth = api.get(Some(ADMIN), "/v1/stats").await;
    assert_eq!(depth.json["queue"]["ready"], 5, "{}", depth.text);
    // The other identity's session of the same name goes on.
    let r = claim(WORKER_B64, "page-1", 1, 0).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let again = r.json["jobs"][0].clone();

    // A claim already waiting when its session ends hands back what it got. The other
    // worker takes every ready job first, so the claim waits.
    let r = claim(WORKER_B64, "page-1", 6, 0).await;
    assert_eq!(r.json["jobs"].as_array().unwrap().len(), 4, "{}", r.text);
    let waiting = tokio::spawn(claim(WORKER, "page-2", 6, 5_000));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = api
        .post(
            Some(WORKER),
            "/v1/jobs/release",
            json!({"session": "page-2"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json["results"], json!([]));
    // Now the waiting claim finds jobs (the other worker hands its one back), too late.
    let r = api
        .post(
            Some(WORKER_B64),
            "/v1/jobs/release",
            json!({"leases": [{"id": again["id"], "token": again["lease"]["token"]}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = waiting.await.unwrap();
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert_eq!(r.json["error"]["code"], "session_ended");
    let depth = api.get(Some(ADMIN), "/v1/stats").await;
    assert_eq!(
        (
            &depth.json["queue"]["ready"],
            &depth.json["queue"]["leased"]
        ),
        (&json!(1), &json!(5)),
        "the job the waiting claim got is ready again: {}",
        depth.text
    );

    // Malformed sessions.
    for bad in ["", "has space", &"x".repeat(65)] {
        let r = api
            .post(
                Some(WORKER),
                "/v1/jobs/claim",
                json!({"worker": "w", "session": bad}),
            )
            .await;
        assert_eq!(
            r.json["error"]["code"], "bad_session",
            "{bad:?}: {}",
            r.text
        );
        let r = api
            .post(Some(WORKER), "/v1/jobs/release", json!({"session": bad}))
            .await;
        assert_eq!(
            r.json["error"]["code"], "bad_session",
            "{bad:?}: {}",
            r.text
        );
    }
}

#[tokio::test]
async fn a_model_less_job_is_embedded_with_the_claiming_workers_model() {
    // A server without a model of its own: jobs enqueued without a model id.
    let state = AppState::new(
        Arc::new(MemoryStore::new()),
        crate::common::tokens(),
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
