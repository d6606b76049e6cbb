//! The dashboard: its page and files (public), its data (`GET /v1/dashboard`: history samples,
//! worker table, alerts; admin of the default tenant only) and its semantic search
//! (`POST /v1/search`) — on the SQLite and Redis stores, with the real default model for search.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{Api, ADMIN, PRODUCER, WORKER};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use ternflow_server::{
    app, run, AppState, Config, EngineEmbedder, FakeClock, MemoryStore, RedisStore, SqliteStore,
    Store, Synchronous,
};
use tower::ServiceExt;

const T0: u64 = 1_700_000_000_000;
const CHROME_UA: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) \
                         HeadlessChrome/156.0.7000.0 Safari/537.36";

fn sqlite() -> (Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(dir.path(), Synchronous::Normal).unwrap();
    (Arc::new(s), dir)
}

async fn redis(r: &common::RedisServer, prefix: &str) -> Arc<dyn Store> {
    Arc::new(RedisStore::connect(&r.url(), prefix).await.unwrap())
}

/// `POST /v1/metrics` as a worker in headless Chromium would send it (its `User-Agent`).
async fn push_metrics(router: &axum::Router, snap: Value) {
    let req = Request::post("/v1/metrics")
        .header("authorization", format!("Bearer {WORKER}"))
        .header("content-type", "application/json")
        .header("user-agent", CHROME_UA)
        .body(Body::from(serde_json::to_vec(&snap).unwrap()))
        .unwrap();
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(status, StatusCode::NO_CONTENT, "{body:?}");
}

fn ack_item(job: &Value, source: &str) -> Value {
    json!({"id": job["id"], "token": job["lease"]["token"],
           "result": {"model_id": "m", "vector": "AACAPw==", "source": source}})
}

#[tokio::test]
async fn page_and_files_are_public_and_the_data_needs_an_admin() {
    let (state, _) = common::state_with(Config::default());
    let api = Api(app(state));
    let r = api.get(None, "/dashboard").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(
        r.text.contains("/dashboard/uPlot.iife.min.js") && r.text.contains("/dashboard/app.js")
    );
    let js = api.get(None, "/dashboard/uPlot.iife.min.js").await;
    assert_eq!(js.status, StatusCode::OK);
    // The vendored build is the version package.json pins (www/dashboard/vendor/README.md).
    let pkg: Value = serde_json::from_str(include_str!("../../../package.json")).unwrap();
    let pinned = pkg["devDependencies"]["uplot"].as_str().unwrap();
    assert!(
        js.text.starts_with(&format!(
            "/*! https://github.com/leeoniya/uPlot (v{pinned}) */"
        )),
        "vendored uPlot is not v{pinned}: {}",
        &js.text[..60]
    );
    assert_eq!(
        api.get(None, "/dashboard/app.js").await.status,
        StatusCode::OK
    );
    assert_eq!(
        api.get(None, "/dashboard/../Cargo.toml").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        api.get(None, "/dashboard/secrets.txt").await.status,
        StatusCode::NOT_FOUND
    );
    // The data: admin only, every refusal a protocol error body.
    let r = api.get(None, "/v1/dashboard").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.json["error"]["code"], "unauthorized");
    assert_eq!(
        api.get(Some(WORKER), "/v1/dashboard").await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        api.post(Some(PRODUCER), "/v1/search", json!({"query": "x"}))
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    let r = api.get(Some(ADMIN), "/v1/dashboard").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json["sample_ms"], 1_000);
}

