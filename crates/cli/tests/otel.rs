//! Traces leave the process: a real `ternflow serve` with the standard OTLP variables exports
//! each request's span over OTLP/gRPC to a real OTLP trace receiver (fake-opentelemetry-collector,
//! a gRPC server of the OTLP trace service in this test process: Jaeger, the receiver the issue
//! names, is a Go program this machine cannot fetch). Each span joins the trace of the request's
//! `traceparent`, under its span; one job's trace holds no other job's spans; and without the
//! variables nothing is exported. The same over OTLP/HTTP (protobuf, the default protocol) to an
//! HTTP receiver here that decodes each export with the OTLP protobuf types.

mod common;

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
    Server::start(&dir.join("data"), 0, &[], &envs)
}

/// Enqueues one job under `trace`, claims it (the claim in the worker's own trace) and nacks it
/// under the job's trace, as a worker does: returns the job's id.
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
    send(
        base,
        "wrk",
        &format!("/v1/jobs/{id}/nack"),
        &tp,
        json!({"token": job["lease"]["token"], "error": {"code": "engine_failed", "message": "x"}}),
    )
    .await;
    id
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
    let spans = collector.exported_spans(6, Duration::from_secs(20)).await;
    let names: Vec<(&str, &str)> = spans
        .iter()
        .map(|s| (s.trace_id.as_str(), s.name.as_str()))
        .collect();
    for (trace, parent, id, other) in [(TRACE_A, PARENT_A, &a, &b), (TRACE_B, PARENT_B, &b, &a)] {
        let mine = in_trace(&spans, trace);
        let mut got: Vec<&str> = mine.iter().map(|s| s.name.as_str()).collect();
        got.sort_unstable();
        assert_eq!(
            got,
            ["POST /v1/jobs", "POST /v1/jobs/{id}/nack"],
            "trace {trace}: {names:?}"
        );
        for s in &mine {
            // Children of the caller's span, as the traceparent says.
            assert_eq!(s.parent_span_id, parent, "{s:?}");
            assert_eq!(s.kind, "SPAN_KIND_SERVER", "{s:?}");
            let path = s.attributes.get("path").map(String::as_str).unwrap_or("");
            assert!(
                !path.contains(other.as_str()),
                "a span of {id}'s trace names {other}: {s:?}"
            );
        }
        let nack = mine.iter().find(|s| s.name.ends_with("/nack")).unwrap();
        // (The receiver writes attribute values as their protobuf `AnyValue`s.)
        let path = nack.attributes.get("path").cloned().unwrap_or_default();
        assert!(
            path.contains(&format!("\"/v1/jobs/{id}/nack\"")),
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
    let claims = in_trace(&spans, "11111111111111111111111111111111");
    assert_eq!(claims.len(), 2, "{names:?}");
    assert!(claims.iter().all(|s| s.name == "POST /v1/jobs/claim"));
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

/// An OTLP/HTTP trace receiver: `POST /v1/traces` with an `ExportTraceServiceRequest` in
/// protobuf, answered with an empty response; every span it is sent as (trace id, parent span
/// id, name), hex as in a `traceparent`.
async fn http_receiver() -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<(String, String, String)>>>,
) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message as _;
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| async move {
                assert_eq!(
                    headers.get("content-type").and_then(|v| v.to_str().ok()),
                    Some("application/x-protobuf")
                );
                let req = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf body");
                let mut got = sink.lock().unwrap();
                for rs in req.resource_spans {
                    for ss in rs.scope_spans {
                        for sp in ss.spans {
                            got.push((
                                hex::encode(&sp.trace_id),
                                hex::encode(&sp.parent_span_id),
                                sp.name,
                            ));
                        }
                    }
                }
                (
                    [("content-type", "application/x-protobuf")],
                    ExportTraceServiceRequest::default().encode_to_vec(),
                )
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_protobuf_too() {
    let (endpoint, got) = http_receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let srv = start_with(dir.path(), Some(&endpoint), "http/protobuf");
    one_job(&srv.base, TRACE_A, PARENT_A, "text of job a").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while got.lock().unwrap().len() < 3 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut spans = got.lock().unwrap().clone();
    spans.sort_unstable();
    let want = |t: &str, p: &str, n: &str| (t.to_owned(), p.to_owned(), n.to_owned());
    assert_eq!(
        spans,
        [
            want(
                "11111111111111111111111111111111",
                "2222222222222222",
                "POST /v1/jobs/claim"
            ),
            want(TRACE_A, PARENT_A, "POST /v1/jobs"),
            want(TRACE_A, PARENT_A, "POST /v1/jobs/{id}/nack"),
        ]
    );
    // The server is still serving after its exports (the export once panicked its runtime).
    let r = reqwest::get(format!("{}/healthz", srv.base)).await.unwrap();
    assert!(r.status().is_success());
    drop(srv);
}
