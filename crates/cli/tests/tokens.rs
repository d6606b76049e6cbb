//! `ternflow token mint` and a real `ternflow serve` that accepts its tokens: each tenant gets a
//! SQLite database of its own, and sees only its own jobs.

mod common;

use std::process::Command;

use common::{mint, ternflow, Server, SECRET_B64};

use serde_json::json;
use ternflow_core::ports::JobSource;
use ternflow_server::test_client::worker_client;

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
    let srv = Server::start(
        &dir.path().join("data"),
        0,
        &[],
        &[("TERNFLOW_JWT_KEYS", format!("k1:hs256:{SECRET_B64}"))],
    );
    let base = srv.base.clone();
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
        let w = worker_client(&base, &t, "w");
        async move { w.claim(8, 0).await.unwrap() }
    };
    assert!(
        claim(mint("worker", "globex")).await.is_empty(),
        "another tenant sees nothing"
    );
    // The documented Node recipe mints tokens the server accepts.
    let recipe = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/recipes/mint-token.mjs"
    );
    let out = Command::new("node")
        .args([recipe, "k1", "worker", "acme", "300"])
        .env("TERNFLOW_JWT_SECRET", SECRET_B64)
        .output()
        .expect("node is installed (the machine image has it; scripts/setup.sh uses it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let node_token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let r = http
        .get(format!("{base}/v1/jobs/none"))
        .bearer_auth(&node_token)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        404,
        "a Node-minted token is accepted (404: no such job)"
    );
    let jobs = claim(node_token).await;
    assert_eq!(jobs.len(), 1, "and it claims in its tenant");
    assert_eq!(jobs[0].text, "hello acme");
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
}
