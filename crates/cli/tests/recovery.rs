//! The operator's recovery commands against a real `ternflow serve`, as a runbook runs them:
//! `ternflow dlq list/redrive --reason`, `ternflow locks list/release --stale`, `ternflow
//! quarantine list/clear`. Each is refused without an admin token, does what it says to the
//! store, and leaves an audit line in the server's log.

mod common;

use std::process::Output;
use std::time::Duration;

use common::{ternflow, Server};
use serde_json::{json, Value};

/// `ternflow ARGS --server BASE --token TOKEN`.
fn run(base: &str, token: &str, args: &[&str]) -> Output {
    ternflow()
        .args(args)
        .args(["--server", base, "--token", token])
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn said(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

struct Api {
    base: String,
    http: reqwest::Client,
}

impl Api {
    async fn send(
        &self,
        method: reqwest::Method,
        token: &str,
        path: &str,
        body: Value,
    ) -> (u16, Value) {
        let r = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_redriven_by_reason_and_stale_locks_released() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(
        &dir.path().join("data"),
        0,
        &["--max-attempts", "1"],
        &[(
            "TERNFLOW_TOKENS",
            "adm:admin,prod:producer,wrk:worker".to_owned(),
        )],
    );
    let base = srv.base.clone();
    let api = Api {
        base: base.clone(),
        http: reqwest::Client::new(),
    };
    use reqwest::Method;

    // Three jobs, each failed on its only attempt: two engine failures, one other.
    let jobs: Vec<Value> = ["p1", "p2", "p3"]
        .iter()
        .map(|id| json!({"id": id, "text": format!("text {id}"), "model_id": "m1"}))
        .collect();
    let (s, v) = api
        .send(Method::POST, "prod", "/v1/jobs", json!({"jobs": jobs}))
        .await;
    assert_eq!(s, 200, "{v}");
    let (_, claimed) = api
        .send(
            Method::POST,
            "wrk",
            "/v1/jobs/claim",
            json!({"worker": "w1", "max": 3}),
        )
        .await;
    let claimed = claimed["jobs"].as_array().unwrap().clone();
    assert_eq!(claimed.len(), 3);
    for j in &claimed {
        let id = j["id"].as_str().unwrap();
        let code = if id == "p3" {
            "bad_request"
        } else {
            "engine_failed"
        };
        let (s, v) = api
            .send(
                Method::POST,
                "wrk",
                &format!("/v1/jobs/{id}/nack"),
                json!({"token": j["lease"]["token"], "error": {"code": code, "message": "no"}}),
            )
            .await;
        assert_eq!((s, v["outcome"].as_str()), (200, Some("dead")), "{v}");
    }

    let o = run(&base, "adm", &["dlq", "list", "--reason", "engine_failed"]);
    assert!(o.status.success(), "{}", said(&o));
    let out = stdout(&o);
    let listed: Vec<&str> = out.lines().map(|l| l.split('\t').next().unwrap()).collect();
    assert_eq!(listed, ["p1", "p2"], "{}", said(&o));

    // A worker's token may not: the server refuses, the command says so and exits non-zero.
    let o = run(
        &base,
        "wrk",
        &["dlq", "redrive", "--reason", "engine_failed"],
    );
    assert!(!o.status.success());
    assert!(said(&o).contains("403"), "{}", said(&o));

    let o = run(
        &base,
        "adm",
        &["dlq", "redrive", "--reason", "engine_failed", "--dry-run"],
    );
    assert!(
        o.status.success() && stdout(&o).contains("would redrive p1"),
        "{}",
        said(&o)
    );
    let o = run(
        &base,
        "adm",
        &["dlq", "redrive", "--reason", "engine_failed"],
    );
    assert!(o.status.success(), "{}", said(&o));
    assert!(
        said(&o).contains("2 of 2 dead letters redriven"),
        "{}",
        said(&o)
    );
    for (id, state) in [("p1", "queued"), ("p2", "queued"), ("p3", "dead")] {
        let (_, st) = api
            .send(Method::GET, "adm", &format!("/v1/jobs/{id}"), Value::Null)
            .await;
        assert_eq!(st["state"].as_str(), Some(state), "{id}: {st}");
    }

    // A lock whose holder went quiet: listed, stale after 300 ms, released for its holder.
    let (s, grant) = api
        .send(Method::POST, "wrk", "/v1/locks/m1:k", json!({}))
        .await;
    assert_eq!(s, 200, "{grant}");
    let o = run(&base, "adm", &["locks", "list"]);
    assert!(
        o.status.success() && stdout(&o).starts_with("m1:k\t"),
        "{}",
        said(&o)
    );
    let o = run(
        &base,
        "adm",
        &["locks", "list", "--stale", "--stale-after-ms", "300"],
    );
    assert!(o.status.success() && stdout(&o).is_empty(), "{}", said(&o));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let o = run(
        &base,
        "wrk",
        &["locks", "release", "--stale", "--stale-after-ms", "300"],
    );
    assert!(
        !o.status.success() && said(&o).contains("403"),
        "{}",
        said(&o)
    );
    let o = run(
        &base,
        "adm",
        &["locks", "release", "--stale", "--stale-after-ms", "300"],
    );
    assert!(
        o.status.success() && stdout(&o).contains("released m1:k"),
        "{}",
        said(&o)
    );
    // Free long before its 30 s TTL: another caller gets it, the old holder's renewal is refused.
    let (s, v) = api
        .send(Method::POST, "wrk", "/v1/locks/m1:k", json!({}))
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, _) = api
        .send(
            Method::POST,
            "wrk",
            "/v1/locks/m1:k/renew",
            json!({"token": grant["token"]}),
        )
        .await;
    assert_eq!(s, 409);
    let o = run(&base, "adm", &["locks", "release", "nothing-here"]);
    assert!(
        o.status.success() && stdout(&o).contains("already free nothing-here"),
        "{}",
        said(&o)
    );

    // Nobody is quarantined: the list is empty, a lift is refused with the server's reason.
    let o = run(&base, "adm", &["quarantine", "list"]);
    assert!(o.status.success() && stdout(&o).is_empty(), "{}", said(&o));
    let o = run(&base, "adm", &["quarantine", "clear", "w1"]);
    assert!(
        !o.status.success() && said(&o).contains("not quarantined"),
        "{}",
        said(&o)
    );

    let metrics = reqwest::Client::new()
        .get(format!("{base}/metrics"))
        .bearer_auth("adm")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("ternflow_locks_broken_total 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ternflow_jobs_redriven_total 2\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ternflow_dead_letters_by_reason_total{reason=\"engine_failed\"} 2\n"),
        "{metrics}"
    );

    // The audit log: who did what to which.
    let log = srv.log();
    for line in ["dead letter redriven", "lock broken"] {
        assert!(
            log.contains(line),
            "no {line:?} in the server's log:\n{log}"
        );
    }
    assert_eq!(log.matches("dead letter redriven").count(), 2, "{log}");
    drop(srv);
}
