//! `GET /metrics` as Prometheus's own linter reads it: `promtool check metrics` (Debian's
//! `prometheus` package; `scripts/setup.sh` installs it) finds no problem in what a real
//! `ternflow serve` exposes, to the operator and to a tenant's admin, once every family has
//! samples: jobs leased and acked (the job latency histogram), a backend embed (the embed
//! latency histogram), worker snapshots (the worker families), a signed tenant (the tenant
//! families, quotas included).

mod common;

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use common::{mint, Server, SECRET_B64};
use serde_json::{json, Value};

/// `promtool check metrics < text`: its exit status and everything it printed.
fn promtool_check(text: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "promtool is not installed: scripts/setup.sh installs it (Debian's `prometheus` package)",
        );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
fn promtool_flags_what_it_should() {
    // The check itself can fail: a counter without `_total`, named after its type (what
    // /metrics exposed for worker counters before this test existed), is a problem to it.
    let (ok, said) =
        promtool_check("# HELP x_counter Jobs.\n# TYPE x_counter counter\nx_counter 1\n");
    assert!(
        !ok,
        "promtool check metrics exits non-zero on a problem: {said}"
    );
    assert!(said.contains("x_counter"), "{said}");
    let (ok, said) = promtool_check("# HELP x_total Jobs.\n# TYPE x_total counter\nx_total 1\n");
    assert!(ok && said.trim().is_empty(), "{said}");
}

/// Every histogram family in `text` has its `+Inf` bucket, `_sum` and `_count` (promtool 2.42
/// does not check that; Prometheus's `histogram_quantile` and rate-of-mean queries need them).
fn histograms_complete(text: &str) -> Result<usize, String> {
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" histogram"))
        .collect();
    for name in &names {
        // A sample of `name` + `suffix`, with or without labels.
        let has = |suffix: &str, label: &str| {
            text.lines().any(|l| {
                l.strip_prefix(&format!("{name}{suffix}"))
                    .is_some_and(|rest| rest.starts_with([' ', '{']) && rest.contains(label))
            })
        };
        if !has("_bucket", "le=\"+Inf\"") {
            return Err(format!("{name}: no +Inf bucket"));
        }
        for part in ["_sum", "_count"] {
            if !has(part, "") {
                return Err(format!("{name}: no {part}"));
            }
        }
    }
    Ok(names.len())
}

#[test]
fn the_histogram_check_can_fail() {
    let no_sum = "# TYPE h_seconds histogram\nh_seconds_bucket{le=\"+Inf\"} 1\nh_seconds_count 1\n";
    assert_eq!(
        histograms_complete(no_sum),
        Err("h_seconds: no _sum".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_pass_promtool_check_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/ternlight-int4.bin");
    let srv = Server::start(
        &dir.path().join("data"),
        0,
        &["--model", model.to_str().unwrap()],
        &[
            (
                "TERNFLOW_TOKENS",
                "adm:admin,prod:producer,wrk:worker".to_owned(),
            ),
            ("TERNFLOW_JWT_KEYS", format!("k1:hs256:{SECRET_B64}")),
        ],
    );
    let base = srv.base.clone();
    let http = reqwest::Client::new();
    let post = |token: String, path: &str, body: Value| {
        let req = http
            .post(format!("{base}{path}"))
            .bearer_auth(token)
            .json(&body);
        async move {
            let r = req.send().await.unwrap();
            let status = r.status().as_u16();
            let text = r.text().await.unwrap();
            assert!(status < 300, "{status}: {text}");
            serde_json::from_str::<Value>(&text).unwrap_or(Value::Null)
        }
    };
    // Two tenants at work: the static tokens' (`default`) and a signed one's (`acme`).
    for (producer, worker) in [
        ("prod".to_owned(), "wrk".to_owned()),
        (mint("producer", "acme"), mint("worker", "acme")),
    ] {
        for text in ["one", "two"] {
            post(producer.clone(), "/v1/jobs", json!({"text": text})).await;
        }
        let claimed = post(
            worker.clone(),
            "/v1/jobs/claim",
            json!({"worker": "w1", "max": 8}),
        )
        .await;
        let jobs = claimed["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 2, "{claimed}");
        // The worker's vector is the server's own (bit-exact engines): the ack verifies.
        let embedded = post(
            worker.clone(),
            "/v1/embed",
            json!({"texts": [jobs[0]["text"]]}),
        )
        .await;
        let body = json!({
            "token": jobs[0]["lease"]["token"],
            "worker": "w1",
            "result": {"model_id": embedded["model_id"], "vector": embedded["vectors"][0], "source": "engine"},
        });
        let id = jobs[0]["id"].as_str().unwrap();
        post(worker.clone(), &format!("/v1/jobs/{id}/ack"), body).await;
        let snap =
            json!({"worker": "w1", "counters": {"jobs_done": 1}, "gauges": {"in_flight": 1.0}});
        post(worker, "/v1/metrics", snap).await;
    }
    for (who, token, must_have) in [
        (
            "the operator",
            "adm".to_owned(),
            &[
                "ternflow_job_latency_seconds_sum ",
                "ternflow_embed_latency_seconds_sum ",
                "ternflow_worker_events_total{tenant=\"default\"",
                "ternflow_worker_reading{tenant=\"default\"",
                "ternflow_tenant_quota{tenant=\"acme\"",
                "ternflow_store_op_duration_seconds_bucket{op=\"claim\"",
                "ternflow_sse_clients ",
                "ternflow_claim_long_polls ",
            ][..],
        ),
        (
            "acme's admin",
            mint("admin", "acme"),
            &[
                "ternflow_tenant_queue{tenant=\"acme\"",
                "ternflow_worker_events_total{tenant=\"acme\"",
                "ternflow_tenant_quota{tenant=\"acme\"",
            ][..],
        ),
    ] {
        let text = http
            .get(format!("{base}/metrics"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for needle in must_have {
            assert!(text.contains(needle), "{who}: no {needle:?} in\n{text}");
        }
        if who == "the operator" {
            // Embed and job latency, store operations, lock waits and waiters.
            assert_eq!(histograms_complete(&text), Ok(5), "{text}");
        }
        let (ok, said) = promtool_check(&text);
        assert!(
            ok && said.trim().is_empty(),
            "{who}: promtool check metrics: {said}\n--- exposition ---\n{text}"
        );
    }
    drop(srv);
}
