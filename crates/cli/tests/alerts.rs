//! The alert rules (`deploy/prometheus/alerts.yml`) as Prometheus reads them: `promtool check
//! rules` finds them valid, `promtool test rules` runs their cases (each alert fired by its
//! condition, all quiet on a normal run: `alerts.test.yml`), and every `ternflow_*` series they
//! name is one a real `ternflow serve` exports, so no rule watches a name that does not exist.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::Server;
use serde_json::{json, Value};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus")
}

/// `promtool ARGS` in `dir`: its exit status and everything it printed.
fn promtool(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect(
            "promtool is not installed: scripts/setup.sh installs it (Debian's `prometheus` package)",
        );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
fn the_rules_are_valid_and_their_cases_pass() {
    let (ok, said) = promtool(&deploy(), &["check", "rules", "alerts.yml"]);
    assert!(ok && said.contains("SUCCESS: 12 rules found"), "{said}");
    let (ok, said) = promtool(&deploy(), &["test", "rules", "alerts.test.yml"]);
    assert!(ok && said.contains("SUCCESS"), "{said}");
}

#[test]
fn a_case_the_rules_do_not_meet_fails() {
    // The same rules, and a case that expects the dead-letter alert on one dead letter: the
    // runner must say no (so the passing run above means something).
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(deploy().join("alerts.yml"), dir.path().join("alerts.yml")).unwrap();
    std::fs::write(
        dir.path().join("wrong.test.yml"),
        r#"rule_files: [alerts.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'ternflow_jobs_dead_total{job="ternflow",instance="s1"}'
        values: '0 1 1 1 1 1'
    alert_rule_test:
      - eval_time: 5m
        alertname: TernflowDeadLettersGrowing
        exp_alerts:
          - exp_labels: {severity: page}
"#,
    )
    .unwrap();
    let (ok, said) = promtool(dir.path(), &["test", "rules", "wrong.test.yml"]);
    assert!(!ok && said.contains("FAILED"), "{said}");
}

/// The `ternflow_*` series an expression names (a histogram's `_bucket` and `_count` are its
/// family's samples and stay as written).
fn named_series(rules: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in rules.lines().filter(|l| !l.trim_start().starts_with('#')) {
        let mut rest = line;
        while let Some(at) = rest.find("ternflow_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[at + name.len()..];
            out.insert(name);
        }
    }
    out
}

/// The sample names of an exposition.
fn exported(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or("").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_the_rules_name_is_exported() {
    let rules = std::fs::read_to_string(deploy().join("alerts.yml")).unwrap();
    let named = named_series(&rules);
    assert!(named.len() >= 18, "{named:?}");

    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(
        &dir.path().join("data"),
        0,
        &[],
        &[(
            "TERNFLOW_TOKENS",
            "adm:admin,prod:producer,wrk:worker".to_owned(),
        )],
    );
    let base = srv.base.clone();
    let http = reqwest::Client::new();
    let send = |method: reqwest::Method, token: &'static str, path: String, body: Value| {
        let req = http
            .request(method, format!("{base}{path}"))
            .bearer_auth(token)
            .header(
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            )
            .json(&body);
        async move {
            let r = req.send().await.unwrap();
            let status = r.status().as_u16();
            let v = r.json::<Value>().await.unwrap_or(Value::Null);
            (status, v)
        }
    };
    // A job claimed and nacked (a retry), a lock granted, refused to a second caller and
    // released, a worker's snapshot with its breakers.
    let (s, _) = send(
        reqwest::Method::POST,
        "prod",
        "/v1/jobs".into(),
        json!({"text": "one"}),
    )
    .await;
    assert_eq!(s, 200);
    let (_, claimed) = send(
        reqwest::Method::POST,
        "wrk",
        "/v1/jobs/claim".into(),
        json!({"worker": "w1", "max": 1}),
    )
    .await;
    let job = &claimed["jobs"][0];
    let id = job["id"].as_str().expect("a job");
    let (s, v) = send(
        reqwest::Method::POST,
        "wrk",
        format!("/v1/jobs/{id}/nack"),
        json!({"token": job["lease"]["token"], "error": {"code": "engine_failed", "message": "x"}}),
    )
    .await;
    assert_eq!((s, v["outcome"].as_str()), (200, Some("retry")), "{v}");
    let (s, grant) = send(
        reqwest::Method::POST,
        "wrk",
        "/v1/locks/k1".into(),
        json!({}),
    )
    .await;
    assert_eq!(s, 200, "{grant}");
    let (s, _) = send(
        reqwest::Method::POST,
        "wrk",
        "/v1/locks/k1".into(),
        json!({}),
    )
    .await;
    assert_eq!(s, 409);
    let (s, _) = send(
        reqwest::Method::DELETE,
        "wrk",
        "/v1/locks/k1".into(),
        json!({"token": grant["token"]}),
    )
    .await;
    assert_eq!(s, 204);
    let (s, _) = send(
        reqwest::Method::POST,
        "wrk",
        "/v1/metrics".into(),
        json!({"worker": "w1", "counters": {}, "gauges": {"backend_breaker": 0.0, "engine_breaker": 0.0}}),
    )
    .await;
    assert!(s < 300);

    let text = http
        .get(format!("{base}/metrics"))
        .bearer_auth("adm")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let have = exported(&text);
    let missing: Vec<_> = named.iter().filter(|n| !have.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "alerts.yml names series /metrics does not export: {missing:?}\n--- exposition ---\n{text}"
    );
    // The contention episode above ended at the release: one waiter, observed.
    assert!(
        text.contains("ternflow_lock_waiters_bucket{le=\"1\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "ternflow_nacks_by_reason_total{outcome=\"retry\",reason=\"engine_failed\"} 1\n"
        ),
        "{text}"
    );
    drop(srv);
}
