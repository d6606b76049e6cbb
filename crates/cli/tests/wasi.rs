//! The WASI components (`crates/wasi`, built by `scripts/build-wasi.sh`; WASI 0.2 and 0.3) run by
//! a real Wasmtime against a real `ternflow serve`: queue jobs done with the engine's vectors bit
//! for bit (with the engine inside, and backend-only), the server killed mid-batch and restarted
//! with nothing lost, a lease lost and re-delivered, stop with hand-back, a malformed job
//! dead-lettered with its reason, and the HTTP handler under `wasmtime serve` answering vectors,
//! a cached repeat and many requests at once; and, with spans exported over OTLP, every job's
//! trace whole from its enqueue to the ack that ends its delivery, the worker's engine step in it.
//!
//! These need Wasmtime and the wasm32-wasip2 build, so they are `#[ignore]`d in a plain
//! `cargo test`; `scripts/test.sh` builds the components and runs them with `--ignored`. When
//! either is missing they fail and say what to run: they never pass without running.

mod common;
#[path = "common/otlp.rs"]
mod otlp;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{free_port, ternflow, Server};
use serde_json::{json, Value};

const ADMIN: &str = "wasi-admin";
const WORKER: &str = "wasi-worker";
const NEEDS: &str = "needs Wasmtime and the wasm32-wasip2 build: scripts/test.sh runs it (scripts/setup.sh installs Wasmtime, scripts/build-wasi.sh builds the components)";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn model() -> PathBuf {
    root().join("models/ternlight-int4.bin")
}

/// The `wasmtime` to run: `$TERNFLOW_WASMTIME`, else the pinned one `scripts/setup.sh` puts in
/// `.tools/wasmtime`, else the one on `PATH`. Panics with what to install when there is none.
fn wasmtime() -> String {
    let pinned = root().join(".tools/wasmtime");
    let bin = std::env::var("TERNFLOW_WASMTIME").unwrap_or_else(|_| {
        if pinned.exists() {
            pinned.display().to_string()
        } else {
            "wasmtime".into()
        }
    });
    match Command::new(&bin).arg("--version").output() {
        Ok(o) if o.status.success() => bin,
        _ => panic!("no `{bin}` to run: install it with scripts/setup.sh (pinned Wasmtime in .tools/wasmtime)"),
    }
}

/// A built component: `$TERNFLOW_WASI_DIR/NAME.wasm` (default `target/wasi/`). Panics with
/// what to run when it is missing.
fn component(name: &str) -> PathBuf {
    let dir = std::env::var("TERNFLOW_WASI_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root().join("target/wasi"));
    let p = dir.join(format!("{name}.wasm"));
    assert!(
        p.is_file(),
        "{} is missing: run scripts/build-wasi.sh first",
        p.display()
    );
    p
}

/// A `ternflow serve` on the embedded store with admin and worker tokens.
fn server(data: &Path, port: u16, extra: &[&str]) -> Server {
    let mut args = vec!["--store", "embedded"];
    args.extend_from_slice(extra);
    Server::start(
        data,
        port,
        &args,
        &[("TERNFLOW_TOKENS", format!("{ADMIN}:admin,{WORKER}:worker"))],
    )
}

/// A `ternflow serve` with the default model and `extra` flags, in a fresh temp dir that lives as
/// long as the returned guard.
fn model_server(extra: &[&str]) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let model = model();
    let mut args = vec!["--model", model.to_str().unwrap()];
    args.extend_from_slice(extra);
    let srv = server(&dir.path().join("data"), 0, &args);
    (dir, srv)
}

/// One worker component under `wasmtime run`, its stdout lines collected.
struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    seen: Vec<Value>,
}

