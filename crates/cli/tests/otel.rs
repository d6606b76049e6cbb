//! Traces leave the process: a real `ternflow serve` with the standard OTLP variables exports
//! each request's span over OTLP/gRPC to a real OTLP trace receiver (fake-opentelemetry-collector,
//! a gRPC server of the OTLP trace service in this test process: Jaeger, the receiver the issue
//! names, is a Go program this machine cannot fetch). Each span joins the trace of the request's
//! `traceparent`, under its span; one job's trace holds no other job's spans; and without the
//! variables nothing is exported. The same over OTLP/HTTP (protobuf, the default protocol) to an
//! HTTP receiver here that decodes each export with the OTLP protobuf types.

mod common;
#[path = "common/otlp.rs"]
mod otlp;

use std::time::Duration;

use common::Server;
use fake_opentelemetry_collector::{ExportedSpan, FakeCollectorServer};
use serde_json::{json, Value};

const TRACE_A: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACE_B: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT_A: &str = "00f067aa0ba902b7";
const PARENT_B: &str = "b7ad6b7169203331";

async fn send(base: &str, token: &str, path: &str, traceparent: &str, body: Value) -> Value {
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .bearer_auth(token)
        .header("traceparent", traceparent)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{path}: {}", r.status());
    r.json().await.unwrap_or(Value::Null)
}

fn start(dir: &std::path::Path, otlp: Option<&str>) -> Server {
    start_with(dir, otlp, "grpc")
}

fn start_with(dir: &std::path::Path, otlp: Option<&str>, protocol: &str) -> Server {
    start_logging(dir, otlp, protocol, &[])
}

fn start_logging(
    dir: &std::path::Path,
    otlp: Option<&str>,
    protocol: &str,
    extra: &[&str],
) -> Server {
    let mut envs = vec![(
        "TERNFLOW_TOKENS",
        "adm:admin,prod:producer,wrk:worker".to_owned(),
    )];
    if let Some(endpoint) = otlp {
        envs.extend([
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.to_owned()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.to_owned()),
            ("OTEL_SERVICE_NAME", "ternflow-under-test".to_owned()),
            // Export within 100 ms rather than the default 5 s.
            ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ]);
    }
    if !extra.is_empty() {
        // The request lines too ("nacked" is logged at info).
        envs.push(("RUST_LOG", "info".to_owned()));
    }
    Server::start(&dir.join("data"), 0, extra, &envs)
}

/// Enqueues one job under `trace`, claims it (the claim in the worker's own trace) and nacks it
/// under the delivery's `traceparent` the claim handed out, as a worker does: returns the job's
/// id.
async fn one_job(base: &str, trace: &str, parent: &str, text: &str) -> String {
    let tp = format!("00-{trace}-{parent}-01");
    let r = send(
        base,
        "prod",
        "/v1/jobs",
        &tp,
        json!({"text": text, "model_id": "m1"}),
    )
    .await;
    let id = r["jobs"][0]["id"].as_str().unwrap().to_owned();
    let worker_tp = "00-11111111111111111111111111111111-2222222222222222-01";
    let claimed = send(
        base,
        "wrk",
        "/v1/jobs/claim",
        worker_tp,
        json!({"worker": "w1", "max": 1}),
    )
    .await;
    let job = &claimed["jobs"][0];
    assert_eq!(job["id"].as_str(), Some(id.as_str()), "{claimed}");
    let delivery = job["traceparent"].as_str().unwrap();
    assert!(delivery.starts_with(&format!("00-{trace}-")), "{claimed}");
    send(
        base,
        "wrk",
        &format!("/v1/jobs/{id}/nack"),
        delivery,
        json!({"token": job["lease"]["token"], "error": {"code": "engine_failed", "message": "x"}}),
    )
    .await;
    id
}

/// The one span of `spans` named `name`.
fn named<'a>(spans: &[&'a ExportedSpan], name: &str) -> &'a ExportedSpan {
    let found: Vec<_> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one {name}: {spans:?}");
    found[0]
}

