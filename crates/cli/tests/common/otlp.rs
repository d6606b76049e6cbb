//! An OTLP/HTTP trace receiver for the tests that read a server's spans back: `POST /v1/traces`
//! with an `ExportTraceServiceRequest` in protobuf (decoded with the OTLP protobuf types),
//! answered with an empty response, every span kept.
#![allow(dead_code)] // each test binary reads its own subset of a span's fields

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message as _;

/// One span received, ids in hex as in a `traceparent`.
#[derive(Debug, Clone)]
pub struct Seen {
    pub trace: String,
    pub span: String,
    pub parent: String,
    pub name: String,
    /// String, integer and boolean attributes, as text.
    pub attrs: BTreeMap<String, String>,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// The spans received so far.
pub type Received = Arc<Mutex<Vec<Seen>>>;

/// Starts a receiver on a free loopback port: its base URL (the OTLP endpoint) and its spans.
pub async fn receiver() -> (String, Received) {
    let got: Received = Arc::default();
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
                            let attrs = sp
                                .attributes
                                .iter()
                                .filter_map(|kv| {
                                    let v = match kv.value.as_ref()?.value.as_ref()? {
                                        Any::StringValue(s) => s.clone(),
                                        Any::IntValue(i) => i.to_string(),
                                        Any::BoolValue(b) => b.to_string(),
                                        _ => return None,
                                    };
                                    Some((kv.key.clone(), v))
                                })
                                .collect();
                            got.push(Seen {
                                trace: hex::encode(&sp.trace_id),
                                span: hex::encode(&sp.span_id),
                                parent: hex::encode(&sp.parent_span_id),
                                name: sp.name,
                                attrs,
                                start_ns: sp.start_time_unix_nano,
                                end_ns: sp.end_time_unix_nano,
                            });
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
