//! Short-lived signed tokens and tenant isolation, on the in-memory, SQLite and Redis stores:
//! refused tokens, scopes, and tenant A unable to read, overwrite, lock, claim, ack, redrive or
//! hear anything of tenant B.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use common::Api;
use futures_util::StreamExt;
use serde_json::{json, Value};
use ternflow_server::jwt::{mint_hs256, Claims, Keys};
use ternflow_server::tenants::StoreFactory;
use ternflow_server::{app, AppState, Config, FakeClock, MemoryStore, RedisStore, SqliteStore};

const K1: &[u8] = b"k1-secret-k1-secret-k1-secret-32";
const K2: &[u8] = b"k2-secret-k2-secret-k2-secret-32";
/// The fake clock's start, in ms.
const NOW_MS: u64 = 1_700_000_000_000;

fn keys() -> Keys {
    Keys::parse(&format!(
        "k1:hs256:{},k2:hs256:{}",
        STANDARD.encode(K1),
        STANDARD.encode(K2)
    ))
    .unwrap()
}

fn token(kid: &str, role: &str, tenant: &str) -> String {
    let secret = if kid == "k1" { K1 } else { K2 };
    let now = NOW_MS / 1_000;
    mint_hs256(
        kid,
        secret,
        &Claims {
            role: role.into(),
            tenant: tenant.into(),
            exp: now + 600,
            nbf: None,
            iat: Some(now),
            sub: None,
            claims_per_min: None,
        },
    )
    .unwrap()
}

fn state(factory: StoreFactory, default: Arc<dyn ternflow_server::Store>) -> (AppState, FakeClock) {
    let clock = FakeClock::new(NOW_MS);
    // One attempt: a job a worker fails is dead-lettered on its first nack (the isolation
    // checks need a dead letter; a worker's "permanent" alone is not believed, tests/nacks.rs).
    let cfg = Config {
        max_attempts: 1,
        ..Config::default()
    };
    let s = AppState::new(default, common::tokens(), cfg)
        .with_clock(Arc::new(clock.clone()))
        .with_keys(keys())
        .with_tenant_stores(factory);
    (s, clock)
}

fn memory_factory() -> StoreFactory {
    Arc::new(|_tenant| {
        Box::pin(async { Ok(Arc::new(MemoryStore::new()) as Arc<dyn ternflow_server::Store>) })
    })
}