impl Worker {
    /// Starts `component` against `base` with `config` (`TERNFLOW_CONFIG`) and worker `flags`;
    /// `model_dir` preopens the models folder as `/models` (else the model comes from the
    /// server).
    fn start(wasm: &str, base: &str, config: Value, flags: &[&str], model_file: bool) -> Worker {
        let mut cmd = Command::new(wasmtime());
        cmd.args(["run", "-S", "http"]);
        if wasm.ends_with("-p3") {
            cmd.args(["-S", "p3"]);
        }
        cmd.arg("--env")
            .arg(format!("TERNFLOW_SERVER={base}"))
            .arg("--env")
            .arg(format!("TERNFLOW_TOKEN={WORKER}"))
            .arg("--env")
            .arg(format!("TERNFLOW_CONFIG={config}"));
        if model_file {
            cmd.arg("--dir")
                .arg(format!("{}::/models", root().join("models").display()))
                .arg("--env")
                .arg("TERNFLOW_MODEL=/models/ternlight-int4.bin");
        }
        cmd.arg(component(wasm))
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn wasmtime");
        let stdin = child.stdin.take();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Worker {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    /// The next stdout event `name` (`ready`, `stopped`), waiting up to `secs`.
    fn event(&mut self, name: &str, secs: u64) -> Value {
        if let Some(v) = self.seen.iter().find(|v| v["event"] == name) {
            return v.clone();
        }
        let deadline = Instant::now() + Duration::from_secs(secs);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    let v: Value = serde_json::from_str(&l)
                        .unwrap_or_else(|_| panic!("worker printed a line that is not JSON: {l}"));
                    self.seen.push(v.clone());
                    if v["event"] == name {
                        return v;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("the worker exited before {name:?}: {:?}", self.child.wait())
                }
            }
        }
        panic!("no {name:?} event from the worker within {secs} s");
    }

    /// Closes standard input (a `--stop-on-eof` worker stops).
    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits for the process to exit, up to `secs`; its exit status must be success.
    fn exit_ok(&mut self, secs: u64) {
        common::exits_ok(&mut self.child, secs, "the worker");
    }

    fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(st.success(), "kill -{sig}");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn api(method: &str, url: &str, body: Option<Value>) -> (u16, Value) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let mut rb = match method {
        "GET" => http.get(url),
        _ => http.post(url),
    }
    .bearer_auth(ADMIN);
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Enqueues `texts` (optionally under `model_id`); returns their job ids.
async fn enqueue(base: &str, texts: &[String], model_id: Option<&str>) -> Vec<String> {
    let jobs: Vec<Value> = texts
        .iter()
        .map(|t| match model_id {
            Some(m) => json!({"text": t, "model_id": m}),
            None => json!({"text": t}),
        })
        .collect();
    let (st, v) = api(
        "POST",
        &format!("{base}/v1/jobs"),
        Some(json!({"jobs": jobs})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn statuses(base: &str, ids: &[String]) -> Vec<Value> {
    let (st, v) = api(
        "POST",
        &format!("{base}/v1/jobs/status"),
        Some(json!({"ids": ids})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    v["jobs"].as_array().unwrap().clone()
}

async fn count_done(base: &str, ids: &[String]) -> usize {
    statuses(base, ids)
        .await
        .iter()
        .filter(|j| j["state"] == "done")
        .count()
}

/// Waits until every job in `ids` is done, up to `secs`.
async fn all_done(base: &str, ids: &[String], secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let n = count_done(base, ids).await;
        if n == ids.len() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{n} of {} jobs done after {secs} s",
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The engine's native vectors for `texts` (`ternflow embed`): the reference the component's
/// must equal.
fn native(texts: &[String]) -> Vec<Vec<f32>> {
    native_info(texts, None)
        .into_iter()
        .map(|v| serde_json::from_value(v["vector"].clone()).unwrap())
        .collect()
}

/// `ternflow embed --info [--max-tokens N]` of `texts`: per text `{"vector", "tokens", "chunks",
/// "truncated"}`.
fn native_info(texts: &[String], max_tokens: Option<u32>) -> Vec<Value> {
    use std::io::Write;
    let mut cmd = ternflow();
    cmd.arg("embed").arg("--info").arg("--model").arg(model());
    if let Some(m) = max_tokens {
        cmd.arg("--max-tokens").arg(m.to_string());
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    for t in texts {
        writeln!(input, "{t}").unwrap();
    }
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn uniq(tag: &str, n: usize) -> Vec<String> {
    let salt = std::process::id();
    (0..n)
        .map(|i| format!("wasi {tag} {salt} text number {i}"))
        .collect()
}

/// Checks every job finished with a vector equal to the engine's for its text, from one of
/// `sources`.
async fn assert_engine_vectors(base: &str, ids: &[String], texts: &[String], sources: &[&str]) {
    let want = native(texts);
    for ((st, text), w) in statuses(base, ids).await.iter().zip(texts).zip(&want) {
        assert_eq!(st["state"], "done", "{text}: {st}");
        let source = st["result"]["source"].as_str().unwrap_or_default();
        assert!(sources.contains(&source), "{st}");
        let v =
            ternflow_core::codec::decode_vector(st["result"]["vector"].as_str().unwrap()).unwrap();
        // Bit for bit: the engine gives the same bits on every kernel and target (wasm32 in the
        // component, native in `ternflow embed`, the browser's wasm: docs/engine.md).
        assert_eq!(&v, w, "{text}: not the engine's bits");
    }
}

#[test]
#[ignore = "needs Wasmtime and the wasm32-wasip2 build: run by scripts/test.sh"]
fn prerequisites_are_there() {
    // Fails (never skips) when Wasmtime or a component is missing, naming what to run.
    let _ = (wasmtime(), NEEDS);
    for c in [
        "ternflow-wasi-worker",
        "ternflow-wasi-worker-backend",
        "ternflow-wasi-handler",
        "ternflow-wasi-worker-p3",
        "ternflow-wasi-handler-p3",
    ] {
        component(c);
    }
}

async fn queue_jobs_are_done_with_the_engines_vectors_and_the_one_it_fails_by_the_server(
    wasi: Wasi,
) {
    let (_dir, srv) = model_server(&[]);
    let base = srv.base.clone();
    let texts = uniq("queue", 24);
    let ids = enqueue(&base, &texts, None).await;
    // One text over the worker's limit: a permanent failure for the worker, which it nacks as
    // such. The server runs the job's model, so it does not take the worker's word for the
    // job's end: it embeds the text itself (docs/security.md, "A worker that fails on purpose").
    let long = format!("{} {}", uniq("too long", 1)[0], "x".repeat(300));
    let bad = enqueue(&base, std::slice::from_ref(&long), None).await;
    let cfg = json!({"concurrency": 8, "claimWaitMs": 300, "maxTextBytes": 200,
                     "workerId": "wasi-engine"});
    let mut w = Worker::start(
        wasi.worker(),
        &base,
        cfg,
        &["--idle-exit-ms", "1500"],
        false,
    );
    let ready = w.event("ready", 120);
    assert_eq!(ready["started"]["engine"], true, "{ready}");
    assert!(ready["started"]["model_bytes"].as_u64().unwrap() > 1_000_000);
    let stopped = w.event("stopped", 120);
    w.exit_ok(30);
    assert_eq!(stopped["summary"]["done"], 25, "{stopped}");
    assert_eq!(stopped["summary"]["dead"], 0, "{stopped}");
    assert_eq!(
        stopped["counters"]["jobs_nacked"], 1,
        "the worker's nack: {stopped}"
    );
    assert_engine_vectors(&base, &ids, &texts, &["engine"]).await;
    // The nacked job is done by the server, with the vector the engine gives its whole text.
    assert_engine_vectors(&base, &bad, std::slice::from_ref(&long), &["backend"]).await;
    // Metrics reached the server.
    let (_, stats) = api("GET", &format!("{base}/v1/stats"), None).await;
    let jobs_done = &stats["workers"]["wasi-engine"]["counters"]["jobs_done"];
    assert_eq!(jobs_done, 24, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Wasmtime and the wasm32-wasip2 build: run by scripts/test.sh"]
async fn a_backend_only_worker_embeds_through_the_server_with_the_same_vectors() {
    let (_dir, srv) = model_server(&[]);
    let base = srv.base.clone();
    let texts = uniq("backend", 6);
    let ids = enqueue(&base, &texts, None).await;
    let mut w = Worker::start(
        "ternflow-wasi-worker-backend",
        &base,
        json!({"claimWaitMs": 300}),
        &["--idle-exit-ms", "1500"],
        false,
    );
    let ready = w.event("ready", 120);
    assert_eq!(ready["started"]["engine"], false, "{ready}");
    assert_eq!(ready["started"]["model_bytes"], 0, "{ready}");
    let stopped = w.event("stopped", 120);
    w.exit_ok(30);
    assert_eq!(stopped["summary"]["done"], 6, "{stopped}");
    assert_engine_vectors(&base, &ids, &texts, &["backend"]).await;
}

async fn the_server_killed_mid_batch_then_back_loses_nothing(wasi: Wasi) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let model = model();
    let model = model.to_str().unwrap();
    let extra = ["--model", model, "--lease-ms", "5000"];
    let srv = server(&data, 0, &extra);
    let port = srv.port;
    let base = srv.base.clone();
    let texts = uniq("outage", 300);
    let ids = enqueue(&base, &texts, None).await;
    let cfg = json!({"concurrency": 4, "claimWaitMs": 300,
                     "retry": {"baseMs": 100, "maxMs": 500, "maxAttempts": 40}});
    let mut w = Worker::start(wasi.worker(), &base, cfg, &["--stop-on-eof"], true);
    w.event("ready", 120);
    // Mid-batch: some jobs done, most not.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let n = count_done(&base, &ids).await;
        if n >= 10 {
            assert!(n < ids.len(), "the batch finished before the outage");
            break;
        }
        assert!(Instant::now() < deadline, "no progress before the outage");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    srv.kill9();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let srv = server(&data, port, &extra);
    all_done(&srv.base, &ids, 120).await;
    w.close_stdin();
    let stopped = w.event("stopped", 60);
    w.exit_ok(30);
    let c = &stopped["counters"];
    // The outage was seen: a job's request retried, or a claim failed and was made again
    // (which of the two depends on what the worker was sending when the server died).
    let seen = c["retries"].as_u64().unwrap_or(0) + c["claim_failures"].as_u64().unwrap_or(0);
    assert!(seen >= 1, "{stopped}");
    assert_eq!(stopped["summary"]["dead"], 0, "{stopped}");
    let (_, stats) = api("GET", &format!("{}/v1/stats", srv.base), None).await;
    assert_eq!(stats["queue"]["dead"], 0, "{stats}");
    // An ack retried after the outage finds its vector in the local cache.
    assert_engine_vectors(&srv.base, &ids, &texts, &["engine", "local"]).await;
}

async fn a_lost_lease_is_redelivered_and_the_job_done_once(wasi: Wasi) {
    let (_dir, srv) = model_server(&["--lease-ms", "1500"]);
    let base = srv.base.clone();
    let cfg = json!({"concurrency": 1, "claimWaitMs": 20000});
    let mut w = Worker::start(wasi.worker(), &base, cfg, &["--stop-on-eof"], true);
    w.event("ready", 120);
    // The worker now waits inside a long-poll claim. Freeze it there, then enqueue: the server
    // hands the job to that claim, whose answer the frozen worker cannot read.
    tokio::time::sleep(Duration::from_millis(500)).await;
    w.signal("STOP");
    let text = uniq("lease", 1);
    let ids = enqueue(&base, &text, None).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if statuses(&base, &ids).await[0]["state"] == "leased" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the waiting claim never got the job"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The lease runs out; the next claim (ours) gets the job again.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let (_, claimed) = api(
        "POST",
        &format!("{base}/v1/jobs/claim"),
        Some(json!({"worker": "test", "max": 1})),
    )
    .await;
    let again = &claimed["jobs"][0];
    assert_eq!(again["id"], ids[0].as_str(), "{claimed}");
    assert_eq!(again["attempt"], 2, "{claimed}");
    // The worker wakes, works its stale delivery and is refused: a lost lease, not an ack. We
    // keep our lease alive meanwhile (the worker's metrics arrive every 2 s; the lease is 1.5 s).
    w.signal("CONT");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (st, hb) = api(
            "POST",
            &format!("{base}/v1/jobs/{}/heartbeat", ids[0]),
            Some(json!({"token": again["lease"]["token"]})),
        )
        .await;
        assert_eq!(st, 200, "our lease is still ours: {hb}");
        let (_, stats) = api("GET", &format!("{base}/v1/stats"), None).await;
        let lost = stats["workers"]
            .as_object()
            .and_then(|ws| {
                ws.values()
                    .find(|w| w["counters"]["leases_lost"].as_u64() >= Some(1))
            })
            .is_some();
        if lost {
            break;
        }
        assert!(Instant::now() < deadline, "no lost lease reported: {stats}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(statuses(&base, &ids).await[0]["state"], "leased");
    // Hand our delivery back: the worker claims it and finishes it, once.
    let (st, _) = api(
        "POST",
        &format!("{base}/v1/jobs/{}/release", ids[0]),
        Some(json!({"token": again["lease"]["token"]})),
    )
    .await;
    assert_eq!(st, 204);
    all_done(&base, &ids, 30).await;
    w.close_stdin();
    let stopped = w.event("stopped", 60);
    w.exit_ok(30);
    assert_eq!(stopped["summary"]["lost"], 1, "{stopped}");
    assert_eq!(stopped["summary"]["done"], 1, "{stopped}");
    let st = &statuses(&base, &ids).await[0];
    assert_eq!(st["attempt"], 2, "{st}");
    // The second delivery embedded the text again: a queue job's vector is not kept in the
    // worker's local cache by default (`queueLocalWrites`), and the stale one's ack was refused.
    assert_engine_vectors(&base, &ids, &text, &["engine"]).await;
}

async fn stop_hands_unfinished_jobs_back_without_using_an_attempt(wasi: Wasi) {
    // A server without a model: jobs for a model the worker's engine does not run go to the
    // backend, which answers 503, so they stay in flight, retrying, until the worker stops.
    let dir = tempfile::tempdir().unwrap();
    let srv = server(&dir.path().join("data"), 0, &[]);
    let base = srv.base.clone();
    let texts = uniq("handback", 3);
    let ids = enqueue(&base, &texts, Some("not-this-engines")).await;
    let cfg = json!({"concurrency": 4, "claimWaitMs": 300,
                     "retry": {"baseMs": 100, "maxMs": 300, "maxAttempts": 1000}});
    let t0 = Instant::now();
    let mut w = Worker::start(
        wasi.worker(),
        &base,
        cfg,
        &["--run-ms", "4000", "--drain-ms", "300"],
        true,
    );
    w.event("ready", 120);
    let stopped = w.event("stopped", 60);
    w.exit_ok(30);
    assert!(t0.elapsed() < Duration::from_secs(60));
    assert_eq!(stopped["summary"]["handedBack"], 3, "{stopped}");
    assert_eq!(stopped["summary"]["done"], 0, "{stopped}");
    for st in statuses(&base, &ids).await {
        assert_eq!(st["state"], "queued", "{st}");
    }
    // Claimed again, they are on their first attempt still.
    let (_, claimed) = api(
        "POST",
        &format!("{base}/v1/jobs/claim"),
        Some(json!({"worker": "test", "max": 3})),
    )
    .await;
    let jobs = claimed["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 3, "{claimed}");
    for j in jobs {
        assert_eq!(j["attempt"], 1, "{j}");
    }
}

async fn the_http_handler_answers_vectors_and_a_cached_repeat(wasi: Wasi) {
    let (_dir, srv) = model_server(&[]);
    let port = free_port();
    let mut child = Command::new(wasmtime())
        // Without the pooling allocator (not in the pinned build: see scripts/setup.sh).
        .args(["serve", "-S", "cli", "-O", "pooling-allocator=n"])
        .args(wasi.serve_flags())
        .args(["--max-instance-reuse-count", "64", "--addr"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--env")
        .arg(format!("TERNFLOW_SERVER={}", srv.base))
        .arg("--env")
        .arg(format!("TERNFLOW_TOKEN={WORKER}"))
        .arg(component(wasi.handler()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _guard = Kill(&mut child);
    let url = format!("http://127.0.0.1:{port}/");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "wasmtime serve did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let texts = uniq("handler", 2);
    let post = |body: Value| http.post(&url).json(&body).send();
    let r = post(json!({"texts": texts})).await.unwrap();
    assert_eq!(r.status(), 200);
    let first: Value = r.json().await.unwrap();
    assert_eq!(first["sources"], json!(["engine", "engine"]), "{first}");
    let want = native(&texts);
    for (v, w) in first["vectors"].as_array().unwrap().iter().zip(&want) {
        let v: Vec<f32> = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(&v, w, "the handler's vector is the engine's, bit for bit");
    }
    // maxTokens cuts a long text; info says what each vector covers, as `ternflow embed --info`.
    let long = format!(
        "{} {}",
        texts[0],
        "windows of word pieces pooled ".repeat(60)
    );
    for max in [None, Some(40)] {
        let mut body = json!({"texts": [long, texts[1]]});
        if let Some(m) = max {
            body["maxTokens"] = json!(m);
        }
        let got: Value = post(body).await.unwrap().json().await.unwrap();
        let want = native_info(&[long.clone(), texts[1].clone()], max);
        for (i, w) in want.iter().enumerate() {
            let v: Vec<f32> = serde_json::from_value(got["vectors"][i].clone()).unwrap();
            let n: Vec<f32> = serde_json::from_value(w["vector"].clone()).unwrap();
            assert_eq!(v, n, "{max:?} {i}: bit for bit");
            for k in ["tokens", "chunks", "truncated"] {
                assert_eq!(got["info"][i][k], w[k], "{max:?} {i} {k}: {got}");
            }
        }
        assert_eq!(got["info"][0]["truncated"], json!(max.is_some()), "{got}");
    }
    // The repeat is answered from a cache: this instance's memory when the host reused the
    // instance (it says how many requests it served), else the server's remote cache, which the
    // first request wrote through.
    let r = post(json!({"texts": [texts[0]]})).await.unwrap();
    assert_eq!(r.status(), 200);
    let served: u64 = r.headers()["x-ternflow-instance-requests"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let again: Value = r.json().await.unwrap();
    let source = again["sources"][0].as_str().unwrap();
    let want = if served >= 2 { "local" } else { "remote" };
    assert_eq!(source, want, "instance served {served} requests: {again}");
    assert_eq!(again["vectors"][0], first["vectors"][0]);
    // Many requests at once: every answer right; on WASI 0.3 one instance works on several at a
    // time (the handler reports how many it had in flight when each arrived), on WASI 0.2 never.
    let many = uniq("concurrent", 16);
    let answers =
        futures_util::future::join_all(many.iter().map(|t| post(json!({"texts": [t]})))).await;
    let want = native(&many);
    let mut most_at_once = 0;
    for (r, w) in answers.into_iter().zip(&want) {
        let r = r.unwrap();
        assert_eq!(r.status(), 200);
        let at_once: u64 = r.headers()["x-ternflow-instance-in-flight"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        most_at_once = most_at_once.max(at_once);
        let v: Value = r.json().await.unwrap();
        let v: Vec<f32> = serde_json::from_value(v["vectors"][0].clone()).unwrap();
        assert_eq!(&v, w, "bit for bit");
    }
    match wasi {
        Wasi::P2 => assert_eq!(most_at_once, 1, "a WASI 0.2 instance serves one at a time"),
        Wasi::P3 => assert!(
            most_at_once >= 2,
            "one WASI 0.3 instance had {most_at_once} in flight at most"
        ),
    }
    // The edge handler's error contract.
    let r = http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 405);
    let r = http.post(&url).body("{").send().await.unwrap();
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "bad_json");
    let r = post(json!({"texts": ["x".repeat(17 * 1024)]}))
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    // A body over the contract's 1 MiB: 413 `too_large` (WASI 0.3 stops reading it there).
    let r = post(json!({"texts": ["x".repeat(2 << 20)]})).await.unwrap();
    assert_eq!(r.status(), 413);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "too_large", "{e}");
}

/// A job's whole path is one trace among the spans the server exports over OTLP/HTTP, for every
/// job a real worker runs: each of `TERNFLOW_TRACED_JOBS` jobs (300 unless set; the run
/// is 3 000) enqueued with a `traceparent` of its own, then run by a WASI worker with the engine
/// inside. A job is traced when its trace holds its enqueue request's span (under the producer's
/// span), a `deliver job` span under it for that job and no other, ended by the ack (`outcome`
/// acked), and the worker's engine step under that delivery. Prints the count; at least 99 %
/// must be traced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Wasmtime and the wasm32-wasip2 build: run by scripts/test.sh"]
async fn every_job_s_trace_holds_its_path_from_enqueue_to_ack() {
    let n: usize = std::env::var("TERNFLOW_TRACED_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let (endpoint, got) = otlp::receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let model = model();
    let srv = Server::start(
        &dir.path().join("data"),
        0,
        &["--store", "embedded", "--model", model.to_str().unwrap()],
        &[
            ("TERNFLOW_TOKENS", format!("{ADMIN}:admin,{WORKER}:worker")),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_owned()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ],
    );
    let base = srv.base.clone();
    let texts = uniq("traced", n);
    let salt = u64::from(std::process::id());
    let http = reqwest::Client::new();
    // The job id of each trace, and the producer's span each enqueue was made under.
    let mut jobs: HashMap<String, (String, String)> = HashMap::new();
    for (i, text) in texts.iter().enumerate() {
        let trace = format!("{salt:016x}{:016x}", i + 1);
        let parent = format!("{:016x}", (i as u64 + 1) << 8 | 0xab);
        let r = http
            .post(format!("{base}/v1/jobs"))
            .bearer_auth(ADMIN)
            .header("traceparent", format!("00-{trace}-{parent}-01"))
            .json(&json!({"jobs": [{"text": text}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        let id = v["jobs"][0]["id"].as_str().unwrap().to_owned();
        jobs.insert(trace, (id, parent));
    }
    let t0 = Instant::now();
    let cfg = json!({"concurrency": 8, "claimWaitMs": 300, "workerId": "wasi-traced"});
    let mut w = Worker::start(
        Wasi::P2.worker(),
        &base,
        cfg,
        &["--idle-exit-ms", "1500"],
        true,
    );
    let stopped = w.event("stopped", 600);
    w.exit_ok(30);
    assert_eq!(stopped["summary"]["done"], n, "{stopped}");
    let run = t0.elapsed();

    // Which jobs' traces are whole, from what has arrived so far.
    let traced = |spans: &[otlp::Seen]| -> (usize, usize) {
        let mut by_trace: HashMap<&str, Vec<&otlp::Seen>> = HashMap::new();
        for s in spans {
            by_trace.entry(&s.trace).or_default().push(s);
        }
        let (mut whole, mut foreign) = (0, 0);
        for (trace, (id, parent)) in &jobs {
            let Some(ss) = by_trace.get(trace.as_str()) else {
                continue;
            };
            // No span of this trace names another job.
            if ss
                .iter()
                .any(|s| s.attrs.get("job").is_some_and(|j| j != id))
            {
                foreign += 1;
                continue;
            }
            let enqueue = ss
                .iter()
                .find(|s| s.name == "POST /v1/jobs" && &s.parent == parent);
            let delivery = enqueue.and_then(|e| {
                ss.iter().find(|s| {
                    s.name == "deliver job"
                        && s.parent == e.span
                        && s.attrs.get("outcome").map(String::as_str) == Some("acked")
                })
            });
            let engine = delivery.and_then(|d| {
                ss.iter()
                    .find(|s| s.name == "worker engine" && s.parent == d.span)
            });
            if let (Some(d), Some(e)) = (delivery, engine) {
                // The step lies inside its delivery.
                assert!(
                    d.start_ns <= e.start_ns && e.end_ns <= d.end_ns,
                    "{e:?} outside {d:?}"
                );
                whole += 1;
            }
        }
        (whole, foreign)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let (whole, foreign, spans) = loop {
        let spans = got.lock().unwrap().clone();
        let (whole, foreign) = traced(&spans);
        if whole == n || Instant::now() > deadline {
            break (whole, foreign, spans.len());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!(
        "traced {whole} of {n} jobs ({:.2} %) from enqueue to ack, {spans} spans received; \
         the worker ran them in {:.1} s",
        100.0 * whole as f64 / n as f64,
        run.as_secs_f64()
    );
    assert_eq!(foreign, 0, "traces naming another trace's job");
    assert!(whole * 100 >= n * 99, "only {whole} of {n} jobs traced");
    drop(srv);
}

/// Which build of the components a test runs: WASI 0.2 (wstd) or WASI 0.3 (native async, run
/// with `-S p3`). The tests are the same; only the component and the Wasmtime flags differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wasi {
    P2,
    P3,
}

impl Wasi {
    fn worker(self) -> &'static str {
        match self {
            Wasi::P2 => "ternflow-wasi-worker",
            Wasi::P3 => "ternflow-wasi-worker-p3",
        }
    }

    fn handler(self) -> &'static str {
        match self {
            Wasi::P2 => "ternflow-wasi-handler",
            Wasi::P3 => "ternflow-wasi-handler-p3",
        }
    }

    /// `wasmtime serve` flags: WASI 0.3's, with up to 16 requests at once per instance.
    fn serve_flags(self) -> &'static [&'static str] {
        match self {
            Wasi::P2 => &[],
            Wasi::P3 => &["-S", "p3", "--max-instance-concurrent-reuse-count", "16"],
        }
    }
}

/// Each test above once per build: `p2::NAME` and `p3::NAME`.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod p2 {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "needs Wasmtime and the wasm32-wasip2 build: run by scripts/test.sh"]
                async fn $name() {
                    super::$name(super::Wasi::P2).await;
                }
            )*
        }
        mod p3 {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "needs Wasmtime and the wasm32-wasip2 build: run by scripts/test.sh"]
                async fn $name() {
                    super::$name(super::Wasi::P3).await;
                }
            )*
        }
    };
}

on_both!(
    queue_jobs_are_done_with_the_engines_vectors_and_the_one_it_fails_by_the_server,
    the_server_killed_mid_batch_then_back_loses_nothing,
    a_lost_lease_is_redelivered_and_the_job_done_once,
    stop_hands_unfinished_jobs_back_without_using_an_attempt,
    the_http_handler_answers_vectors_and_a_cached_repeat,
);
