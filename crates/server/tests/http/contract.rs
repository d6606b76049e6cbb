//! The contract as a whole: the served OpenAPI document against the routes and error codes,
//! and every rejection (limits, malformed bodies) a JSON error body.

use axum::http::StatusCode;
use serde_json::{json, Value};
use ternflow_server::{app, Config};

use crate::common::{call, call_raw, state_with, Api, ADMIN, PRODUCER, WORKER};
use crate::error_code;

#[test]
fn openapi_error_codes_are_the_closed_set() {
    let doc: Value = serde_json::from_str(include_str!("../../openapi.json")).unwrap();
    let listed: Vec<&str> = doc["components"]["schemas"]["ErrorBody"]["properties"]["error"]
        ["properties"]["code"]["enum"]
        .as_array()
        .expect("ErrorBody.error.code lists its values")
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let all: Vec<&str> = ternflow_core::ErrorCode::ALL
        .iter()
        .map(|c| c.as_str())
        .collect();
    assert_eq!(
        listed, all,
        "openapi.json's error codes vs ErrorCode, in order"
    );
}

#[tokio::test]
async fn openapi_lists_exactly_the_routes_served() {
    let (state, _) = state_with(Config {
        max_wait_ms: 0,
        ..Config::default()
    });
    let app = app(state);
    let doc: Value = serde_json::from_str(include_str!("../../openapi.json")).unwrap();
    let mut served = 0;
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            if path == "/v1/events" {
                continue; // a stream; covered by tests/sse_and_shutdown.rs
            }
            let uri = path
                .replace("{id}", "x")
                .replace("{key}", "m:x")
                .replace("{sub}", "s");
            let r = call(
                &app,
                &method.to_uppercase(),
                &uri,
                Some(ADMIN),
                Some(json!({})),
            )
            .await;
            assert_ne!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            assert_ne!(
                r.json["error"]["message"], "no such route",
                "{method} {path}"
            );
            served += 1;
        }
    }
    // 37 operations in the router (routes/mod.rs; `/dashboard/` only redirects), the SSE route
    // checked elsewhere.
    assert_eq!(
        served, 36,
        "the document lists every operation the router serves"
    );
}