async fn isolation(api: Api) {
    let (pa, pb) = (token("k1", "producer", "a"), token("k2", "producer", "b"));
    let (wa, wb) = (token("k1", "worker", "a"), token("k1", "worker", "b"));
    let ab = token("k1", "admin", "b");
    // The same id in both tenants: two different jobs.
    for (p, text) in [(&pa, "text of a"), (&pb, "text of b")] {
        let r = api
            .post(
                Some(p),
                "/v1/jobs",
                json!({"id": "j", "text": text, "model_id": "m"}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert_eq!(
            r.json["jobs"][0]["new"], true,
            "a new job in its own tenant"
        );
    }
    let r = api
        .post(
            Some(&pa),
            "/v1/jobs",
            json!({"id": "only-a", "text": "secret a", "model_id": "m"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    // B sees none of A's jobs.
    let r = api.get(Some(&wb), "/v1/jobs/only-a").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "B cannot read A's job");
    let claim = |w: String| {
        let api = api.clone();
        async move {
            api.post(
                Some(&w),
                "/v1/jobs/claim",
                json!({"worker": "w", "max": 10}),
            )
            .await
            .json["jobs"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        }
    };
    let jobs_b = claim(wb.clone()).await;
    assert_eq!(jobs_b.len(), 1, "B claims only its own job");
    assert_eq!(jobs_b[0]["text"], "text of b");
    let jobs_a = claim(wa.clone()).await;
    assert_eq!(jobs_a.len(), 2, "A's two jobs");
    assert!(jobs_a.iter().all(|j| j["text"] != "text of b"));
    // B cannot ack A's job, even holding A's lease token.
    let a_job = jobs_a.iter().find(|j| j["id"] == "only-a").unwrap();
    let ack = json!({"token": a_job["lease"]["token"], "result": {"model_id": "m", "vector": "AACAPw==", "source": "engine"}});
    let r = api
        .post(Some(&wb), "/v1/jobs/only-a/ack", ack.clone())
        .await;
    assert_eq!(
        r.status,
        StatusCode::NOT_FOUND,
        "B acking A's job: {}",
        r.text
    );
    let r = api.post(Some(&wa), "/v1/jobs/only-a/ack", ack).await;
    assert_eq!(r.status, StatusCode::OK, "A acks it");
    // The cache: A's entry is invisible to B, and B's lock or write never touches it.
    let key = ternflow_core::keys::cache_key("m", "shared text");
    let lock_a = api.post_empty(Some(&wa), &format!("/v1/locks/{key}")).await;
    let fence_a = lock_a.json["fence"].as_u64().unwrap();
    let put = |fence: u64, v: &str| json!({"model_id": "m", "vector": v, "fence": fence});
    let r = api
        .put(
            Some(&wa),
            &format!("/v1/cache/{key}"),
            put(fence_a, "AACAPw=="),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let r = api.get(Some(&wb), &format!("/v1/cache/{key}")).await;
    assert_eq!(
        r.status,
        StatusCode::NOT_FOUND,
        "no membership oracle across tenants"
    );
    let lock_b = api.post_empty(Some(&wb), &format!("/v1/locks/{key}")).await;
    assert_eq!(lock_b.status, StatusCode::OK, "B's lock space is its own");
    let r = api
        .put(
            Some(&wb),
            &format!("/v1/cache/{key}"),
            put(lock_b.json["fence"].as_u64().unwrap(), "AACAvw=="),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let r = api.get(Some(&wa), &format!("/v1/cache/{key}")).await;
    assert_eq!(r.json["vector"], "AACAPw==", "A's entry unchanged by B");
    // B's admin cannot redrive or list A's dead letters.
    let dead = jobs_a.iter().find(|j| j["id"] == "j").unwrap();
    let nack = json!({"token": dead["lease"]["token"], "error": {"code": "x", "message": "y", "retryable": false}});
    let r = api.post(Some(&wa), "/v1/jobs/j/nack", nack).await;
    assert_eq!(r.json["outcome"], "dead");
    let r = api.post_empty(Some(&ab), "/v1/dlq/j/redrive").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "B's admin: {}", r.text);
    let r = api.get(Some(&ab), "/v1/dlq").await;
    assert_eq!(r.json["entries"].as_array().unwrap().len(), 0);
    // The static tokens are the default tenant's: they see neither.
    let r = api.get(Some(common::WORKER), "/v1/jobs/only-a").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn tenants_are_isolated_on_the_in_memory_store() {
    let (s, _) = state(memory_factory(), Arc::new(MemoryStore::new()));
    isolation(Api(app(s))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_are_isolated_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_owned();
    let factory: StoreFactory = Arc::new(move |tenant| {
        let dir = root.join("tenants").join(tenant);
        Box::pin(async move {
            Ok(Arc::new(SqliteStore::open(
                &dir,
                ternflow_server::Synchronous::Normal,
            )?) as Arc<dyn ternflow_server::Store>)
        })
    });
    let default = Arc::new(
        SqliteStore::open(
            &dir.path().join("default"),
            ternflow_server::Synchronous::Normal,
        )
        .unwrap(),
    );
    let (s, _) = state(factory, default);
    isolation(Api(app(s))).await;
    assert!(dir.path().join("tenants/a/ternflow.sqlite3").exists());
    assert!(dir.path().join("tenants/b/ternflow.sqlite3").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_are_isolated_on_redis() {
    let redis = common::RedisServer::start();
    let url = redis.url();
    let u = url.clone();
    let factory: StoreFactory = Arc::new(move |tenant| {
        let u = u.clone();
        Box::pin(async move {
            Ok(
                Arc::new(RedisStore::connect(&u, &format!("tf:t:{tenant}")).await?)
                    as Arc<dyn ternflow_server::Store>,
            )
        })
    });
    let default = Arc::new(RedisStore::connect(&url, "tf").await.unwrap());
    let (s, _) = state(factory, default);
    isolation(Api(app(s))).await;
}

#[tokio::test]
async fn refused_tokens_and_scopes() {
    let (s, clock) = state(memory_factory(), Arc::new(MemoryStore::new()));
    let api = Api(app(s));
    let now = NOW_MS / 1_000;
    let mint = |kid: &str, secret: &[u8], exp: u64, nbf: Option<u64>, role: &str| {
        mint_hs256(
            kid,
            secret,
            &Claims {
                role: role.into(),
                tenant: "a".into(),
                exp,
                nbf,
                iat: Some(now),
                sub: None,
                claims_per_min: None,
            },
        )
        .unwrap()
    };
    let good = mint("k1", K1, now + 60, None, "worker");
    assert_eq!(
        api.get(Some(&good), "/v1/jobs/x").await.status,
        StatusCode::NOT_FOUND
    );
    let cases = [
        ("expired", mint("k1", K1, now - 60, None, "worker")),
        (
            "not yet valid",
            mint("k1", K1, now + 60, Some(now + 30), "worker"),
        ),
        ("wrong key", mint("k1", K2, now + 60, None, "worker")),
        ("unknown kid", mint("k3", K1, now + 60, None, "worker")),
        ("hours long", mint("k1", K1, now + 86_400, None, "worker")),
        ("tampered", {
            let mut p: Vec<String> = good.split('.').map(str::to_owned).collect();
            p[1].pop();
            p.join(".")
        }),
        ("unsigned", {
            use base64::engine::general_purpose::URL_SAFE_NO_PAD;
            let p: Vec<&str> = good.split('.').collect();
            format!(
                "{}.{}.",
                URL_SAFE_NO_PAD.encode(br#"{"alg":"none","kid":"k1"}"#),
                p[1]
            )
        }),
    ];
    for (what, t) in cases {
        let r = api.get(Some(&t), "/v1/jobs/x").await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{what}: {}", r.text);
        assert!(
            r.json["error"]["code"].as_str().is_some(),
            "{what}: a JSON error body"
        );
    }
    // Scopes: a worker cannot enqueue, redrive or read stats; a producer cannot claim.
    let r = api
        .post(Some(&good), "/v1/jobs", json!({"text": "x"}))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        api.post_empty(Some(&good), "/v1/dlq/x/redrive")
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        api.get(Some(&good), "/v1/stats").await.status,
        StatusCode::FORBIDDEN
    );
    let producer = mint("k2", K2, now + 60, None, "producer");
    let r = api
        .post(Some(&producer), "/v1/jobs/claim", json!({"worker": "w"}))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // Rotation: tokens of both keys are accepted at once.
    let r = api
        .post(Some(&producer), "/v1/jobs", json!({"text": "x"}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    // Time is the server's: the good token expires by its clock.
    clock.advance(120_000);
    assert_eq!(
        api.get(Some(&good), "/v1/jobs/x").await.status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_hears_only_its_own_events() {
    let (s, _) = {
        let clock = FakeClock::new(NOW_MS);
        let s = AppState::new(
            Arc::new(MemoryStore::new()),
            common::tokens(),
            Config {
                keepalive_ms: 200,
                ..Config::default()
            },
        )
        .with_clock(Arc::new(clock.clone()))
        .with_keys(keys())
        .with_tenant_stores(memory_factory());
        (s, clock)
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let done = tokio::spawn(ternflow_server::run(listener, s, async move {
        let _ = rx.await;
    }));
    let http = reqwest::Client::new();
    let open = |t: String| {
        let http = http.clone();
        let base = base.clone();
        async move {
            http.get(format!("{base}/v1/events?token={t}"))
                .send()
                .await
                .unwrap()
                .bytes_stream()
        }
    };
    let mut sa = open(token("k1", "worker", "a")).await;
    let mut sb = open(token("k1", "worker", "b")).await;
    let r = http
        .post(format!("{base}/v1/jobs"))
        .bearer_auth(token("k1", "producer", "a"))
        .json(&json!({"text": "for a"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let a_text = read_for(&mut sa, 800).await;
    let b_text = read_for(&mut sb, 800).await;
    let a_jobs: Vec<Value> = events(&a_text, "jobs");
    let b_jobs: Vec<Value> = events(&b_text, "jobs");
    assert!(
        a_jobs.iter().any(|d| d["depth"] == 1),
        "A hears its enqueue: {a_text}"
    );
    assert!(
        b_jobs.iter().all(|d| d["depth"] == 0),
        "B hears nothing of A's queue: {b_text}"
    );
    drop((sa, sb));
    stop.send(()).unwrap();
    done.await.unwrap().unwrap();
}

/// Everything a stream sends within `ms`.
async fn read_for(
    s: &mut (impl futures_util::Stream<Item = reqwest::Result<axum::body::Bytes>> + Unpin),
    ms: u64,
) -> String {
    let mut text = String::new();
    let end = tokio::time::Instant::now() + Duration::from_millis(ms);
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(end, s.next()).await {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    text
}

fn events(text: &str, name: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter(|frame| frame.lines().any(|l| l == format!("event: {name}")))
        .filter_map(|frame| {
            frame
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .and_then(|d| serde_json::from_str(d).ok())
        })
        .collect()
}

#[tokio::test]
async fn a_token_may_limit_its_own_claims() {
    let (s, _) = state(memory_factory(), Arc::new(MemoryStore::new()));
    let api = Api(app(s));
    let now = NOW_MS / 1_000;
    let limited = mint_hs256(
        "k1",
        K1,
        &Claims {
            role: "worker".into(),
            tenant: "a".into(),
            exp: now + 600,
            nbf: None,
            iat: Some(now),
            sub: None,
            claims_per_min: Some(2),
        },
    )
    .unwrap();
    let claim = json!({"worker": "w", "max": 1});
    for _ in 0..2 {
        let r = api
            .post(Some(&limited), "/v1/jobs/claim", claim.clone())
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    }
    let r = api
        .post(Some(&limited), "/v1/jobs/claim", claim.clone())
        .await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
    assert!(r.headers.contains_key("retry-after"));
    // Other routes and other tokens are not affected.
    assert_eq!(
        api.get(Some(&limited), "/v1/jobs/x").await.status,
        StatusCode::NOT_FOUND
    );
    let other = token("k1", "worker", "a");
    let r = api.post(Some(&other), "/v1/jobs/claim", claim).await;
    assert_eq!(r.status, StatusCode::OK);
}
