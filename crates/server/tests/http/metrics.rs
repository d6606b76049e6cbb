//! Prometheus metrics, stats and worker snapshots.

use axum::http::StatusCode;
use serde_json::json;
use ternflow_server::{app, Config};

use crate::common::{state_with, Api, ADMIN, WORKER};

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
