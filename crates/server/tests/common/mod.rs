//! Test helpers: a real `redis-server` on a free port (or `valkey-server`, or a cluster of
//! either: `cluster`), and HTTP helpers over the router.
#![allow(dead_code, unreachable_pub)]

pub mod cluster;

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child with AOF on (`appendfsync always`) in a temp dir, killed on drop.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    /// The server program (`redis-server`, or the path of a `valkey-server`).
    bin: String,
    /// Arguments after the defaults (cluster mode, …).
    extra: Vec<String>,
    /// Started through [`cluster::in_keeper`]: dies with the test process.
    kept: bool,
    /// Started once: a restart keeps its port.
    started: bool,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The process id of the Redis answering on `port` (`INFO server`), `None` while none answers.
fn server_pid(port: u16) -> Option<u32> {
    use std::io::{Read, Write};
    let mut c = TcpStream::connect(("127.0.0.1", port)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    c.write_all(b"INFO server\r\n").ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got);
        if let Some(at) = text.find("process_id:") {
            let rest = &text[at + "process_id:".len()..];
            if let Some(end) = rest.find("\r\n") {
                return rest[..end].trim().parse().ok();
            }
        }
        let n = c.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
    }
}

impl RedisServer {
    pub fn start() -> Self {
        Self::start_with("redis-server", &[])
    }

    /// Starts `bin` (a `redis-server` or `valkey-server`) with `extra` arguments.
    pub fn start_with(bin: &str, extra: &[&str]) -> Self {
        let mut s = Self::unstarted(bin, extra);
        s.spawn();
        s
    }

    pub(crate) fn unstarted(bin: &str, extra: &[&str]) -> Self {
        RedisServer {
            child: None,
            port: free_port(),
            dir: tempfile::tempdir().unwrap(),
            bin: bin.to_owned(),
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            kept: false,
            started: false,
        }
    }

    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_owned()
    }

    /// Starts the server and waits until it answers as itself. Its first start picks another
    /// free port if the one chosen was taken meanwhile (tests run in parallel; a Redis that
    /// cannot bind exits, and the test would otherwise talk to another test's server); a restart
    /// keeps its port, so a taken one fails the test.
    pub(crate) fn spawn(&mut self) {
        let mut last = String::new();
        for _ in 0..5 {
            match self.try_spawn() {
                Ok(()) => {
                    self.started = true;
                    return;
                }
                Err(e) if !self.started => {
                    last = e;
                    self.port = free_port();
                }
                Err(e) => panic!("{e}"),
            }
        }
        panic!("no free port for {} after 5 tries: {last}", self.bin);
    }

    fn try_spawn(&mut self) -> Result<(), String> {
        let mut cmd = Command::new(&self.bin);
        cmd.args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--protected-mode", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let spawned = if self.kept {
            cluster::in_keeper(cmd)
        } else {
            cmd.spawn()
        };
        let child = spawned.unwrap_or_else(|e| {
            panic!(
                "these tests need a real Redis: could not start `{}` ({e}). Install it \
                 (scripts/setup.sh; Debian: apt-get install -y redis-server) and put it on PATH.",
                self.bin
            )
        });
        let pid = child.id();
        self.child = Some(child);
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                return Err(format!("{} on port {} exited ({st})", self.bin, self.port));
            }
            if let Some(answering) = server_pid(self.port) {
                if answering == pid {
                    return Ok(());
                }
                self.kill9();
                return Err(format!(
                    "port {} answers as process {answering}, not {pid}",
                    self.port
                ));
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis-server did not start listening on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// `kill -9` the server (no shutdown save: only the AOF survives).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // SIGKILL on Unix
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port and directory (replaying the AOF).
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::Value;
use ternflow_server::{AppState, Config, FakeClock, HashEmbedder, MemoryStore, Role, Tokens};
use tower::ServiceExt;

pub const PRODUCER: &str = "tok-producer";
pub const WORKER: &str = "tok-worker";
pub const ADMIN: &str = "tok-admin";
/// A worker token holding the characters that must be percent-encoded in a URL.
pub const WORKER_B64: &str = "w/+tok==";

pub fn tokens() -> Tokens {
    let mut t = Tokens::new();
    t.insert(PRODUCER, Role::Producer);
    t.insert(WORKER, Role::Worker);
    t.insert(ADMIN, Role::Admin);
    t.insert(WORKER_B64, Role::Worker);
    t
}

/// State over an in-memory embedded store, a fake clock and the hash embedder, with result
/// recomputation off (tests of the queue send one made-up vector for every text;
/// tests/integrity.rs covers verification).
pub fn state_with(mut config: Config) -> (AppState, FakeClock) {
    config.verify.enabled = false;
    let clock = FakeClock::new(1_000_000);
    let state = AppState::new(Arc::new(MemoryStore::new()), tokens(), config)
        .with_clock(Arc::new(clock.clone()))
        .with_embedder(Arc::new(HashEmbedder::default()));
    (state, clock)
}

pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub json: Value,
    pub text: String,
    /// The raw body.
    pub bytes: Vec<u8>,
}