#[tokio::test]
async fn every_rejection_is_a_json_error_body() {
    let (state, _) = state_with(Config {
        max_body_bytes: 1_024,
        ..Config::default()
    });
    let app = app(state);
    let big = vec![b'x'; 4_096];
    // (method, uri, token, content type, body, status, code)
    type Case<'a> = (
        &'a str,
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        Vec<u8>,
        u16,
        &'a str,
    );
    let cases: Vec<Case> = vec![
        (
            "GET",
            "/v1/dlq?limit=abc",
            Some(ADMIN),
            None,
            vec![],
            400,
            "bad_query",
        ),
        (
            "GET",
            "/v1/events?last_event_id=abc",
            Some(WORKER),
            None,
            vec![],
            400,
            "bad_query",
        ),
        (
            "GET",
            "/v1/jobs/%FF",
            Some(WORKER),
            None,
            vec![],
            400,
            "bad_path",
        ),
        (
            "GET",
            "/v1/jobs/bad%20id",
            Some(WORKER),
            None,
            vec![],
            400,
            "bad_id",
        ),
        (
            "POST",
            "/v1/jobs",
            Some(PRODUCER),
            Some("application/json"),
            b"{".to_vec(),
            400,
            "bad_json",
        ),
        (
            "POST",
            "/v1/jobs",
            Some(PRODUCER),
            Some("text/plain"),
            b"{}".to_vec(),
            400,
            "bad_content_type",
        ),
        // The lock's body is optional, but when there is one it is JSON like every other.
        (
            "POST",
            "/v1/locks/ct",
            Some(WORKER),
            Some("text/plain"),
            b"{\"ttl_ms\": 5000}".to_vec(),
            400,
            "bad_content_type",
        ),
        (
            "POST",
            "/v1/locks/ct",
            Some(WORKER),
            Some("application/json"),
            b"{\"ttl_ms\": ".to_vec(),
            400,
            "bad_json",
        ),
        (
            "POST",
            "/v1/jobs",
            Some(PRODUCER),
            Some("application/json"),
            big.clone(),
            413,
            "too_large",
        ),
        (
            "POST",
            "/v1/locks/k",
            Some(WORKER),
            Some("application/json"),
            big,
            413,
            "too_large",
        ),
        (
            "POST",
            "/v1/locks/k",
            Some(WORKER),
            Some("application/json"),
            b"nope".to_vec(),
            400,
            "bad_json",
        ),
        (
            "POST",
            "/v1/jobs",
            None,
            Some("application/json"),
            b"{}".to_vec(),
            401,
            "unauthorized",
        ),
        (
            "POST",
            "/v1/jobs",
            Some("forged"),
            Some("application/json"),
            b"{}".to_vec(),
            401,
            "unauthorized",
        ),
        (
            "POST",
            "/v1/jobs/claim",
            Some(PRODUCER),
            Some("application/json"),
            b"{}".to_vec(),
            403,
            "forbidden",
        ),
        (
            "GET",
            "/v1/nope",
            Some(ADMIN),
            None,
            vec![],
            404,
            "not_found",
        ),
        (
            "DELETE",
            "/v1/jobs",
            Some(ADMIN),
            None,
            vec![],
            405,
            "method_not_allowed",
        ),
        (
            "GET",
            "/v1/jobs/none",
            Some(WORKER),
            None,
            vec![],
            404,
            "not_found",
        ),
    ];
    for (method, uri, token, ct, body, status, code) in cases {
        let r = call_raw(&app, method, uri, token, ct, body).await;
        assert_eq!(r.status.as_u16(), status, "{method} {uri}: {}", r.text);
        assert_eq!(
            r.headers["content-type"], "application/json",
            "{method} {uri}"
        );
        assert_eq!(error_code(&r.json), code, "{method} {uri}: {}", r.text);
        assert!(
            r.json["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{method} {uri}"
        );
    }
    // The scheme is case-insensitive.
    let req = axum::http::Request::builder()
        .uri("/v1/jobs/none")
        .header("authorization", format!("bearer {WORKER}"))
        .body(axum::body::Body::empty())
        .unwrap();
    let resp = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn limits_and_malformed_bodies() {
    let (state, _) = state_with(Config {
        max_body_bytes: 4_096,
        max_text_bytes: 100,
        ..Config::default()
    });
    let app = app(state);
    let api = Api(app.clone());
    let big = json!({"text": "x".repeat(10_000)});
    let r = api.enqueue(big).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error_code(&r.json), "too_large");
    let long = json!({"text": "x".repeat(200)});
    let r = api.enqueue(long).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error_code(&r.json), "text_too_long");
    let r = call_raw(
        &app,
        "POST",
        "/v1/jobs",
        Some(PRODUCER),
        Some("application/json"),
        b"{nope".to_vec(),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&r.json), "bad_json");
    let r = call_raw(
        &app,
        "POST",
        "/v1/jobs",
        Some(PRODUCER),
        None,
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&r.json), "bad_content_type");
    let r = api.enqueue(json!({"jobs": []})).await;
    assert_eq!(error_code(&r.json), "empty_batch");
    let r = api.enqueue(json!({"text": "x", "priority": 5000})).await;
    assert_eq!(error_code(&r.json), "bad_priority");
    let r = api
        .post(
            Some(WORKER),
            "/v1/jobs/claim",
            json!({"worker": "w", "max": 0}),
        )
        .await;
    assert_eq!(error_code(&r.json), "bad_max");
    let bad_vec =
        json!({"token": "t", "result": {"model_id": "m", "vector": "!!", "source": "engine"}});
    let r = api.post(Some(WORKER), "/v1/jobs/j/ack", bad_vec).await;
    assert_eq!(error_code(&r.json), "bad_json");
    let r = api
        .post(
            Some(WORKER),
            "/v1/embed",
            json!({"texts": ["x".repeat(200)]}),
        )
        .await;
    assert_eq!(error_code(&r.json), "text_too_long");
}