/// Samples over real stores with a fake clock: jobs/s, hit ratios and engine share from the
/// acks' sources, claim → ack latency, the worker table with its runtime, the alerts.
async fn history_and_alerts(store: Arc<dyn Store>) {
    let clock = FakeClock::new(T0);
    // One attempt: the job a worker fails goes to the dead-letter queue on its first nack (a
    // worker's "permanent" alone is not believed: `tests/nacks.rs`).
    let cfg = Config {
        max_attempts: 1,
        ..Config::default()
    };
    let state = AppState::new(store, common::tokens(), cfg).with_clock(Arc::new(clock.clone()));
    let router = app(state.clone());
    let api = Api(router.clone());
    let jobs: Vec<Value> = (0..10)
        .map(|i| json!({"text": format!("text {i}"), "model_id": "m"}))
        .collect();
    assert_eq!(
        api.enqueue(json!({ "jobs": jobs })).await.status,
        StatusCode::OK
    );
    state.record_sample().await;
    let claimed = api.claim(10).await;
    assert_eq!(claimed.len(), 10);
    let mut snap = json!({"worker": "w-1", "counters": {"jobs_done": 10, "engine_embeds": 6},
        "gauges": {"in_flight": 3.0, "processing_rate": 4.5, "engine_latency_p50_ms": 3.0,
                   "engine_latency_p99_ms": 8.0, "engine_breaker": 0.0, "backend_breaker": 0.0}});
    push_metrics(&router, snap.clone()).await;
    clock.advance(1_800);
    // 6 embedded by the engine, 2 local hits, 2 remote hits; all 10 in one batch ack.
    let sources = [
        "engine", "engine", "engine", "engine", "engine", "engine", "local", "local", "remote",
        "remote",
    ];
    let acks: Vec<Value> = claimed
        .iter()
        .zip(sources)
        .map(|(j, s)| ack_item(j, s))
        .collect();
    let r = api
        .post(Some(WORKER), "/v1/jobs/ack", json!({ "acks": acks }))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    clock.advance(200);
    state.record_sample().await;

    let d = api.get(Some(ADMIN), "/v1/dashboard").await;
    assert_eq!(d.status, StatusCode::OK, "{}", d.text);
    let samples = d.json["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 2, "two samples: {}", d.text);
    let s = &samples[1];
    assert_eq!(s["t"], T0 + 2_000);
    assert_eq!(s["jobs_per_s"], 5.0, "10 acks in 2 s");
    assert_eq!(s["local_hit_ratio"], 0.2);
    assert_eq!(s["remote_hit_ratio"], 0.2);
    assert_eq!(s["engine_share"], 1.0, "nothing came from the backend");
    let p50 = s["job_p50_ms"].as_f64().unwrap();
    assert!(
        (1_500.0..=2_000.0).contains(&p50),
        "1.8 s claim → ack: {p50}"
    );
    assert_eq!(s["engine_p50_ms"], 3.0);
    assert_eq!(s["in_flight"], 3.0);
    assert_eq!(s["workers"], 1);
    assert_eq!(s["ready"], 0);
    assert_eq!(d.json["counters"]["acked_local"], 2);
    assert_eq!(d.json["counters"]["acked_engine"], 6);
    let w = &d.json["workers"][0];
    assert_eq!(w["worker"], "w-1");
    assert_eq!(w["runtime"], "HeadlessChrome 156");
    assert!(
        w["sub"].as_str().unwrap().starts_with("static:"),
        "the identity its results are recorded under: {w}"
    );
    assert_eq!(w["quarantined"], false);
    assert_eq!(w["gauges"]["processing_rate"], 4.5);
    assert_eq!(w["last_seen"], T0);
    // `since` returns only what the page has not drawn yet.
    let later = api
        .get(Some(ADMIN), &format!("/v1/dashboard?since={}", T0))
        .await;
    assert_eq!(later.json["samples"].as_array().unwrap().len(), 1);
    assert!(
        d.json["alerts"].as_array().unwrap().is_empty(),
        "no alert yet"
    );

    // A lock that expires unreleased, a dead letter and an open breaker each raise an alert.
    let r = api
        .post(Some(WORKER), "/v1/locks/m:k1", json!({"ttl_ms": 100}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        api.enqueue(json!({"id": "poison", "text": "t", "model_id": "m"}))
            .await
            .status,
        StatusCode::OK
    );
    let p = api.claim(1).await;
    let r = api
        .post(
            Some(WORKER),
            "/v1/jobs/poison/nack",
            json!({"token": p[0]["lease"]["token"],
                   "error": {"code": "model_mismatch", "message": "no such model", "retryable": false}}),
        )
        .await;
    assert_eq!(r.json["outcome"], "dead", "{}", r.text);
    snap["gauges"]["backend_breaker"] = json!(1.0);
    push_metrics(&router, snap).await;
    clock.advance(1_000);
    state.record_sample().await;
    let d = api.get(Some(ADMIN), "/v1/dashboard").await;
    let kinds: Vec<&str> = d.json["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["lock_leak", "dead_letters", "breaker_open"],
        "{}",
        d.text
    );
    assert_eq!(d.json["counters"]["lock_leaked"], 1);
    // The dead letter the page lists, with its reason and history, and its redrive.
    let dlq = api.get(Some(ADMIN), "/v1/dlq").await;
    assert_eq!(dlq.json["entries"][0]["error"]["code"], "model_mismatch");
    assert_eq!(
        dlq.json["entries"][0]["history"].as_array().unwrap().len(),
        1
    );
    let r = api.post_empty(Some(ADMIN), "/v1/dlq/poison/redrive").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json["state"], "queued");
}

#[tokio::test]
async fn history_and_alerts_on_sqlite() {
    let (store, _dir) = sqlite();
    history_and_alerts(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_and_alerts_on_redis() {
    let r = common::RedisServer::start();
    history_and_alerts(redis(&r, "dash").await).await;
}

#[tokio::test]
async fn another_tenants_admin_cannot_read_the_dashboard() {
    use base64::Engine as _;
    let secret = b"dash-secret-dash-secret-dash-sec";
    let keys = ternflow_server::jwt::Keys::parse(&format!(
        "k1:hs256:{}",
        base64::engine::general_purpose::STANDARD.encode(secret)
    ))
    .unwrap();
    let now = T0 / 1_000;
    let tok = ternflow_server::jwt::mint_hs256(
        "k1",
        secret,
        &ternflow_server::jwt::Claims {
            role: "admin".into(),
            tenant: "b".into(),
            exp: now + 600,
            nbf: None,
            iat: Some(now),
            sub: None,
            claims_per_min: None,
        },
    )
    .unwrap();
    let factory: ternflow_server::tenants::StoreFactory =
        Arc::new(|_| Box::pin(async { Ok(Arc::new(MemoryStore::new()) as Arc<dyn Store>) }));
    let state = AppState::new(
        Arc::new(MemoryStore::new()),
        common::tokens(),
        Config::default(),
    )
    .with_clock(Arc::new(FakeClock::new(T0)))
    .with_keys(keys)
    .with_tenant_stores(factory);
    let api = Api(app(state));
    let r = api.get(Some(&tok), "/v1/dashboard").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    assert_eq!(
        api.get(Some(ADMIN), "/v1/dashboard").await.status,
        StatusCode::OK
    );
}

/// The search embeds the query with the server's engine (the default model) and ranks the
/// finished jobs' vectors, which the workers computed with the same model.
async fn search_over(store: Arc<dyn Store>) {
    let bytes = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../models/ternlight-int4.bin"
    ))
    .expect("the default model models/ternlight-int4.bin");
    let engine = EngineEmbedder::from_bytes(&bytes).unwrap();
    let state =
        AppState::new(store, common::tokens(), Config::default()).with_embedder(Arc::new(engine));
    let api = Api(app(state));
    let texts = [
        "To read a text file line by line, open it and iterate over the file object.",
        "The recipe needs two cups of flour and a pinch of salt.",
        "A list can be sorted in place with its sort method.",
        "The train to the airport leaves every twenty minutes.",
        "Exceptions are raised with the raise statement and caught with try and except.",
    ];
    // Embedded as a worker's backend fallback would be, then acked as the workers do.
    let r = api
        .post(Some(WORKER), "/v1/embed", json!({ "texts": texts }))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let model = r.json["model_id"].as_str().unwrap().to_owned();
    let vectors = r.json["vectors"].as_array().unwrap().clone();
    let jobs: Vec<Value> = texts.iter().map(|t| json!({ "text": t })).collect();
    assert_eq!(
        api.enqueue(json!({ "jobs": jobs })).await.status,
        StatusCode::OK
    );
    // One more, of another model: skipped, never scored against this model's query.
    assert_eq!(
        api.enqueue(json!({"id": "other-model", "text": texts[0], "model_id": "zz"}))
            .await
            .status,
        StatusCode::OK
    );
    // The same sentence again under another id: one hit, not two.
    assert_eq!(
        api.enqueue(json!({"id": "dup-1", "text": texts[1]}))
            .await
            .status,
        StatusCode::OK
    );
    let claimed = api.claim(10).await;
    assert_eq!(claimed.len(), 7);
    let acks: Vec<Value> = claimed
        .iter()
        .map(|j| {
            let (m, v) = if j["id"] == "other-model" {
                ("zz".to_owned(), vectors[0].clone())
            } else {
                let i = texts.iter().position(|t| j["text"] == *t).unwrap();
                (model.clone(), vectors[i].clone())
            };
            json!({"id": j["id"], "token": j["lease"]["token"],
                   "result": {"model_id": m, "vector": v, "source": "engine"}})
        })
        .collect();
    let r = api
        .post(Some(WORKER), "/v1/jobs/ack", json!({ "acks": acks }))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);

    let cases = [
        ("how do I go through a file one line at a time", 0),
        ("sorting a list", 2),
        ("catching errors in my program", 4),
        ("baking bread", 1),
    ];
    for (query, want) in cases {
        let r = api
            .post(Some(ADMIN), "/v1/search", json!({"query": query, "k": 3}))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        let hits = r.json["hits"].as_array().unwrap();
        assert_eq!(hits.len(), 3, "k = 3");
        assert_eq!(hits[0]["text"], texts[want], "{query:?}: {}", r.text);
        let scores: Vec<f64> = hits.iter().map(|h| h["score"].as_f64().unwrap()).collect();
        assert!(
            scores.windows(2).all(|w| w[0] >= w[1]),
            "best first: {scores:?}"
        );
        let distinct: std::collections::HashSet<&str> =
            hits.iter().map(|h| h["text"].as_str().unwrap()).collect();
        assert_eq!(distinct.len(), 3, "one hit per distinct text: {}", r.text);
        assert_eq!(
            r.json["scored"], 6,
            "every finished job of the model is scored"
        );
        assert_eq!(r.json["skipped"], 1, "the other model's job");
        assert_eq!(r.json["model_id"], model.as_str());
    }
    // A job's own text finds it with a score of 1 (the same engine, the same vector).
    let r = api
        .post(
            Some(ADMIN),
            "/v1/search",
            json!({"query": texts[3], "k": 1}),
        )
        .await;
    let top = r.json["hits"][0]["score"].as_f64().unwrap();
    assert!(top > 0.9999, "{top}");
    for (body, code) in [
        (json!({"query": ""}), "empty_query"),
        (json!({"query": "x", "k": 0}), "bad_k"),
        (json!({"query": "x", "k": 101}), "bad_k"),
        (json!({"query": "x", "nope": 1}), "bad_json"),
    ] {
        let r = api.post(Some(ADMIN), "/v1/search", body.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {}", r.text);
        assert_eq!(r.json["error"]["code"], code, "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_on_sqlite() {
    let (store, _dir) = sqlite();
    search_over(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_on_redis() {
    let r = common::RedisServer::start();
    search_over(redis(&r, "search").await).await;
}

#[tokio::test]
async fn search_without_a_model_is_503() {
    let state = AppState::new(
        Arc::new(MemoryStore::new()),
        common::tokens(),
        Config::default(),
    );
    let r = Api(app(state))
        .post(Some(ADMIN), "/v1/search", json!({"query": "x"}))
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text);
}

/// Over a real socket the sampler runs by itself, so a page opened later has history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_server_keeps_a_history() {
    let (store, _dir) = sqlite();
    let state = AppState::new(
        store,
        common::tokens(),
        Config {
            stats_sample_ms: 50,
            ..Config::default()
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let done = tokio::spawn(run(listener, state, async move {
        let _ = rx.await;
    }));
    let http = reqwest::Client::new();
    http.post(format!("{base}/v1/jobs"))
        .bearer_auth(PRODUCER)
        .json(&json!({"text": "queued while nobody watches", "model_id": "m"}))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let d: Value = http
        .get(format!("{base}/v1/dashboard"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let samples = d["samples"].as_array().unwrap();
    assert!(
        samples.len() >= 5,
        "≈ 12 samples in 600 ms: {}",
        samples.len()
    );
    assert_eq!(samples.last().unwrap()["ready"], 1, "the queued job");
    let ts: Vec<u64> = samples.iter().map(|s| s["t"].as_u64().unwrap()).collect();
    assert!(ts.windows(2).all(|w| w[0] < w[1]), "oldest first: {ts:?}");
    let page = http.get(format!("{base}/dashboard")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let _ = stop.send(());
    done.await.unwrap().unwrap();
}
