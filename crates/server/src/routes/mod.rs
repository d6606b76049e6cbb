//! The router: one file per route family, grouped by the role each needs.
//!
//! # Layout
//! - `jobs` (enqueue, claim, status, heartbeat, ack, nack, release), `dlq` (dead letters,
//!   redrive), `events` (SSE): the queue.
//! - `cache` (the fenced remote cache), `locks` (single-flight locks), `embed` (backend
//!   inference, with its budgets), `model` (the model file, public).
//! - `metrics` (Prometheus, stats, worker snapshots), `dashboard` (the page, its data, search),
//!   `health` (`/healthz`, `/readyz`, public), `quarantine` (quarantined worker identities).
//! - `openapi_check` (tests): the served `openapi.json`, compared field by field with the serde
//!   types it documents.

use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderName, HeaderValue, Method};
use axum::middleware::from_fn_with_state;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::TraceLayer;

use crate::auth::{gate, Gate, Role};
use crate::config::Config;
use crate::error::Error;
use crate::state::AppState;

pub(crate) mod cache;
pub(crate) mod dashboard;
pub(crate) mod dlq;
pub(crate) mod embed;
pub(crate) mod events;
pub(crate) mod health;
pub(crate) mod jobs;
pub(crate) mod locks;
pub(crate) mod metrics;
pub(crate) mod model;
#[cfg(test)]
mod openapi_check;
pub(crate) mod quarantine;

const OPENAPI: &str = include_str!("../../openapi.json");

fn guarded(
    state: &AppState,
    roles: &'static [Role],
    allow_query_token: bool,
    r: Router<AppState>,
) -> Router<AppState> {
    let g = Gate {
        tokens: state.tokens.clone(),
        keys: state.keys.clone(),
        clock: state.clock.clone(),
        limits: state.limits.clone(),
        roles,
        allow_query_token,
    };
    r.route_layer(from_fn_with_state(g, gate))
}

fn is_localhost(origin: &str) -> bool {
    ["http://localhost", "http://127.0.0.1", "http://[::1]"]
        .iter()
        .any(|base| {
            origin.strip_prefix(base).is_some_and(|rest| {
                rest.is_empty()
                    || rest
                        .strip_prefix(':')
                        .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            })
        })
}

fn cors(cfg: &Config) -> CorsLayer {
    let allowed = cfg.cors_origins.clone();
    let localhost = cfg.cors_allow_localhost;
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin: &HeaderValue, _| {
            let Ok(o) = origin.to_str() else {
                return false;
            };
            allowed.iter().any(|a| a == o) || (localhost && is_localhost(o))
        }))
        .allow_methods([Method::GET, Method::POST, Method::PUT, Method::DELETE])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            HeaderName::from_static("last-event-id"),
            HeaderName::from_static("traceparent"),
        ])
        .expose_headers([header::RETRY_AFTER])
        .max_age(std::time::Duration::from_secs(600))
}

/// One span per request, carrying the W3C `traceparent` the client sent (workers send the one
/// they got with the job), so a job's claim, heartbeats, cache and lock calls, and ack or nack
/// share its trace id in the logs.
fn request_span(req: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    // Client-chosen: escaped and bounded (a W3C traceparent is 55 characters).
    let traceparent = crate::identity::loggable(
        req.headers()
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .unwrap_or(""),
        55,
    );
    let span = tracing::info_span!(
        "request",
        otel.name = %route_name(req.method(), req.uri().path()),
        otel.kind = "server",
        method = %req.method(),
        path = %req.uri().path(),
        traceparent = %traceparent,
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
    );
    // With an OpenTelemetry layer installed (`ternflow serve` with an OTLP endpoint), the span
    // joins the caller's trace: its parent is the `traceparent`'s span. Without one this is a
    // no-op; a malformed header starts a new trace.
    let parent = opentelemetry::global::get_text_map_propagator(|p| {
        p.extract(&HeaderCarrier(req.headers()))
    });
    let _ = tracing_opentelemetry::OpenTelemetrySpanExt::set_parent(&span, parent);
    // Every log line of the request carries its trace id (and, when spans are exported, this
    // span's id) as fields, so a log search and a trace view meet on the same ids.
    use opentelemetry::trace::TraceContextExt as _;
    let cx = tracing_opentelemetry::OpenTelemetrySpanExt::context(&span);
    let exported = cx.span().span_context().clone();
    if exported.is_valid() {
        span.record("trace_id", tracing::field::display(exported.trace_id()));
        span.record("span_id", tracing::field::display(exported.span_id()));
    } else if let Some(t) = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(ternflow_core::trace::TraceParent::parse)
    {
        span.record("trace_id", tracing::field::display(&t.trace_id));
    }
    span
}

