//! The server on Redis: `kill -9` Redis mid-run (AOF on), restart it on the same port and
//! directory, and check that no job, lease or ack is lost. Also: events still flow afterwards.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use common::{call, Resp, ADMIN, PRODUCER, WORKER};
use serde_json::{json, Value};
use ternflow_core::protocol::{JobsEvent, ServerEvent};
use ternflow_server::{app, AppState, Config, EventBus, RedisStore};

/// Retries while the store is unavailable (503) — what a client with backoff does.
async fn retry(
    app: &axum::Router,
    method: &str,
    uri: &str,
    token: &str,
    body: Option<Value>,
) -> Resp {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let r = call(app, method, uri, Some(token), body.clone()).await;
        if r.status != StatusCode::SERVICE_UNAVAILABLE {
            return r;
        }
        assert_eq!(r.json["error"]["code"], "store_unavailable");
        assert!(
            tokio::time::Instant::now() < deadline,
            "store did not come back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ack_body(token: &str) -> Value {
    json!({"token": token, "result": {"model_id": "m", "vector": "AACAPw==", "source": "backend"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_loses_nothing() {
    let mut redis = common::RedisServer::start();
    let store = Arc::new(RedisStore::connect(&redis.url(), "rt").await.unwrap());
    let state = AppState::new(store.clone(), common::tokens(), Config::default());
    let app = app(state);

    let jobs: Vec<Value> = (0..50)
        .map(|i| json!({"text": format!("text {i}")}))
        .collect();
    let r = call(
        &app,
        "POST",
        "/v1/jobs",
        Some(PRODUCER),
        Some(json!({ "jobs": jobs })),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let ids: Vec<String> = r.json["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect();
    let r = call(
        &app,
        "POST",
        "/v1/jobs/claim",
        Some(WORKER),
        Some(json!({"worker": "w", "max": 20})),
    )
    .await;
    let claimed: Vec<(String, String)> = r.json["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["id"].as_str().unwrap().to_owned(),
                j["lease"]["token"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(claimed.len(), 20);
    for (id, tok) in &claimed[..5] {
        let r = call(
            &app,
            "POST",
            &format!("/v1/jobs/{id}/ack"),
            Some(WORKER),
            Some(ack_body(tok)),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK);
    }

    // Events published before the kill; the subscription is lost with Redis.
    let mut before = store.subscribe();
    redis.kill9();
    // While Redis is down the server answers 503 with Retry-After, never 500.
    let r = call(&app, "GET", "/v1/stats", Some(ADMIN), None).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.headers.contains_key("retry-after"));
    // `/metrics` still answers, well inside a scrape's timeout (the store's own is 5 s): the
    // queue's gauges left out, everything else there and the store's failures counted, so the
    // store alerts can fire instead of the server looking down.
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let r = call(&app, "GET", "/metrics", Some(ADMIN), None).await;
        let took = t.elapsed();
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert!(took < Duration::from_secs(2), "/metrics took {took:?}");
        assert!(!r.text.contains("ternflow_queue_ready"), "{}", r.text);
        assert!(
            r.text.contains("ternflow_jobs_acked_total 5\n"),
            "{}",
            r.text
        );
    }
    let r = call(&app, "GET", "/metrics", Some(ADMIN), None).await;
    let depth_errors: f64 = r
        .text
        .lines()
        .find_map(|l| l.strip_prefix("ternflow_store_op_errors_total{op=\"depth\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(depth_errors >= 3.0, "{}", r.text);
    redis.restart();

    // Leases survived: the in-flight jobs are acked with their original tokens.
    for (id, tok) in &claimed[5..] {
        let r = retry(
            &app,
            "POST",
            &format!("/v1/jobs/{id}/ack"),
            WORKER,
            Some(ack_body(tok)),
        )
        .await;
        assert_eq!(
            (r.status, r.json["first"].clone()),
            (StatusCode::OK, json!(true)),
            "{}",
            r.text
        );
    }
    // The 30 never claimed are still queued.
    let mut rest = 0;
    while rest < 30 {
        let r = retry(
            &app,
            "POST",
            "/v1/jobs/claim",
            WORKER,
            Some(json!({"worker": "w2", "max": 16})),
        )
        .await;
        let batch = r.json["jobs"].as_array().unwrap().clone();
        assert!(!batch.is_empty(), "only {rest} of 30 queued jobs came back");
        for j in batch {
            let (id, tok) = (
                j["id"].as_str().unwrap(),
                j["lease"]["token"].as_str().unwrap(),
            );
            let r = retry(
                &app,
                "POST",
                &format!("/v1/jobs/{id}/ack"),
                WORKER,
                Some(ack_body(tok)),
            )
            .await;
            assert_eq!(r.status, StatusCode::OK);
            rest += 1;
        }
    }
    for id in &ids {
        let r = retry(&app, "GET", &format!("/v1/jobs/{id}"), WORKER, None).await;
        assert_eq!(r.json["state"], "done", "{id}");
    }
    let r = retry(&app, "GET", "/v1/stats", ADMIN, None).await;
    assert_eq!(
        r.json["queue"],
        json!({"ready": 0, "delayed": 0, "leased": 0, "dead": 0})
    );

    // The Pub/Sub subscriber reconnected: events published now are delivered, after a
    // `reset` that says events may have been lost meanwhile (SSE clients resynchronise).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut heard = Vec::new();
    'delivered: loop {
        store
            .publish(ServerEvent::Jobs(JobsEvent { depth: 7 }))
            .await
            .unwrap();
        while let Ok(Ok((id, ev))) =
            tokio::time::timeout(Duration::from_millis(300), before.recv()).await
        {
            let done = ev == ServerEvent::Jobs(JobsEvent { depth: 7 });
            heard.push((id, ev));
            if done {
                break 'delivered;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "events did not resume"
        );
    }
    let reset = heard
        .iter()
        .position(|(_, ev)| matches!(ev, ServerEvent::Reset(r) if r.reason == "subscription_lost"))
        .unwrap_or_else(|| panic!("no reset after the subscription was lost: {heard:?}"));
    let (reset_id, _) = &heard[reset];
    let (first_after, _) = &heard[heard.len() - 1];
    assert!(
        heard[..reset].iter().all(|(id, _)| id <= reset_id) && first_after > reset_id,
        "the reset is numbered between what came before and after: {heard:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_one_redis() {
    let redis = common::RedisServer::start();
    let a = AppState::new(
        Arc::new(RedisStore::connect(&redis.url(), "two").await.unwrap()),
        common::tokens(),
        Config::default(),
    );
    let b = AppState::new(
        Arc::new(RedisStore::connect(&redis.url(), "two").await.unwrap()),
        common::tokens(),
        Config::default(),
    );
    let (app_a, app_b) = (app(a), app(b));
    // A long poll on B is woken by an enqueue on A (Pub/Sub fan-out).
    let waiter = {
        let app_b = app_b.clone();
        tokio::spawn(async move {
            call(
                &app_b,
                "POST",
                "/v1/jobs/claim",
                Some(WORKER),
                Some(json!({"worker": "w", "wait_ms": 10_000})),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    call(
        &app_a,
        "POST",
        "/v1/jobs",
        Some(PRODUCER),
        Some(json!({"id": "x", "text": "hello"})),
    )
    .await;
    let r = waiter.await.unwrap();
    assert_eq!(r.json["jobs"][0]["id"], "x");
    assert!(started.elapsed() < Duration::from_secs(1));
    // Ack through A what B leased.
    let tok = r.json["jobs"][0]["lease"]["token"].as_str().unwrap();
    let r = call(
        &app_a,
        "POST",
        "/v1/jobs/x/ack",
        Some(WORKER),
        Some(ack_body(tok)),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = call(&app_b, "GET", "/v1/jobs/x", Some(WORKER), None).await;
    assert_eq!(r.json["state"], "done");
}
