//! Who may call what: tokens and roles, rate limits per token, CORS.

use axum::http::StatusCode;
use serde_json::json;
use ternflow_server::{app, Config};

use crate::common::{call, state_with, Api, ADMIN, PRODUCER, WORKER};
use crate::error_code;

#[tokio::test]
async fn auth_and_roles() {
    let (state, _) = state_with(Config::default());
    let app = app(state);
    let api = Api(app.clone());
    let r = api.post(None, "/v1/jobs", json!({"text": "x"})).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(error_code(&r.json), "unauthorized");
    let r = api
        .post(Some("bogus"), "/v1/jobs", json!({"text": "x"}))
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = api
        .post(Some(WORKER), "/v1/jobs", json!({"text": "x"}))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(error_code(&r.json), "forbidden");
    let claim = json!({"worker": "w"});
    let r = api
        .post(Some(PRODUCER), "/v1/jobs/claim", claim.clone())
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = api.get(Some(WORKER), "/v1/dlq").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = api.get(Some(PRODUCER), "/metrics").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // Admin passes every gate.
    let r = api.post(Some(ADMIN), "/v1/jobs/claim", claim).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = api.get(Some(ADMIN), "/v1/dlq").await;
    assert_eq!(r.status, StatusCode::OK);
    // `?token=` only on /v1/events.
    let r = api.get(None, &format!("/v1/dlq?token={ADMIN}")).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    // Public routes.
    let r = api.get(None, "/openapi.json").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json["openapi"], "3.0.3");
    let r = call(&app, "PATCH", "/v1/jobs", Some(ADMIN), None).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(error_code(&r.json), "method_not_allowed");
    let r = api.get(Some(ADMIN), "/nope").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(error_code(&r.json), "not_found");
}

#[tokio::test]
async fn a_token_over_its_rate_gets_429_with_retry_after() {
    let (state, _) = state_with(Config {
        rate_per_token: 1,
        rate_burst: 5,
        ..Config::default()
    });
    let app = app(state);
    let api = Api(app.clone());
    for _ in 0..5 {
        let r = api.get(Some(WORKER), "/v1/jobs/none").await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
    }
    let r = api.get(Some(WORKER), "/v1/jobs/none").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(error_code(&r.json), "too_many_requests");
    assert!(
        r.headers["retry-after"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
    // Another token has its own bucket.
    let r = api.get(Some(PRODUCER), "/v1/jobs/none").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn cors_allow_list_and_corp() {
    let (state, _) = state_with(Config {
        cors_origins: vec!["https://app.example".to_owned()],
        cors_allow_localhost: true,
        ..Config::default()
    });
    let app = app(state);
    let api = Api(app.clone());
    for (origin, allowed) in [
        ("https://app.example", true),
        ("http://127.0.0.1:43817", true),
        ("https://evil.example", false),
    ] {
        let req = axum::http::Request::builder()
            .method("OPTIONS")
            .uri("/v1/jobs/claim")
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type",
            )
            .body(axum::body::Body::empty())
            .unwrap();
        let resp = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap();
        let acao = resp.headers().get("access-control-allow-origin");
        assert_eq!(acao.is_some(), allowed, "{origin}");
        if allowed {
            assert_eq!(acao.unwrap(), origin);
        }
    }
    let r = api.get(Some(ADMIN), "/v1/stats").await;
    assert_eq!(r.headers["cross-origin-resource-policy"], "cross-origin");
    let r = api.get(None, "/v1/stats").await;
    assert_eq!(
        r.headers["cross-origin-resource-policy"], "cross-origin",
        "errors too"
    );
}