fn in_trace<'a>(spans: &'a [ExportedSpan], trace: &str) -> Vec<&'a ExportedSpan> {
    spans.iter().filter(|s| s.trace_id == trace).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_s_span_joins_its_job_s_trace() {
    let mut collector = FakeCollectorServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path(), Some(&collector.endpoint()));
    let a = one_job(&srv.base, TRACE_A, PARENT_A, "text of job a").await;
    let b = one_job(&srv.base, TRACE_B, PARENT_B, "text of job b").await;
    let spans = collector.exported_spans(8, Duration::from_secs(20)).await;
    let names: Vec<(&str, &str)> = spans
        .iter()
        .map(|s| (s.trace_id.as_str(), s.name.as_str()))
        .collect();
    let claims = in_trace(&spans, "11111111111111111111111111111111");
    for (trace, parent, id, other) in [(TRACE_A, PARENT_A, &a, &b), (TRACE_B, PARENT_B, &b, &a)] {
        let mine = in_trace(&spans, trace);
        let mut got: Vec<&str> = mine.iter().map(|s| s.name.as_str()).collect();
        got.sort_unstable();
        assert_eq!(
            got,
            ["POST /v1/jobs", "POST /v1/jobs/{id}/nack", "deliver job"],
            "trace {trace}: {names:?}"
        );
        // The enqueue under the producer's span; the delivery under the enqueue, linked to
        // the claim that made it; the nack under the delivery.
        let enqueue = named(&mine, "POST /v1/jobs");
        let delivery = named(&mine, "deliver job");
        let nack = named(&mine, "POST /v1/jobs/{id}/nack");
        assert_eq!(enqueue.parent_span_id, parent, "{enqueue:?}");
        assert_eq!(enqueue.kind, "SPAN_KIND_SERVER", "{enqueue:?}");
        assert_eq!(delivery.parent_span_id, enqueue.span_id, "{delivery:?}");
        assert_eq!(delivery.kind, "SPAN_KIND_CONSUMER", "{delivery:?}");
        assert_eq!(nack.parent_span_id, delivery.span_id, "{nack:?}");
        assert_eq!(delivery.links.len(), 1, "{delivery:?}");
        assert!(
            claims
                .iter()
                .any(|c| c.span_id == delivery.links[0].span_id),
            "the delivery links to its claim: {delivery:?}"
        );
        let attr = |s: &ExportedSpan, k: &str| s.attributes.get(k).cloned().unwrap_or_default();
        assert!(attr(delivery, "job").contains(id.as_str()), "{delivery:?}");
        assert!(
            attr(delivery, "outcome").contains("retried"),
            "{delivery:?}"
        );
        for s in &mine {
            for v in s.attributes.values() {
                assert!(
                    !v.contains(other.as_str()),
                    "a span of {id}'s trace names {other}: {s:?}"
                );
            }
        }
        // (The receiver writes attribute values as their protobuf `AnyValue`s.)
        assert!(
            attr(nack, "path").contains(&format!("\"/v1/jobs/{id}/nack\"")),
            "{nack:?}"
        );
        // The server's log lines inside the request are its events, with the job's id.
        assert!(
            nack.events.iter().any(|e| e.name == "nacked"
                && e.attributes
                    .get("job")
                    .is_some_and(|j| j.contains(id.as_str()))),
            "{nack:?}"
        );
    }
    // The claims ran in the worker's own trace.
    assert_eq!(claims.len(), 2, "{names:?}");
    assert!(claims.iter().all(|s| s.name == "POST /v1/jobs/claim"));
    drop(srv);
}

