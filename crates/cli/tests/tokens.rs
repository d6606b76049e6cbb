//! `ternflow token mint` and a real `ternflow serve` that accepts its tokens: each tenant gets a
//! SQLite database of its own, and sees only its own jobs.

use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const SECRET_B64: &str = "a2V5LW9uZS1rZXktb25lLWtleS1vbmUta2V5LW9uZS0="; // 32 bytes

fn ternflow() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ternflow"))
}

fn mint(role: &str, tenant: &str) -> String {
    let out = ternflow()
        .args([
            "token", "mint", "--kid", "k1", "--role", role, "--tenant", tenant,
        ])
        .env("TERNFLOW_JWT_SECRET", SECRET_B64)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn mint_refuses_bad_arguments() {
    for args in [
        vec!["--role", "root", "--tenant", "a"],
        vec!["--role", "worker", "--tenant", "Not Valid"],
    ] {
        let out = ternflow()
            .args(["token", "mint", "--kid", "k1"])
            .args(&args)
            .env("TERNFLOW_JWT_SECRET", SECRET_B64)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minted_tokens_open_one_tenant_each_on_a_real_server() {
    let dir = tempfile::tempdir().unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = ternflow()
        .args([
            "serve",
            "--addr",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(dir.path().join("data"))
        .current_dir(dir.path())
        .env("TERNFLOW_JWT_KEYS", format!("k1:hs256:{SECRET_B64}"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{base}/v1/jobs"))
        .bearer_auth(mint("producer", "acme"))
        .json(&json!({"text": "hello acme", "model_id": "m"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let claim = |t: String| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let v: Value = http
                .post(format!("{base}/v1/jobs/claim"))
                .bearer_auth(t)
                .json(&json!({"worker": "w", "max": 8}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v["jobs"].as_array().cloned().unwrap_or_default()
        }
    };
    assert!(
        claim(mint("worker", "globex")).await.is_empty(),
        "another tenant sees nothing"
    );
    let jobs = claim(mint("worker", "acme")).await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["text"], "hello acme");
    assert!(dir
        .path()
        .join("data/tenants/acme/ternflow.sqlite3")
        .exists());
    assert!(dir
        .path()
        .join("data/tenants/globex/ternflow.sqlite3")
        .exists());
    let r = http
        .get(format!("{base}/v1/jobs/x"))
        .bearer_auth("not.a.token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let _ = child.kill();
    let _ = child.wait();
}
