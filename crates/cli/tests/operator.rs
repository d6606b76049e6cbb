//! What an operator expects of the binary itself: one server per `--data-dir`, logs on stderr
//! (plain text off a terminal, or JSON lines), every `serve` flag settable from the
//! environment, `embed` finding the default model as `serve` does, SSE clients told of a gap
//! (`reset`) after a crash but not after a clean restart, and client errors that name the
//! address and the cause. (A file-size limit and `/readyz` while writes fail: `server_faults.rs`.)

mod common;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, output_within, ternflow, Server};

/// The repository root (where `models/ternlight-int4.bin` is).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Waits until something accepts connections on `port`, or fails naming `what`.
fn wait_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what}: not listening on {port}");
}

/// Kills `child` and returns what it wrote to stdout and stderr.
fn stop(mut child: Child) -> (String, String) {
    let _ = child.kill();
    let _ = child.wait();
    let mut out = String::new();
    let mut err = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (out, err)
}

#[test]
fn a_second_server_on_one_data_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let tokens = [("TERNFLOW_TOKENS", "t:admin".to_owned())];
    let first = Server::start(&data, 0, &[], &tokens);
    let (status, err) = output_within(
        ternflow()
            .args(["serve", "--addr", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(&data)
            .current_dir(dir.path())
            .env("TERNFLOW_TOKENS", "t:admin"),
        20,
        "the second ternflow serve on one data dir",
    );
    assert!(!status.success(), "the second server must not start");
    assert!(
        err.contains("in use by another ternflow serve") && err.contains(&first.pid().to_string()),
        "names the holder: {err}"
    );
    // Once the first is gone (even by kill -9), the directory is free again.
    first.kill9();
    let again = Server::start(&data, 0, &[], &tokens);
    drop(again);
}

/// A hold shorter than a lease would refuse every heartbeat: refused at start, saying why.
#[test]
fn a_lease_hold_shorter_than_a_lease_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (status, err) = output_within(
        ternflow()
            .args(["serve", "--addr", "127.0.0.1:0", "--lease-ms", "30000"])
            .args(["--max-lease-hold-ms", "1000", "--data-dir"])
            .arg(dir.path().join("data"))
            .current_dir(dir.path())
            .env("TERNFLOW_TOKENS", "t:admin"),
        20,
        "ternflow serve with a hold shorter than a lease",
    );
    assert!(!status.success());
    assert!(
        err.contains("--max-lease-hold-ms (1000) must be at least --lease-ms (30000)"),
        "{err}"
    );
}

#[test]
fn logs_go_to_stderr_without_colours_or_as_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    for format in ["text", "json"] {
        let port = free_port();
        let child = ternflow()
            .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
            .args(["--log-format", format, "--data-dir"])
            .arg(dir.path().join(format))
            .current_dir(dir.path())
            .env("TERNFLOW_TOKENS", "t:admin")
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_listening(port, format);
        let (out, err) = stop(child);
        assert_eq!(out, "", "{format}: nothing on stdout");
        assert!(err.contains("listening"), "{format}: {err}");
        assert!(
            !err.contains('\u{1b}'),
            "{format}: no ANSI escape off a terminal: {err}"
        );
        if format == "json" {
            for line in err.lines() {
                let v: serde_json::Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
                assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
            }
        }
    }
}

#[test]
fn every_serve_flag_has_an_environment_variable() {
    let help = ternflow().args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let flags: Vec<&str> = help
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("--"))
        .map(|l| l.split([' ', '=', '<']).next().unwrap())
        .filter(|f| *f != "help")
        .collect();
    assert!(flags.len() > 30, "{help}");
    for f in &flags {
        let var = format!("TERNFLOW_{}", f.to_uppercase().replace('-', "_"));
        // Two take a file, beside the variables that hold the values themselves.
        let var = match var.as_str() {
            "TERNFLOW_TOKENS" | "TERNFLOW_JWT_KEYS" => format!("{var}_FILE"),
            "TERNFLOW_CORS_ORIGIN" => "TERNFLOW_CORS_ORIGINS".to_owned(),
            _ => var,
        };
        assert!(help.contains(&format!("[env: {var}")), "--{f}: no {var}");
    }
    // And they take effect: the address and the data directory from the environment.
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let child = ternflow()
        .arg("serve")
        .current_dir(dir.path())
        .env("TERNFLOW_ADDR", format!("127.0.0.1:{port}"))
        .env("TERNFLOW_DATA_DIR", dir.path().join("from-env"))
        .env("TERNFLOW_TOKENS", "t:admin")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_listening(port, "TERNFLOW_ADDR");
    assert!(dir.path().join("from-env/ternflow.lock").exists());
    stop(child);
}

