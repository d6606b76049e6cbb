//! `GET /metrics` (Prometheus text), `GET /v1/stats` (JSON for the dashboard) and
//! `POST /v1/metrics` (worker snapshots).

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use ternflow_core::protocol::{Stats, WorkerMetrics};

use crate::error::{Error, Result};
use crate::extract::Json;
use crate::tenants::Ctx;

pub(crate) async fn prometheus(Ctx(state): Ctx) -> Result<impl IntoResponse> {
    let now = state.now();
    let depth = state.store.depth(now).await?;
    let text = state.metrics.render(depth, state.locks_held(), now);
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    ))
}

pub(crate) async fn stats(Ctx(state): Ctx) -> Result<Json<Stats>> {
    let now = state.now();
    let queue = state.store.depth(now).await?;
    let counters = state.counter_map();
    Ok(Json(Stats {
        queue,
        counters,
        ack_rate: state.metrics.ack_rate(now),
        workers: state.metrics.workers(now),
    }))
}

pub(crate) async fn push(
    Ctx(state): Ctx,
    axum::Extension(caller): axum::Extension<crate::limits::Caller>,
    headers: axum::http::HeaderMap,
    Json(snap): Json<WorkerMetrics>,
) -> Result<StatusCode> {
    if snap.worker.is_empty() {
        return Err(Error::bad_request("bad_worker", "worker is required"));
    }
    if snap.worker.len() > 128 {
        return Err(Error::bad_request("bad_worker", "worker is 1–128 bytes"));
    }
    // Worker names are the tenant's own: two tenants' "w1" are two workers.
    let mut snap = snap;
    if &*state.tenant != crate::tenants::DEFAULT_TENANT {
        snap.worker = format!("{}/{}", state.tenant, snap.worker);
    }
    let ua = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    state
        .metrics
        .push_worker_from(snap, ua, &caller.sub, state.now());
    Ok(StatusCode::NO_CONTENT)
}
