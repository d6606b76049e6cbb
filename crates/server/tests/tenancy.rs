//! What one signed token can still read, spend or break, tried against a real server (the
//! accept loop on a TCP port, reqwest as the client) on SQLite and on Redis: exact claims, the
//! reserved `default` tenant, a claim limit of zero, per-tenant worker tables and stats,
//! client-chosen names kept out of logs, per-token long polls, per-address connections, embed
//! budgets (held across a fleet of servers sharing one Redis), per-tenant quotas, and tenants
//! closed and reopened (LRU) without losing a job or leaving an event stream hanging. docs/security.md's table of roles points at these tests.

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use futures_util::StreamExt;
use reqwest::StatusCode;
use serde_json::{json, Value};
use ternflow_server::jwt::{mint_hs256, Claims, Keys};
use ternflow_server::quota::{QuotaOverride, Quotas};
use ternflow_server::tenants::StoreFactory;
use ternflow_server::{AppState, Config, HashEmbedder, RedisStore, SqliteStore, Store};

const SECRET: &[u8] = b"tenancy-secret-tenancy-secret-32";
/// `[1.0]` as little-endian f32, base64: a unit vector of a one-dimensional model.
const UNIT: &str = "AACAPw==";

/// Where the tenants' stores live.
enum Backend {
    Sqlite(Arc<tempfile::TempDir>),
    /// A Redis server, shared by every server of a fleet started on a clone.
    Redis(Arc<std::sync::Mutex<common::RedisServer>>),
}

impl Backend {
    fn sqlite() -> Self {
        Backend::Sqlite(Arc::new(tempfile::tempdir().unwrap()))
    }

    fn redis() -> Self {
        Backend::Redis(Arc::new(
            std::sync::Mutex::new(common::RedisServer::start()),
        ))
    }

    /// The same Redis, for a second server of a fleet; the same data directory, for the
    /// server that follows one stopped (an embedded database is one server's at a time).
    fn share(&self) -> Self {
        match self {
            Backend::Redis(r) => Backend::Redis(r.clone()),
            Backend::Sqlite(d) => Backend::Sqlite(d.clone()),
        }
    }

    fn redis_url(&self) -> String {
        match self {
            Backend::Redis(r) => r.lock().unwrap().url(),
            Backend::Sqlite(_) => panic!("not Redis"),
        }
    }

    async fn default_store(&self) -> Arc<dyn Store> {
        match self {
            Backend::Sqlite(d) => Arc::new(
                SqliteStore::open(
                    &d.path().join("default"),
                    ternflow_server::Synchronous::Normal,
                )
                .unwrap(),
            ),
            Backend::Redis(_) => {
                Arc::new(RedisStore::connect(&self.redis_url(), "tf").await.unwrap())
            }
        }
    }

    fn factory(&self) -> StoreFactory {
        match self {
            Backend::Sqlite(d) => {
                let root = d.path().join("tenants");
                Arc::new(move |tenant| {
                    let dir = root.join(tenant);
                    Box::pin(async move {
                        Ok(Arc::new(SqliteStore::open(
                            &dir,
                            ternflow_server::Synchronous::Normal,
                        )?) as Arc<dyn Store>)
                    })
                })
            }
            Backend::Redis(_) => {
                let url = self.redis_url();
                Arc::new(move |tenant| {
                    let url = url.clone();
                    Box::pin(async move {
                        Ok(
                            Arc::new(RedisStore::connect(&url, &format!("tf:t:{tenant}")).await?)
                                as Arc<dyn Store>,
                        )
                    })
                })
            }
        }
    }
}

/// A running server and a client for it.
struct Server {
    base: String,
    http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    _backend: Backend,
}