#[test]
fn embed_finds_the_default_model_as_serve_does() {
    let embed = |cwd: &Path| {
        let mut c = ternflow()
            .arg("embed")
            .current_dir(cwd)
            .env_remove("TERNFLOW_MODEL")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Where it finds no model it exits before reading: its stdin may be closed already.
        let written = c.stdin.take().unwrap().write_all(b"a default model\n");
        if let Err(e) = written {
            assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
        }
        c.wait_with_output().unwrap()
    };
    let out = embed(&repo());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<f32> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.len() >= 64, "a vector: {}", v.len());
    // Where there is none: an error that says what to pass.
    let dir = tempfile::tempdir().unwrap();
    let out = embed(dir.path());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no model: pass --model FILE"), "{err}");
}

/// One SSE event: its id (if numbered), name and data.
#[derive(Debug)]
struct SseEvent {
    id: Option<u64>,
    event: String,
    data: serde_json::Value,
}

/// Opens `/v1/events` as `token` resuming after `last` and reads `n` events (comments skipped).
async fn sse_events(base: &str, token: &str, last: Option<u64>, n: usize) -> Vec<SseEvent> {
    let mut req = reqwest::Client::new()
        .get(format!("{base}/v1/events"))
        .bearer_auth(token);
    if let Some(id) = last {
        req = req.header("last-event-id", id.to_string());
    }
    let mut resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let (mut buf, mut out) = (String::new(), Vec::new());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while out.len() < n {
        let chunk = tokio::time::timeout_at(deadline, resp.chunk())
            .await
            .expect("events in time")
            .unwrap()
            .expect("the stream stays open");
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(i) = buf.find("\n\n") {
            let frame: String = buf.drain(..i + 2).collect();
            let field = |name: &str| {
                frame
                    .lines()
                    .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
            };
            if let Some(event) = field("event:") {
                out.push(SseEvent {
                    id: field("id:").and_then(|v| v.parse().ok()),
                    event,
                    data: serde_json::from_str(&field("data:").unwrap_or_default())
                        .unwrap_or_default(),
                });
            }
        }
    }
    out.truncate(n);
    out
}

/// Enqueues one job and returns the id of the `jobs` event it caused (as a worker sees it).
async fn enqueue_and_see(base: &str, text: &str) -> u64 {
    let http = reqwest::Client::new();
    let watching = sse_events(base, "w", None, 2);
    let enqueue = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let r = http
            .post(format!("{base}/v1/jobs"))
            .bearer_auth("p")
            .json(&serde_json::json!({ "text": text }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    };
    let (evs, ()) = tokio::join!(watching, enqueue);
    assert_eq!((evs[0].event.as_str(), evs[0].id), ("jobs", None), "hello");
    assert_eq!(evs[1].event, "jobs");
    evs[1].id.expect("a numbered event")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_clients_learn_of_a_gap_after_a_crash_and_not_after_a_clean_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let tokens = [("TERNFLOW_TOKENS", "w:worker,p:producer".to_owned())];
    let srv = Server::start(&data, 0, &[], &tokens);
    let port = srv.port;
    let seen = enqueue_and_see(&srv.base, "before a clean restart").await;
    // SIGTERM: a clean shutdown keeps the last event id.
    let st = std::process::Command::new("kill")
        .args(["-TERM", &srv.pid().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let mut srv = srv;
    common::exits_ok(&mut srv.child, 15, "ternflow serve after SIGTERM");
    drop(srv);
    let srv = Server::start(&data, port, &[], &tokens);
    let evs = sse_events(&srv.base, "w", Some(seen), 1).await;
    assert_eq!(
        (evs[0].event.as_str(), evs[0].id),
        ("jobs", None),
        "nothing was missed: no reset, the hello first ({evs:?})"
    );
    let seen = enqueue_and_see(&srv.base, "before a crash").await;
    assert!(seen > 0);
    // kill -9: the next run cannot know what this one published last.
    srv.kill9();
    let srv = Server::start(&data, port, &[], &tokens);
    for token in ["w", "p"] {
        let evs = sse_events(&srv.base, token, Some(seen), 2).await;
        assert_eq!(evs[0].event, "reset", "{token}: {evs:?}");
        assert_eq!(evs[0].data["reason"], "older_than_the_ring");
        let resume_at = evs[0].id.expect("a reset says where the stream resumes");
        assert!(resume_at > seen, "the new numbering is above the old");
        assert_eq!((evs[1].event.as_str(), evs[1].id), ("jobs", None));
        // Resuming from the reset's id is clean.
        let again = sse_events(&srv.base, token, Some(resume_at), 1).await;
        assert_eq!(again[0].event, "jobs", "{token}: {again:?}");
    }
}

#[test]
fn client_errors_name_the_address_and_the_cause() {
    let port = free_port(); // nothing listens there
    let out = ternflow()
        .args(["stats", "--server", &format!("http://127.0.0.1:{port}")])
        .args(["--token", "t"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("http://127.0.0.1:{port}/v1/stats")),
        "the address: {err}"
    );
    assert!(err.to_lowercase().contains("refused"), "the cause: {err}");
}