pub async fn call_raw(
    app: &Router,
    method: &str,
    uri: &str,
    token: Option<&str>,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Resp {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let resp = app
        .clone()
        .oneshot(req.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Resp {
        status,
        headers,
        json,
        text,
        bytes: bytes.to_vec(),
    }
}

pub async fn call(
    app: &Router,
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Resp {
    match body {
        Some(b) => {
            call_raw(
                app,
                method,
                uri,
                token,
                Some("application/json"),
                serde_json::to_vec(&b).unwrap(),
            )
            .await
        }
        None => call_raw(app, method, uri, token, None, Vec::new()).await,
    }
}

/// Takes the lock on `key` and returns its fence (the fence a `PUT /v1/cache/{key}` must carry).
pub async fn lock_fence(app: &Router, key: &str) -> u64 {
    let r = call(app, "POST", &format!("/v1/locks/{key}"), Some(WORKER), None).await;
    assert_eq!(r.status, StatusCode::OK, "lock {key}: {}", r.text);
    r.json["fence"].as_u64().unwrap()
}

/// The router as a test client: one method per HTTP verb, the token first (`None` for an
/// anonymous call), then the path and the JSON body; every answer a [`Resp`].
#[derive(Clone)]
pub struct Api(pub Router);

#[allow(dead_code)] // each test binary uses its own subset
impl Api {
    pub async fn get(&self, token: Option<&str>, path: &str) -> Resp {
        call(&self.0, "GET", path, token, None).await
    }
    pub async fn post(&self, token: Option<&str>, path: &str, body: Value) -> Resp {
        call(&self.0, "POST", path, token, Some(body)).await
    }
    /// A `POST` without a body.
    pub async fn post_empty(&self, token: Option<&str>, path: &str) -> Resp {
        call(&self.0, "POST", path, token, None).await
    }
    pub async fn put(&self, token: Option<&str>, path: &str, body: Value) -> Resp {
        call(&self.0, "PUT", path, token, Some(body)).await
    }
    pub async fn delete(&self, token: Option<&str>, path: &str) -> Resp {
        call(&self.0, "DELETE", path, token, None).await
    }
    /// A `DELETE` with a body (a lock release names its token).
    pub async fn delete_with(&self, token: Option<&str>, path: &str, body: Value) -> Resp {
        call(&self.0, "DELETE", path, token, Some(body)).await
    }

    /// Enqueues `jobs` (one job object or `{"jobs": [...]}`) as the producer.
    pub async fn enqueue(&self, jobs: Value) -> Resp {
        self.post(Some(PRODUCER), "/v1/jobs", jobs).await
    }

    /// Claims up to `max` jobs as worker `w`, without waiting; the claimed jobs.
    pub async fn claim(&self, max: u32) -> Vec<Value> {
        let r = self
            .post(
                Some(WORKER),
                "/v1/jobs/claim",
                serde_json::json!({"worker": "w", "max": max}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "claim: {}", r.text);
        r.json["jobs"].as_array().cloned().unwrap_or_default()
    }

    /// A job's status as the worker sees it.
    pub async fn status(&self, id: &str) -> Resp {
        self.get(Some(WORKER), &format!("/v1/jobs/{id}")).await
    }
}

/// A job record with the text `text {id}` and model `m`, ready at once.
pub fn job(id: &str) -> ternflow_server::store::JobRecord {
    ternflow_server::store::JobRecord {
        id: id.to_owned(),
        text: format!("text {id}"),
        model_id: "m".to_owned(),
        priority: 0,
        available_at: 0,
        meta: None,
        trace_id: "0af7651916cd43dd8448eb211c80319c".to_owned(),
    }
}

/// A result of model `m` with a one-number vector.
pub fn result() -> ternflow_core::protocol::JobResult {
    ternflow_core::protocol::JobResult {
        model_id: "m".to_owned(),
        vector: ternflow_core::protocol::Vector(vec![1.0]),
        source: ternflow_core::protocol::ResultSource::Backend,
        by: None,
    }
}
