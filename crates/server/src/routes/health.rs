//! `GET /healthz` (the process answers) and `GET /readyz` (it can do its work now: the store
//! takes a write, the model is loaded, shutdown has not begun). Public, for load balancers and
//! orchestrators; they say nothing of any tenant.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::extract::Json;
use crate::state::AppState;

/// How long the store's probe write may take before the server reads as not ready.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// `GET /healthz`: 200 while the process serves requests at all.
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

/// `GET /readyz` body.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Readiness {
    ready: bool,
    /// `ok`, or why the probe write failed.
    store: String,
    /// `loaded`, or `none` when the server runs without a model (then it is ready, and
    /// `POST /v1/embed` answers 503).
    model: &'static str,
    draining: bool,
}

/// `GET /readyz`: 200 when ready, 503 with the failing check otherwise.
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    let draining = state.is_shutting_down();
    // The server's own store (the default tenant's); every other tenant's lives beside it.
    let store = state.tenants.default_tenant().store.clone();
    let store = match tokio::time::timeout(PROBE_TIMEOUT, store.probe_write(state.now())).await {
        Ok(Ok(())) => "ok".to_owned(),
        Ok(Err(e)) => format!("the store refused a write: {e}"),
        Err(_) => format!("the store took over {} s to write", PROBE_TIMEOUT.as_secs()),
    };
    let ready = !draining && store == "ok";
    let body = Readiness {
        ready,
        store,
        model: if state.embed.is_some() {
            "loaded"
        } else {
            "none"
        },
        draining,
    };
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}