/// A request's headers as an OpenTelemetry propagator reads them.
struct HeaderCarrier<'a>(&'a axum::http::HeaderMap);

impl opentelemetry::propagation::Extractor for HeaderCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(axum::http::HeaderName::as_str).collect()
    }
}

/// A span's name: the method and the route, ids and keys replaced by their parameter's name
/// (`POST /v1/jobs/{id}/ack`), so span names stay a small set.
fn route_name(method: &Method, path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut parts = path.split('/').skip(1).peekable();
    let mut prev = "";
    while let Some(p) = parts.next() {
        out.push('/');
        let param = match prev {
            "jobs"
                if !matches!(
                    p,
                    "claim" | "ack" | "heartbeat" | "nack" | "release" | "status"
                ) =>
            {
                Some("{id}")
            }
            "dlq" => Some("{id}"),
            "cache" | "locks" => Some("{key}"),
            "quarantine" => Some("{sub}"),
            "dashboard" => Some("{file}"),
            _ => None,
        };
        out.push_str(param.unwrap_or(p));
        prev = if param.is_some() { "" } else { p };
        if parts.peek().is_none() {
            break;
        }
    }
    format!("{method} {out}")
}

#[cfg(test)]
mod route_name_tests {
    use super::*;

    #[test]
    fn ids_and_keys_become_their_parameter() {
        for (m, path, name) in [
            (Method::POST, "/v1/jobs", "POST /v1/jobs"),
            (Method::POST, "/v1/jobs/claim", "POST /v1/jobs/claim"),
            (Method::POST, "/v1/jobs/j-1/ack", "POST /v1/jobs/{id}/ack"),
            (Method::GET, "/v1/jobs/j-1", "GET /v1/jobs/{id}"),
            (
                Method::POST,
                "/v1/dlq/j-1/redrive",
                "POST /v1/dlq/{id}/redrive",
            ),
            (Method::PUT, "/v1/cache/m:abc", "PUT /v1/cache/{key}"),
            (
                Method::POST,
                "/v1/locks/m:abc/renew",
                "POST /v1/locks/{key}/renew",
            ),
            (Method::GET, "/v1/locks", "GET /v1/locks"),
            (
                Method::DELETE,
                "/v1/quarantine/w1",
                "DELETE /v1/quarantine/{sub}",
            ),
            (Method::GET, "/metrics", "GET /metrics"),
        ] {
            assert_eq!(route_name(&m, path), name);
        }
    }
}