/// An ack of `job` (a claimed job's JSON) with `timing`, sent under the delivery's traceparent.
async fn ack_with(base: &str, job: &Value, timing: Value) {
    let id = job["id"].as_str().unwrap();
    send(
        base,
        "wrk",
        &format!("/v1/jobs/{id}/ack"),
        job["traceparent"].as_str().unwrap(),
        json!({
            "token": job["lease"]["token"],
            "result": {"model_id": "m1", "vector": "AACAPw==", "source": "engine"},
            "timing": timing,
        }),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_s_steps_are_exported_under_its_own_delivery_only() {
    let mut collector = FakeCollectorServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path(), Some(&collector.endpoint()));
    for (trace, parent, text) in [
        (TRACE_A, PARENT_A, "steps a"),
        (TRACE_B, PARENT_B, "steps b"),
    ] {
        send(
            &srv.base,
            "prod",
            "/v1/jobs",
            &format!("00-{trace}-{parent}-01"),
            json!({"text": text, "model_id": "m1"}),
        )
        .await;
    }
    let claimed = send(
        &srv.base,
        "wrk",
        "/v1/jobs/claim",
        "00-11111111111111111111111111111111-2222222222222222-01",
        json!({"worker": "w1", "max": 2}),
    )
    .await;
    let jobs = claimed["jobs"].as_array().unwrap();
    let job_in = |t: &str| {
        jobs.iter()
            .find(|j| j["traceparent"].as_str().unwrap().contains(t))
            .unwrap()
            .clone()
    };
    let (a, b) = (job_in(TRACE_A), job_in(TRACE_B));
    // The worker's run: 20 ms on its clock, inside the delivery (the server clamps it there).
    tokio::time::sleep(Duration::from_millis(40)).await;
    let steps = json!([
        {"step": "local_cache", "start_us": 100, "us": 400},
        {"step": "engine", "start_us": 1_000, "us": 15_000, "failed": true},
        {"step": "backend", "start_us": 16_000, "us": 3_000},
    ]);
    ack_with(
        &srv.base,
        &a,
        json!({"traceparent": a["traceparent"], "run_us": 20_000, "steps": steps}),
    )
    .await;
    // B's ack names A's delivery: it is acked, and its report dropped.
    ack_with(
        &srv.base,
        &b,
        json!({"traceparent": a["traceparent"], "run_us": 20_000, "steps": steps}),
    )
    .await;
    let spans = collector.exported_spans(10, Duration::from_secs(20)).await;
    let mine = in_trace(&spans, TRACE_A);
    let delivery = named(&mine, "deliver job");
    assert!(
        a["traceparent"]
            .as_str()
            .unwrap()
            .contains(&delivery.span_id),
        "the claim's traceparent names the delivery: {delivery:?}"
    );
    let local = named(&mine, "worker local_cache");
    let engine = named(&mine, "worker engine");
    let backend = named(&mine, "worker backend");
    for s in [local, engine, backend] {
        assert_eq!(s.parent_span_id, delivery.span_id, "{s:?}");
        assert!(
            s.start_time_unix_nano >= delivery.start_time_unix_nano,
            "{s:?}"
        );
        assert!(s.end_time_unix_nano <= delivery.end_time_unix_nano, "{s:?}");
        assert!(
            s.attributes.get("reported_by").is_some_and(|v| v.len() > 2),
            "who reported it: {s:?}"
        );
    }
    // Durations as reported, in order, the failed step marked.
    let took = |s: &ExportedSpan| s.end_time_unix_nano - s.start_time_unix_nano;
    assert_eq!(
        (took(local), took(engine), took(backend)),
        (400_000, 15_000_000, 3_000_000)
    );
    assert!(local.end_time_unix_nano <= engine.start_time_unix_nano);
    assert!(engine.end_time_unix_nano <= backend.start_time_unix_nano);
    assert!(
        format!("{:?}", engine.status).contains("failed on the worker"),
        "{engine:?}"
    );
    assert!(
        !format!("{:?}", backend.status).contains("failed"),
        "{backend:?}"
    );
    // A's trace: enqueue, delivery, ack and the three steps; nothing of B's.
    assert_eq!(mine.len(), 6, "{mine:?}");
    let theirs = in_trace(&spans, TRACE_B);
    let mut got: Vec<&str> = theirs.iter().map(|s| s.name.as_str()).collect();
    got.sort_unstable();
    assert_eq!(
        got,
        ["POST /v1/jobs", "POST /v1/jobs/{id}/ack", "deliver job"]
    );
    let b_delivery = named(&theirs, "deliver job");
    assert!(
        b_delivery
            .attributes
            .get("worker.timing")
            .is_some_and(|v| v.contains("refused")),
        "{b_delivery:?}"
    );
    drop(srv);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_nothing_is_exported() {
    let mut collector = FakeCollectorServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path(), None);
    one_job(&srv.base, TRACE_A, PARENT_A, "text").await;
    let spans = collector.exported_spans(1, Duration::from_secs(2)).await;
    assert!(spans.is_empty(), "{spans:?}");
    drop(srv);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_protobuf_too() {
    let (endpoint, got) = otlp::receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let srv = start_with(dir.path(), Some(&endpoint), "http/protobuf");
    one_job(&srv.base, TRACE_A, PARENT_A, "text of job a").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while got.lock().unwrap().len() < 4 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let spans = got.lock().unwrap().clone();
    let find = |name: &str| {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no {name}: {spans:?}"))
            .clone()
    };
    let (claim, enqueue) = (find("POST /v1/jobs/claim"), find("POST /v1/jobs"));
    let (delivery, nack) = (find("deliver job"), find("POST /v1/jobs/{id}/nack"));
    assert_eq!(spans.len(), 4, "{spans:?}");
    assert_eq!(
        (claim.trace.as_str(), claim.parent.as_str()),
        ("11111111111111111111111111111111", "2222222222222222")
    );
    assert_eq!(
        (enqueue.trace.as_str(), enqueue.parent.as_str()),
        (TRACE_A, PARENT_A)
    );
    // The delivery under the enqueue, the nack under the delivery.
    assert_eq!(
        (delivery.trace.as_str(), &delivery.parent),
        (TRACE_A, &enqueue.span)
    );
    assert_eq!(
        (nack.trace.as_str(), &nack.parent),
        (TRACE_A, &delivery.span)
    );
    // The server is still serving after its exports (the export once panicked its runtime).
    let r = reqwest::get(format!("{}/healthz", srv.base)).await.unwrap();
    assert!(r.status().is_success());
    drop(srv);
}

/// The JSON log line of `job`'s nack: its request span's fields (`spans`, outermost first).
fn nack_line(log: &str, job: &str) -> Value {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["fields"]["message"] == "nacked" && v["fields"]["job"] == job)
        .unwrap_or_else(|| panic!("no JSON \"nacked\" line for {job}:\n{log}"))
}

fn request_fields(line: &Value) -> &Value {
    line["spans"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "request"))
        .unwrap_or_else(|| panic!("no request span in {line}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_lines_carry_the_trace_id_and_with_export_the_span_id() {
    // Without export: the trace id the request's traceparent names.
    let dir = tempfile::tempdir().unwrap();
    let srv = start_logging(dir.path(), None, "grpc", &["--log-format", "json"]);
    let id = one_job(&srv.base, TRACE_A, PARENT_A, "logged a").await;
    let log = srv.log();
    let line = nack_line(&log, &id);
    let fields = request_fields(&line);
    assert_eq!(fields["trace_id"], TRACE_A, "{line}");
    assert!(
        fields.get("span_id").is_none(),
        "no span of its own: {line}"
    );
    drop(srv);

    // Exporting: the trace id and the id of the exported span the line belongs to.
    let mut collector = FakeCollectorServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let srv = start_logging(
        dir.path(),
        Some(&collector.endpoint()),
        "grpc",
        &["--log-format", "json"],
    );
    let id = one_job(&srv.base, TRACE_B, PARENT_B, "logged b").await;
    let spans = collector.exported_spans(4, Duration::from_secs(20)).await;
    let nack = spans
        .iter()
        .find(|s| s.name == "POST /v1/jobs/{id}/nack")
        .unwrap_or_else(|| panic!("{spans:?}"));
    let log = srv.log();
    let line = nack_line(&log, &id);
    let fields = request_fields(&line);
    assert_eq!(fields["trace_id"], TRACE_B, "{line}");
    assert_eq!(
        fields["span_id"].as_str(),
        Some(nack.span_id.as_str()),
        "{line}"
    );
    drop(srv);
}
