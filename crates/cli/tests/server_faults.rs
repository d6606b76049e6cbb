//! Faults for real, against the release-shaped `ternflow serve` process on its SQLite store:
//! a write failure (the process's file-size limit, as a full disk does) and recovery, `kill -9`
//! in the middle of writes, a client that stalls mid-header, and SIGTERM with it still
//! connected. Every job the server confirmed must be there after a restart.

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Server;

use serde_json::{json, Value};

const PRODUCER: &str = "p-tok";
const WORKER: &str = "w-tok";

/// Starts `ternflow serve` on the SQLite store in `data`, with a producer and a worker token.
fn start(data: &Path, port: u16, extra: &[&str]) -> Server {
    let mut args = vec!["--store", "embedded"];
    args.extend_from_slice(extra);
    Server::start(
        data,
        port,
        &args,
        &[(
            "TERNFLOW_TOKENS",
            format!("{PRODUCER}:producer,{WORKER}:worker"),
        )],
    )
}

fn prlimit_fsize(pid: u32, limit: &str) {
    let st = Command::new("prlimit")
        .arg("--pid")
        .arg(pid.to_string())
        .arg(format!("--fsize={limit}"))
        .status()
        .unwrap();
    assert!(st.success(), "prlimit");
}

/// `GET /readyz`: its status and body.
async fn readyz(http: &reqwest::Client, base: &str) -> (u16, Value) {
    let r = http.get(format!("{base}/readyz")).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Enqueues one job; `Some(new)` when the server confirmed it (200), `None` on 503 or when
/// the server is gone.
async fn enqueue(http: &reqwest::Client, base: &str, id: &str, text: &str) -> Option<bool> {
    let r = http
        .post(format!("{base}/v1/jobs"))
        .bearer_auth(PRODUCER)
        .json(&json!({"jobs": [{"id": id, "text": text, "model_id": "m"}]}))
        .send()
        .await
        .ok()?;
    if r.status() == 200 {
        let v: Value = r.json().await.ok()?;
        return v["jobs"][0]["new"].as_bool();
    }
    match r.status().as_u16() {
        503 => {
            assert!(
                r.headers().contains_key("retry-after"),
                "503 carries Retry-After"
            );
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"]["code"], "store_unavailable");
            None
        }
        s => panic!("unexpected status {s}"),
    }
}

async fn job_state(http: &reqwest::Client, base: &str, id: &str) -> Option<String> {
    let r = http
        .get(format!("{base}/v1/jobs/{id}"))
        .bearer_auth(PRODUCER)
        .send()
        .await
        .unwrap();
    if r.status() == 404 {
        return None;
    }
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    Some(v["state"].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_failure_changes_nothing_and_loses_no_confirmed_job() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let srv = start(&data, 0, &[]);
    let port = srv.port;
    let http = client();
    let mut confirmed = BTreeSet::new();
    for i in 0..20 {
        let id = format!("before-{i}");
        assert_eq!(enqueue(&http, &srv.base, &id, "warm up").await, Some(true));
        confirmed.insert(id);
    }
    assert_eq!(readyz(&http, &srv.base).await.0, 200, "ready before");
    // The disk is full: no file of the process may grow past 1 byte, its log included (the
    // harness sends stderr to a file): a log line it cannot write is lost, never the request
    // that logged it. The binary ignores SIGXFSZ itself (the harness traps nothing), so a
    // write fails instead of killing it.
    prlimit_fsize(srv.pid(), "1:unlimited");
    let big = "x".repeat(8_000);
    let mut refused = Vec::new();
    for i in 0..40 {
        let id = format!("during-{i}");
        match enqueue(&http, &srv.base, &id, &big).await {
            Some(new) => {
                assert!(new);
                confirmed.insert(id);
            }
            None => refused.push(id),
        }
    }
    assert!(
        refused.len() >= 30,
        "writes fail while the disk is full (refused {})",
        refused.len()
    );
    // Alive, and it says why it is not ready.
    let (status, body) = readyz(&http, &srv.base).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["ready"], false);
    assert!(
        body["store"].as_str().unwrap().contains("refused a write"),
        "{body}"
    );
    let r = http
        .get(format!("{}/healthz", srv.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "alive while not ready");
    // Reads still answer while writes fail.
    assert_eq!(
        job_state(&http, &srv.base, "before-0").await.as_deref(),
        Some("queued")
    );
    // Space again: the refused requests changed nothing, so their retries are new jobs.
    prlimit_fsize(srv.pid(), "unlimited:unlimited");
    assert_eq!(readyz(&http, &srv.base).await.0, 200, "ready again");
    for id in &refused {
        assert_eq!(
            enqueue(&http, &srv.base, id, &big).await,
            Some(true),
            "{id}: a refused enqueue left nothing behind"
        );
        confirmed.insert(id.clone());
    }
    srv.kill9();
    let srv = start(&data, port, &[]);
    for id in &confirmed {
        assert_eq!(
            job_state(&http, &srv.base, id).await.as_deref(),
            Some("queued"),
            "{id} was confirmed, so it survives a kill -9 and restart"
        );
    }
    let r = http
        .post(format!("{}/v1/jobs/claim", srv.base))
        .bearer_auth(WORKER)
        .json(&json!({"worker": "w", "max": 256}))
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["jobs"].as_array().unwrap().len(),
        confirmed.len().min(256),
        "nothing extra either"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_writes_loses_no_confirmed_job_or_ack() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut port = 0;
    let http = client();
    let mut confirmed = BTreeSet::new();
    let mut acked = BTreeSet::new();
    for round in 0..3 {
        let srv = start(&data, port, &[]);
        port = srv.port;
        let base = srv.base.clone();
        let stop_at = Instant::now() + Duration::from_millis(700);
        let producer = {
            let (http, base) = (http.clone(), base.clone());
            tokio::spawn(async move {
                let mut ok = Vec::new();
                let mut i = 0;
                // Until the server is killed (the first request that gets no answer).
                while Instant::now() < stop_at + Duration::from_secs(5) {
                    let id = format!("r{round}-{i}");
                    i += 1;
                    match enqueue(&http, &base, &id, "text").await {
                        Some(_) => ok.push(id),
                        None => break,
                    }
                }
                ok
            })
        };
        let worker = {
            let (http, base) = (http.clone(), base.clone());
            tokio::spawn(async move {
                let mut done = Vec::new();
                while Instant::now() < stop_at + Duration::from_secs(5) {
                    let Ok(r) = http
                        .post(format!("{base}/v1/jobs/claim"))
                        .bearer_auth(WORKER)
                        .json(&json!({"worker": "w", "max": 8}))
                        .send()
                        .await
                    else {
                        break;
                    };
                    let Ok(v) = r.json::<Value>().await else {
                        break;
                    };
                    for j in v["jobs"].as_array().cloned().unwrap_or_default() {
                        let id = j["id"].as_str().unwrap().to_owned();
                        let body = json!({"token": j["lease"]["token"], "result": {"model_id": "m", "vector": "AACAPw==", "source": "engine"}});
                        let Ok(r) = http
                            .post(format!("{base}/v1/jobs/{id}/ack"))
                            .bearer_auth(WORKER)
                            .json(&body)
                            .send()
                            .await
                        else {
                            return done;
                        };
                        if r.status() == 200 {
                            done.push(id);
                        }
                    }
                }
                done
            })
        };
        tokio::time::sleep(Duration::from_millis(700)).await;
        srv.kill9();
        confirmed.extend(producer.await.unwrap());
        acked.extend(worker.await.unwrap());
    }
    assert!(
        confirmed.len() > 50,
        "the rounds did real work ({})",
        confirmed.len()
    );
    let srv = start(&data, port, &[]);
    for id in &confirmed {
        assert!(
            job_state(&http, &srv.base, id).await.is_some(),
            "{id} was confirmed"
        );
    }
    for id in &acked {
        assert_eq!(
            job_state(&http, &srv.base, id).await.as_deref(),
            Some("done"),
            "{id} was acked"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_client_is_cut_off_and_does_not_hold_up_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut srv = start(
        &data,
        0,
        &[
            "--header-timeout-ms",
            "1000",
            "--shutdown-deadline-ms",
            "1500",
        ],
    );
    // Half a request header, then silence.
    let mut stalled = TcpStream::connect(("127.0.0.1", srv.port)).unwrap();
    stalled
        .write_all(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-")
        .unwrap();
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let t0 = Instant::now();
    let mut buf = [0u8; 256];
    let n = stalled.read(&mut buf).unwrap_or(0);
    let waited = t0.elapsed();
    let _ = n; // hyper may answer 408 before closing; either way the connection ends.
    let mut rest = Vec::new();
    let _ = stalled.read_to_end(&mut rest);
    assert!(
        waited < Duration::from_secs(5),
        "disconnected within the header timeout (took {waited:?})"
    );
    // Healthy requests are unaffected.
    let http = client();
    let r = http
        .get(format!("{}/healthz", srv.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // A client that sent a whole header and stalls in its body, then SIGTERM.
    let mut slow = TcpStream::connect(("127.0.0.1", srv.port)).unwrap();
    slow.write_all(
        format!(
            "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {PRODUCER}\r\n\
             Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"jobs\""
        )
        .as_bytes(),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t0 = Instant::now();
    let st = Command::new("kill")
        .args(["-TERM", &srv.pid().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    // SIGTERM with a stalled client still connected must finish within the deadline.
    common::exits_ok(&mut srv.child, 8, "the server after SIGTERM");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    drop(slow);
}