/// The whole HTTP surface over `state`.
pub fn router(state: AppState) -> Router {
    use Role::{Admin, Producer, Worker};
    let producer = guarded(
        &state,
        &[Producer],
        false,
        Router::new().route("/v1/jobs", post(jobs::enqueue)),
    );
    let readers = guarded(
        &state,
        &[Producer, Worker],
        false,
        Router::new()
            .route("/v1/jobs/{id}", get(jobs::status))
            .route("/v1/jobs/status", post(jobs::status_many)),
    );
    // Quarantined identities are refused (the inner layer runs after the auth gate).
    let worker = guarded(
        &state,
        &[Worker],
        false,
        Router::new()
            .route("/v1/jobs/claim", post(jobs::claim))
            .route("/v1/jobs/ack", post(jobs::ack_batch))
            .route("/v1/jobs/heartbeat", post(jobs::heartbeat_batch))
            .route("/v1/jobs/nack", post(jobs::nack_batch))
            .route("/v1/jobs/release", post(jobs::release_batch))
            .route("/v1/jobs/{id}/heartbeat", post(jobs::heartbeat))
            .route("/v1/jobs/{id}/ack", post(jobs::ack))
            .route("/v1/jobs/{id}/nack", post(jobs::nack))
            .route("/v1/jobs/{id}/release", post(jobs::release))
            .route(
                "/v1/cache/{key}",
                get(cache::get).put(cache::put).delete(cache::delete),
            )
            .route(
                "/v1/locks/{key}",
                post(locks::acquire).delete(locks::release),
            )
            .route("/v1/locks/{key}/renew", post(locks::renew))
            .route("/v1/embed", post(embed::embed))
            .route("/v1/metrics", post(metrics::push))
            .route_layer(from_fn_with_state(state.clone(), quarantine::gate)),
    );
    let events = guarded(
        &state,
        &[Worker, Producer],
        true,
        Router::new().route("/v1/events", get(events::events)),
    );
    let admin = guarded(
        &state,
        &[Admin],
        false,
        Router::new()
            .route("/v1/dlq", get(dlq::list))
            .route("/v1/dlq/{id}/redrive", post(dlq::redrive))
            .route("/v1/locks", get(locks::list))
            .route("/v1/locks/{key}/break", post(locks::break_lock))
            .route("/v1/stats", get(metrics::stats))
            .route("/v1/dashboard", get(dashboard::data))
            .route("/v1/search", post(dashboard::search))
            .route("/v1/quarantine", get(quarantine::list))
            .route(
                "/v1/quarantine/{sub}",
                axum::routing::delete(quarantine::lift),
            )
            .route("/metrics", get(metrics::prometheus)),
    );
    let public = Router::new()
        .route(
            "/openapi.json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }),
        )
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/v1/model", get(model::get))
        .route("/dashboard", get(dashboard::page))
        .route("/dashboard/", get(dashboard::slash))
        .route("/dashboard/{file}", get(dashboard::asset));
    let cfg = state.config.clone();
    Router::new()
        .merge(producer)
        .merge(readers)
        .merge(worker)
        .merge(events)
        .merge(admin)
        .merge(public)
        .fallback(|| async { Error::NotFound("no such route".to_owned()).into_response() })
        .method_not_allowed_fallback(|| async { Error::MethodNotAllowed.into_response() })
        // Inside the trace span and CORS: the 503 is logged with its request and reaches a
        // browser with the CORS headers every other answer has.
        .layer(CatchPanicLayer::custom(panicked))
        .layer(DefaultBodyLimit::max(cfg.max_body_bytes))
        .layer(TraceLayer::new_for_http().make_span_with(request_span))
        .layer(SetResponseHeaderLayer::overriding(
            HeaderName::from_static("cross-origin-resource-policy"),
            HeaderValue::from_static("cross-origin"),
        ))
        .layer(cors(&cfg))
        .with_state(state)
}

/// A handler that panicked (a bug) answers 503 `unavailable` with `Retry-After`, in the
/// protocol's error body, instead of a closed connection: the server never answers 500 (clients
/// retry a 503 with backoff), and the panic is logged within the request's span.
fn panicked(panic: Box<dyn std::any::Any + Send + 'static>) -> axum::response::Response {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    tracing::error!(panic = %what, "a handler panicked");
    Error::Unavailable("the server failed to answer this request; retry".to_owned()).into_response()
}

#[cfg(test)]
mod tests {
    use super::is_localhost;

    #[tokio::test]
    async fn a_panicking_handler_answers_503_in_the_error_body() {
        use tower::ServiceExt as _;
        let app: axum::Router = axum::Router::new()
            .route(
                "/boom",
                axum::routing::get(|| async {
                    panic!("a bug");
                    #[allow(unreachable_code)]
                    ""
                }),
            )
            .layer(tower_http::catch_panic::CatchPanicLayer::custom(
                super::panicked,
            ));
        let req = axum::http::Request::get("/boom")
            .body(axum::body::Body::empty())
            .unwrap();
        let resp = app.oneshot(req).await.unwrap();
        assert_eq!(resp.status(), 503);
        assert_eq!(resp.headers()["retry-after"], "1");
        let body = axum::body::to_bytes(resp.into_body(), 4096).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["code"], "unavailable", "{v}");
    }

    #[test]
    fn localhost_origins() {
        assert!(is_localhost("http://localhost:8080"));
        assert!(is_localhost("http://127.0.0.1:1"));
        assert!(is_localhost("http://localhost"));
        assert!(!is_localhost("http://localhost.evil.com"));
        assert!(!is_localhost("http://localhost:80x"));
        assert!(!is_localhost("https://example.com"));
    }
}