impl Server {
    async fn start(backend: Backend, mut config: Config) -> Server {
        config.verify.enabled = false;
        let state = AppState::new(backend.default_store().await, common::tokens(), config)
            .with_keys(Keys::parse(&format!("k1:hs256:{}", STANDARD.encode(SECRET))).unwrap())
            .with_tenant_stores(backend.factory())
            .with_embedder(Arc::new(HashEmbedder::default()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, rx) = tokio::sync::oneshot::channel::<()>();
        let done = tokio::spawn(ternflow_server::run(listener, state, async move {
            let _ = rx.await;
        }));
        Server {
            base,
            http: reqwest::Client::new(),
            stop: Some(stop),
            done: Some(done),
            _backend: backend,
        }
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(d) = self.done.take() {
            d.await.unwrap().unwrap();
        }
    }

    async fn call(&self, method: &str, path: &str, token: &str, body: Option<Value>) -> Resp {
        let mut req = self
            .http
            .request(method.parse().unwrap(), format!("{}{path}", self.base))
            .bearer_auth(token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.unwrap();
        let status = r.status();
        let retry_after = r
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let text = r.text().await.unwrap();
        Resp {
            status,
            json: serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
            retry_after,
        }
    }

    async fn get(&self, path: &str, token: &str) -> Resp {
        self.call("GET", path, token, None).await
    }

    async fn post(&self, path: &str, token: &str, body: Value) -> Resp {
        self.call("POST", path, token, Some(body)).await
    }
}

struct Resp {
    status: StatusCode,
    json: Value,
    text: String,
    retry_after: Option<u64>,
}

/// The claims of a signed token of `role` in `tenant`, written by `sub`.
fn claims(role: &str, tenant: &str, sub: &str) -> Claims {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    Claims {
        role: role.into(),
        tenant: tenant.into(),
        exp: now + 600,
        nbf: None,
        iat: Some(now),
        sub: Some(sub.into()),
        claims_per_min: None,
    }
}

fn mint(c: &Claims) -> String {
    mint_hs256("k1", SECRET, c).unwrap()
}

fn token(role: &str, tenant: &str, sub: &str) -> String {
    mint(&claims(role, tenant, sub))
}

fn snapshot(worker: &str) -> Value {
    json!({"worker": worker, "counters": {"jobs_done": 1}, "gauges": {"in_flight": 0}})
}

/// Items 1, 3 and 5 of the review: claims that are not exactly right are refused with 401.
async fn exact_claims(s: &Server) {
    let good = token("admin", "acme", "ops");
    assert_eq!(s.get("/v1/stats", &good).await.status, StatusCode::OK);
    let bad = [
        ("a role with a trailing space", {
            let mut c = claims("admin", "acme", "ops");
            c.role = "admin ".into();
            c
        }),
        ("a capitalised role", {
            let mut c = claims("admin", "acme", "ops");
            c.role = "Admin".into();
            c
        }),
        (
            "the static tokens' tenant",
            claims("admin", "default", "ops"),
        ),
        ("a claim limit of zero", {
            let mut c = claims("worker", "acme", "v");
            c.claims_per_min = Some(0);
            c
        }),
        ("an absurd claim limit", {
            let mut c = claims("worker", "acme", "v");
            c.claims_per_min = Some(u32::MAX);
            c
        }),
        (
            "a sub with a newline",
            claims("worker", "acme", "v\nINFO forged"),
        ),
    ];
    for (what, c) in bad {
        let r = s.get("/v1/jobs/x", &mint(&c)).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{what}: {}", r.text);
        assert_eq!(r.json["error"]["code"], "bad_token", "{what}");
    }
    // A limit that is a limit is kept: one claim a minute, the second refused.
    let mut c = claims("worker", "acme", "v1");
    c.claims_per_min = Some(1);
    let limited = mint(&c);
    let claim = json!({"worker": "w", "max": 1});
    assert_eq!(
        s.post("/v1/jobs/claim", &limited, claim.clone())
            .await
            .status,
        StatusCode::OK
    );
    let r = s.post("/v1/jobs/claim", &limited, claim).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
}

/// Items 2 and 6: each tenant's workers are its own, in its stats and metrics; one identity
/// inventing names replaces only its own rows.
async fn workers_per_tenant(s: &Server) {
    let (wa, wb) = (
        token("worker", "ta", "alice"),
        token("worker", "tb", "mallory"),
    );
    let (aa, ab) = (token("admin", "ta", "ops-a"), token("admin", "tb", "ops-b"));
    let r = s.post("/v1/metrics", &wa, snapshot("a-browser-1")).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    // B posts 1 001 names: A's row stays, and B holds at most 16 rows (one identity).
    for i in 0..1_001 {
        let r = s
            .post("/v1/metrics", &wb, snapshot(&format!("flood-{i}")))
            .await;
        assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    }
    let stats_a = s.get("/v1/stats", &aa).await;
    assert_eq!(stats_a.status, StatusCode::OK, "{}", stats_a.text);
    let workers_a = stats_a.json["workers"].as_object().unwrap();
    assert_eq!(
        workers_a.keys().collect::<Vec<_>>(),
        ["a-browser-1"],
        "A's admin sees A's worker only, and B's flood evicted nothing of A's"
    );
    assert!(
        stats_a.json["counters"].get("jobs_acked").is_some()
            && stats_a.json["counters"].get("embed_requests").is_none(),
        "a tenant admin gets its tenant's counters, not the server's: {}",
        stats_a.json["counters"]
    );
    let stats_b = s.get("/v1/stats", &ab).await;
    let workers_b = stats_b.json["workers"].as_object().unwrap();
    assert_eq!(workers_b.len(), ternflow_server::workers::MAX_NAMES_PER_SUB);
    assert!(workers_b.contains_key("flood-1000") && !workers_b.contains_key("a-browser-1"));
    let metrics_b = s.get("/metrics", &ab).await;
    assert_eq!(metrics_b.status, StatusCode::OK);
    assert!(
        !metrics_b.text.contains("a-browser-1"),
        "B's /metrics shows A's worker"
    );
    assert!(
        !metrics_b.text.contains("tenant=\"ta\""),
        "B's /metrics names tenant A"
    );
    assert!(
        !metrics_b.text.contains("ternflow_jobs_acked_total "),
        "B's /metrics has the server's counters"
    );
    assert!(metrics_b
        .text
        .contains("ternflow_tenant_quota{tenant=\"tb\",quota=\"max_queue\"}"));
    assert!(metrics_b
        .text
        .contains("ternflow_tenant_queue{tenant=\"tb\",state=\"ready\"} 0"));
    // The operator sees every open tenant's usage, labelled, and the server's counters.
    let op = s.get("/metrics", common::ADMIN).await;
    assert!(op.text.contains("ternflow_jobs_acked_total "));
    assert!(op.text.contains("ternflow_tenant_workers{tenant=\"ta\"} 1"));
    assert!(op
        .text
        .contains("ternflow_tenant_workers{tenant=\"tb\"} 16"));
}

/// Item 4: names that could forge a log line or a page are refused where they enter.
async fn client_strings_are_checked(s: &Server) {
    let w = token("worker", "logs", "v1");
    for name in ["w\nINFO ternflow: admin logged in", "w\u{1b}[2J", "w 1", ""] {
        let r = s.post("/v1/metrics", &w, snapshot(name)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "metrics {name:?}");
        assert_eq!(r.json["error"]["code"], "bad_worker");
        let r = s
            .post("/v1/jobs/claim", &w, json!({"worker": name, "max": 1}))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "claim {name:?}");
    }
}

/// Item 7: one token cannot hold every long poll; another token's poll still waits.
async fn long_polls_per_token(s: &Server, max: usize) {
    let w1 = token("worker", "polls", "v1");
    let w2 = token("worker", "polls", "v2");
    let poll = |t: String| {
        let s_http = s.http.clone();
        let url = format!("{}/v1/jobs/claim", s.base);
        async move {
            s_http
                .post(url)
                .bearer_auth(t)
                .json(&json!({"worker": "w", "max": 1, "wait_ms": 1_500}))
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    let waiting: Vec<_> = (0..max).map(|_| tokio::spawn(poll(w1.clone()))).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        poll(w1.clone()).await,
        StatusCode::TOO_MANY_REQUESTS,
        "a token past its long polls"
    );
    let started = std::time::Instant::now();
    assert_eq!(poll(w2).await, StatusCode::OK, "another token's long poll");
    assert!(
        started.elapsed() >= Duration::from_millis(1_000),
        "it waited"
    );
    for h in waiting {
        assert_eq!(h.await.unwrap(), StatusCode::OK);
    }
}

/// Item 8: `POST /v1/embed` spends a budget per token and per tenant.
async fn embed_budget(s: &Server) {
    let text = "x".repeat(396); // 1 + 396/4 = 100 units
    let e1 = token("worker", "spender", "v1");
    let e2 = token("worker", "spender", "v2");
    let other = token("worker", "frugal", "v3");
    let body = json!({"texts": [text]});
    // Token budget 300 a minute, tenant budget 500: v1 gets 3 requests, then 429.
    for i in 0..3 {
        let r = s.post("/v1/embed", &e1, body.clone()).await;
        assert_eq!(r.status, StatusCode::OK, "request {i}: {}", r.text);
    }
    let r = s.post("/v1/embed", &e1, body.clone()).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
    assert_eq!(r.json["error"]["code"], "quota_exceeded");
    assert!(r.retry_after.is_some_and(|s| s >= 1), "Retry-After");
    // v2 has a budget of its own, but the tenant's (500) runs out after two more.
    for _ in 0..2 {
        assert_eq!(
            s.post("/v1/embed", &e2, body.clone()).await.status,
            StatusCode::OK
        );
    }
    let r = s.post("/v1/embed", &e2, body.clone()).await;
    assert_eq!(
        r.status,
        StatusCode::TOO_MANY_REQUESTS,
        "the tenant's budget: {}",
        r.text
    );
    // Another tenant is untouched.
    assert_eq!(
        s.post("/v1/embed", &other, body).await.status,
        StatusCode::OK
    );
    // A request bigger than a whole minute's budget says so.
    let huge = json!({"texts": vec!["y".repeat(600); 8]});
    let r = s.post("/v1/embed", &other, huge).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(r.text.contains("whole budget"), "{}", r.text);
    // One long text is embedded whole (a forward per 126 word pieces), so it costs its length:
    // 2 400 bytes = 601 units, over a minute's budget (it cost one window, 128, when the engine
    // cut texts there).
    let long = json!({"texts": ["z ".repeat(1_200)]});
    let r = s.post("/v1/embed", &other, long).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
    assert!(r.text.contains("601 embed units"), "{}", r.text);
}

/// Per-tenant quotas: queue depth and workers.
async fn quotas(s: &Server) {
    let p = token("producer", "small", "app");
    let w = token("worker", "small", "v1");
    let w2 = token("worker", "small", "v2");
    let jobs: Vec<Value> = (0..3)
        .map(|i| json!({"id": format!("q{i}"), "text": format!("t{i}"), "model_id": "m"}))
        .collect();
    let r = s.post("/v1/jobs", &p, json!({ "jobs": jobs })).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = s
        .post(
            "/v1/jobs",
            &p,
            json!({"id": "q3", "text": "t3", "model_id": "m"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
    assert_eq!(r.json["error"]["code"], "quota_exceeded");
    // Another tenant's queue is not this one's.
    let r = s
        .post(
            "/v1/jobs",
            &token("producer", "roomy", "app"),
            json!({"id": "q3", "text": "t3", "model_id": "m"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    // Workers: two names fit the quota, the third is refused.
    assert_eq!(
        s.post("/v1/metrics", &w, snapshot("one")).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        s.post("/v1/metrics", &w2, snapshot("two")).await.status,
        StatusCode::NO_CONTENT
    );
    let r = s.post("/v1/metrics", &w2, snapshot("three")).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
    assert_eq!(r.json["error"]["code"], "quota_exceeded");
    let m = s.get("/metrics", &token("admin", "small", "ops")).await;
    assert!(
        m.text
            .contains("ternflow_tenant_quota_refused_total{tenant=\"small\"} 2"),
        "{}",
        m.text
    );
}

/// The cache-bytes quota: writes past it are refused with 429; another tenant's cache is its own.
async fn cache_quota(s: &Server) {
    let put = |tenant: &'static str, text: String| async move {
        let w = token("worker", tenant, "v1");
        let key = ternflow_core::keys::cache_key("m", &text);
        let r = s.post(&format!("/v1/locks/{key}"), &w, json!({})).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        let fence = r.json["fence"].as_u64().unwrap();
        let body = json!({"model_id": "m", "vector": UNIT, "fence": fence, "text": text});
        (
            s.call("PUT", &format!("/v1/cache/{key}"), &w, Some(body))
                .await,
            key,
        )
    };
    let (r, key) = put("small", "c0".into()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let one = ternflow_server::quota::entry_bytes(&key, 1);
    // The quota (config()) holds two entries, not three.
    assert_eq!(
        put("small", "c1".into()).await.0.status,
        StatusCode::CREATED
    );
    let (r, _) = put("small", "c2".into()).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
    assert_eq!(r.json["error"]["code"], "quota_exceeded");
    assert!(r.retry_after.is_some());
    assert_eq!(
        put("roomy", "c2".into()).await.0.status,
        StatusCode::CREATED
    );
    let m = s.get("/metrics", &token("admin", "small", "ops")).await;
    assert!(
        m.text.contains(&format!(
            "ternflow_tenant_cache_bytes{{tenant=\"small\"}} {}",
            2 * one
        )),
        "{}",
        m.text
    );
    assert!(
        m.text.contains(&format!(
            "ternflow_tenant_quota{{tenant=\"small\",quota=\"max_cache_bytes\"}} {}",
            2 * one + 1
        )),
        "{}",
        m.text
    );
    assert!(!m.text.contains("roomy"), "{}", m.text);
}

fn config() -> Config {
    Config {
        max_polls_per_token: 2,
        embed_tokens_per_min: 300,
        quotas: Quotas {
            embed_tokens_per_min: 500,
            ..Quotas::default()
        },
        tenant_quotas: [(
            "small".to_owned(),
            QuotaOverride {
                max_queue: Some(3),
                max_workers: Some(2),
                // Two one-dimensional entries (cache_quota), not three.
                max_cache_bytes: Some(
                    2 * ternflow_server::quota::entry_bytes(
                        &ternflow_core::keys::cache_key("m", "c0"),
                        1,
                    ) + 1,
                ),
                ..QuotaOverride::default()
            },
        )]
        .into(),
        ..Config::default()
    }
}

async fn everything(backend: Backend) {
    let s = Server::start(backend, config()).await;
    exact_claims(&s).await;
    workers_per_tenant(&s).await;
    client_strings_are_checked(&s).await;
    long_polls_per_token(&s, 2).await;
    embed_budget(&s).await;
    quotas(&s).await;
    cache_quota(&s).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_token_can_read_spend_and_break_on_sqlite() {
    everything(Backend::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_token_can_read_spend_and_break_on_redis() {
    everything(Backend::redis()).await;
}

/// Item 7, connections: one address's idle sockets use up its own share, not everyone's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sockets_of_one_address_leave_room_for_others() {
    let s = Server::start(
        Backend::sqlite(),
        Config {
            max_connections: 64,
            max_connections_per_ip: 8,
            ..Config::default()
        },
    )
    .await;
    let addr: std::net::SocketAddr = s.base.trim_start_matches("http://").parse().unwrap();
    let mut idle = Vec::new();
    for _ in 0..8 {
        idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The ninth from the same address is closed at once: a request on it gets no answer.
    let r = s.http.get(format!("{}/healthz", s.base)).send().await;
    assert!(r.is_err(), "a ninth connection from 127.0.0.1 was served");
    // Another address (127.0.0.2, loopback too) is served.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut other = sock.connect(addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    other
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    other.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Closing the idle ones frees the address's share.
    drop(idle);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = s
        .http
        .get(format!("{}/healthz", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    s.stop().await;
}

/// Item 9: tenants past the open bound are closed and reopened on demand with nothing lost;
/// an event stream of a closing tenant ends, and its client reconnects.
async fn lru_tenants(backend: Backend) {
    let s = Server::start(
        backend,
        Config {
            max_open_tenants: 2,
            ..Config::default()
        },
    )
    .await;
    // An event stream of tenant t0, then enough other tenants to close t0.
    let w0 = token("worker", "t0", "v0");
    let mut stream = s
        .http
        .get(format!("{}/v1/events?token={w0}", s.base))
        .send()
        .await
        .unwrap()
        .bytes_stream();
    let first = tokio::time::timeout(Duration::from_secs(5), stream.next()).await;
    assert!(matches!(first, Ok(Some(Ok(_)))), "the stream's hello");
    for i in 0..6 {
        let t = format!("t{i}");
        let r = s
            .post(
                "/v1/jobs",
                &token("producer", &t, "app"),
                json!({"id": "j", "text": format!("job of {t}"), "model_id": "m"}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{t}: {}", r.text);
    }
    // t0 was closed: its stream ended (the client reconnects, as EventSource does).
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(_)) = stream.next().await {}
    })
    .await;
    assert!(ended.is_ok(), "the closed tenant's stream did not end");
    let op = s.get("/metrics", common::ADMIN).await;
    let open: u64 = op
        .text
        .lines()
        .find_map(|l| l.strip_prefix("ternflow_tenants_open "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(open <= 2, "open tenants {open}");
    assert!(op.text.contains("ternflow_tenants_closed_total "));
    // Every tenant's job is still there to claim and ack, after its tenant was closed.
    for i in 0..6 {
        let t = format!("t{i}");
        let w = token("worker", &t, "v");
        let r = s
            .post("/v1/jobs/claim", &w, json!({"worker": "w", "max": 1}))
            .await;
        let jobs = r.json["jobs"].as_array().cloned().unwrap_or_default();
        assert_eq!(jobs.len(), 1, "{t}: {}", r.text);
        assert_eq!(jobs[0]["text"], format!("job of {t}"));
        let ack = json!({"token": jobs[0]["lease"]["token"], "result": {"model_id": "m", "vector": UNIT, "source": "engine"}});
        let r = s.post("/v1/jobs/j/ack", &w, ack).await;
        assert_eq!(r.status, StatusCode::OK, "{t}: {}", r.text);
        let r = s.get("/v1/jobs/j", &w).await;
        assert_eq!(r.json["state"], "done", "{t}");
    }
    // The stream reconnects to the reopened tenant.
    let mut again = s
        .http
        .get(format!("{}/v1/events?token={w0}", s.base))
        .send()
        .await
        .unwrap()
        .bytes_stream();
    let hello = tokio::time::timeout(Duration::from_secs(5), again.next()).await;
    assert!(matches!(hello, Ok(Some(Ok(_)))), "reconnected");
    drop(again);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_close_and_reopen_without_loss_on_sqlite() {
    lru_tenants(Backend::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_close_and_reopen_without_loss_on_redis() {
    lru_tenants(Backend::redis()).await;
}

/// What a token may spend a minute holds across a fleet: two servers on one Redis give a token
/// one embed budget, its tenant one, and a `claims_per_min` token one claim budget, not one per
/// server (each server's own buckets would let every request below through). That a refused
/// request spends neither budget is `store_conformance.rs::redis_budgets_pay_all_or_none`'s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_hold_across_a_fleet_on_redis() {
    // A 429 `quota_exceeded` naming whose budget refused.
    let refused_by = |r: &Resp, who: &str| {
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
        assert_eq!(r.json["error"]["code"], "quota_exceeded");
        let message = r.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(who), "{}", r.text);
    };
    let backend = Backend::redis();
    let a = Server::start(backend.share(), config()).await;
    let b = Server::start(backend, config()).await;
    // 100 units a request. The token's 300 a minute: three over the two servers, the fourth
    // refused.
    let body = json!({"texts": ["x".repeat(396)]});
    let e1 = token("worker", "fleet", "v1");
    for (i, s) in [&a, &b, &a].into_iter().enumerate() {
        let r = s.post("/v1/embed", &e1, body.clone()).await;
        assert_eq!(r.status, StatusCode::OK, "request {i}: {}", r.text);
    }
    let r = b.post("/v1/embed", &e1, body.clone()).await;
    refused_by(&r, "this token's");
    let wait = r.retry_after.expect("Retry-After");
    assert!((1..=21).contains(&wait), "Retry-After {wait}");
    // The tenant's 500: another token gets two more, on either server; the third is refused
    // as the tenant's.
    let e2 = token("worker", "fleet", "v2");
    for s in [&b, &a] {
        assert_eq!(
            s.post("/v1/embed", &e2, body.clone()).await.status,
            StatusCode::OK
        );
    }
    refused_by(
        &b.post("/v1/embed", &e2, body.clone()).await,
        "the tenant's",
    );
    // A request bigger than a minute's budget says so, on the shared budgets too.
    let huge = json!({"texts": vec!["y".repeat(600); 8]});
    let r = a
        .post("/v1/embed", &token("worker", "other", "v3"), huge)
        .await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.retry_after, Some(60), "{}", r.text);
    // Two claims a minute for this token, whichever server it asks.
    let mut c = claims("worker", "fleet", "v4");
    c.claims_per_min = Some(2);
    let limited = mint(&c);
    let claim = json!({"worker": "w", "max": 1});
    for s in [&a, &b] {
        let r = s.post("/v1/jobs/claim", &limited, claim.clone()).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    }
    let r = a.post("/v1/jobs/claim", &limited, claim.clone()).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
    a.stop().await;
    b.stop().await;
}

/// A tenant admin's counters are the tenant's over its life: every server's together (two
/// servers on one Redis) and kept across a restart (a server started afresh on the same store);
/// `/metrics` keeps each server's own.
async fn enqueue_counted(s: &Server, ids: std::ops::Range<u32>) {
    let jobs: Vec<Value> = ids
        .map(|i| json!({"id": format!("u{i}"), "text": format!("t{i}"), "model_id": "m"}))
        .collect();
    let p = token("producer", "counted", "app");
    let r = s.post("/v1/jobs", &p, json!({ "jobs": jobs })).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

async fn usage_is_the_tenants(backend: Backend, fleet: bool) {
    let enqueue = enqueue_counted;
    let admin = token("admin", "counted", "ops");
    let enqueued = |r: &Resp| r.json["counters"]["jobs_enqueued"].as_u64();
    let a = Server::start(backend.share(), config()).await;
    enqueue(&a, 0..2).await;
    if fleet {
        let b = Server::start(backend.share(), config()).await;
        enqueue(&b, 2..5).await;
        // A's answer has B's three once B's flusher has run (every second), and its own two
        // before its own has.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let r = a.get("/v1/stats", &admin).await;
        assert_eq!(enqueued(&r), Some(5), "{}", r.text);
        let r = b.get("/v1/stats", &admin).await;
        assert_eq!(enqueued(&r), Some(5), "{}", r.text);
        b.stop().await;
    } else {
        enqueue(&a, 2..5).await;
        let r = a.get("/v1/stats", &admin).await;
        assert_eq!(enqueued(&r), Some(5), "before it was saved: {}", r.text);
    }
    // Each server's /metrics: its own.
    let m = a.get("/metrics", &admin).await;
    assert!(
        m.text.contains(&format!(
            "ternflow_tenant_jobs_enqueued_total{{tenant=\"counted\"}} {}",
            if fleet { 2 } else { 5 }
        )),
        "{}",
        m.text
    );
    a.stop().await;
    // A server started afresh (no flusher step since the last enqueue: shutdown saved it).
    let c = Server::start(backend, config()).await;
    let r = c.get("/v1/stats", &admin).await;
    assert_eq!(enqueued(&r), Some(5), "{}", r.text);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_the_tenants_on_sqlite() {
    usage_is_the_tenants(Backend::sqlite(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_the_tenants_on_redis() {
    usage_is_the_tenants(Backend::redis(), true).await;
}

/// Counts a flush could not save (Redis killed) are kept and saved once Redis is back: the
/// store's total reaches what the server counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_counts_outlive_a_restarted_redis() {
    let backend = Backend::redis();
    let Backend::Redis(redis) = backend.share() else {
        unreachable!()
    };
    let url = backend.redis_url();
    let a = Server::start(backend, config()).await;
    enqueue_counted(&a, 0..5).await;
    // Killed before the flusher's next step (every second), down for a few of its steps.
    redis.lock().unwrap().kill9();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    redis.lock().unwrap().restart();
    let client = ::redis::Client::open(url).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let saved: Option<u64> = async {
            let mut con = client.get_multiplexed_async_connection().await.ok()?;
            ::redis::cmd("HGET")
                .arg("{tf:t:counted}:usage")
                .arg("jobs_enqueued")
                .query_async(&mut con)
                .await
                .ok()?
        }
        .await;
        if saved == Some(5) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the store holds {saved:?} enqueued, the server counted 5"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    a.stop().await;
}
