//! The dashboard: its page (`GET /dashboard`, public static files built into the binary), its
//! data (`GET /v1/dashboard`, admin) and its semantic search (`POST /v1/search`, admin). The
//! page asks for the admin token once and keeps it in the URL fragment, which browsers never
//! send, so it appears in no request line and no log.

use std::collections::BTreeMap;
use std::time::Instant;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use ternflow_core::protocol::QueueDepth;

use crate::error::{Error, Result};
use crate::extract::{Json, Path, Query};
use crate::identity::DEFAULT_TENANT;
use crate::metrics::WorkerRow;
use crate::search::{top_k, Hit};
use crate::series::{Alert, Sample};
use crate::tenants::Ctx;
use ternflow_core::ErrorCode;

/// The page's files: name → (content type, bytes).
const FILES: &[(&str, &str, &[u8])] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("../../../../www/dashboard/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../../www/dashboard/app.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_bytes!("../../../../www/dashboard/style.css"),
    ),
    (
        "uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../../www/dashboard/vendor/uPlot.iife.min.js"),
    ),
    (
        "uPlot.min.css",
        "text/css; charset=utf-8",
        include_bytes!("../../../../www/dashboard/vendor/uPlot.min.css"),
    ),
];

fn file(name: &str) -> Response {
    match FILES.iter().find(|(n, _, _)| *n == name) {
        Some((_, ty, bytes)) => (
            [
                (header::CONTENT_TYPE, *ty),
                (header::CACHE_CONTROL, "no-cache"),
                (
                    header::CONTENT_SECURITY_POLICY,
                    "default-src 'self'; connect-src 'self'; img-src 'self' data:; \
                     style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
                ),
                (header::REFERRER_POLICY, "no-referrer"),
            ],
            *bytes,
        )
            .into_response(),
        None => Error::NotFound(format!("no dashboard file {name}")).into_response(),
    }
}

/// `GET /dashboard`: the page.
pub(crate) async fn page() -> Response {
    file("index.html")
}

/// `GET /dashboard/{file}`: its script, styles and the vendored uPlot.
pub(crate) async fn asset(Path(name): Path<String>) -> Response {
    file(&name)
}

#[derive(Debug, Deserialize)]
pub(crate) struct SinceQuery {
    /// Only samples taken after this time (Unix ms); 0 or absent: the whole history.
    since: Option<u64>,
}

/// `GET /v1/dashboard` body.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Dashboard {
    /// The server's clock (Unix ms).
    now: u64,
    /// The model the server embeds with (`""` without one).
    model_id: String,
    /// How often a sample is taken (ms).
    sample_ms: u64,
    /// Queue depth now.
    queue: QueueDepth,
    /// Server counters since start.
    counters: BTreeMap<String, u64>,
    /// Acks per second over the last minute.
    ack_rate: f64,
    /// The worker table.
    workers: Vec<WorkerRow>,
    /// Every open signed tenant: its usage and quotas (the operator sees them all).
    tenants: Vec<TenantRow>,
    /// The history (after `since`).
    samples: Vec<Sample>,
    /// Alerts kept, oldest first.
    alerts: Vec<Alert>,
}

/// One open tenant in the dashboard.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct TenantRow {
    name: String,
    workers: usize,
    cache_bytes: u64,
    counters: BTreeMap<String, u64>,
    quotas: crate::quota::Quotas,
}

/// `GET /v1/dashboard?since=T`: everything the page draws, in one request.
pub(crate) async fn data(state: Ctx, Query(q): Query<SinceQuery>) -> Result<Json<Dashboard>> {
    // The history and the worker table are the server's; only the default tenant's admin sees
    // them (another tenant's admin would learn the default tenant's queue).
    if &*state.tenant != DEFAULT_TENANT {
        return Err(Error::Forbidden(
            "this route needs the default tenant's admin role".to_owned(),
        ));
    }
    let now = state.now();
    let queue = state.store.depth(now).await?;
    let mut counters = state.counter_map();
    let sources = state.metrics.acked_by_source();
    for (name, v) in ["engine", "backend", "local", "remote"].iter().zip(sources) {
        counters.insert(format!("acked_{name}"), v);
    }
    // Each row's identity marked when it is quarantined (the default tenant's identities).
    let quarantined: std::collections::HashSet<String> = state
        .store
        .quarantined(1_000)
        .await?
        .into_iter()
        .map(|(sub, _)| sub)
        .collect();
    let mut workers = state.usage.workers.rows(now);
    for w in &mut workers {
        w.quarantined = quarantined.contains(&w.sub);
    }
    let tenants = state
        .tenants
        .all()
        .await
        .into_iter()
        .filter(|(name, _)| &**name != DEFAULT_TENANT)
        .map(|(name, t)| TenantRow {
            quotas: state.config.quotas_of(&name),
            name: name.to_string(),
            workers: t.usage.workers.len(),
            cache_bytes: t.usage.cache_bytes_estimate().unwrap_or(0),
            counters: t.usage.counter_map(),
        })
        .collect();
    Ok(Json(Dashboard {
        now,
        model_id: state.default_model_id.to_string(),
        sample_ms: state.config.stats_sample_ms,
        queue,
        counters,
        ack_rate: state.metrics.ack_rate(now),
        workers,
        tenants,
        samples: state.series.since(q.since.unwrap_or(0)),
        alerts: state.series.alerts(),
    }))
}

/// Most hits one search returns.
const MAX_K: usize = 100;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchRequest {
    query: String,
    k: Option<usize>,
}

#[derive(Debug, Serialize)]
pub(crate) struct SearchResponse {
    model_id: String,
    hits: Vec<Hit>,
    scored: usize,
    skipped: usize,
    truncated: bool,
    took_ms: f64,
}

/// `POST /v1/search {"query", "k"?}`: the `k` (10, ≤ 100) finished jobs closest to the query.
pub(crate) async fn search(
    state: Ctx,
    Json(req): Json<SearchRequest>,
) -> Result<Json<SearchResponse>> {
    let Some(batcher) = state.embed.clone() else {
        return Err(Error::Unavailable(
            "search needs a model on this server (start it with --model FILE)".to_owned(),
        ));
    };
    let k = req.k.unwrap_or(10);
    if k == 0 || k > MAX_K {
        return Err(Error::bad_request(
            ErrorCode::BadK,
            format!("k must be within 1..={MAX_K}"),
        ));
    }
    if req.query.trim().is_empty() {
        return Err(Error::bad_request(
            ErrorCode::EmptyQuery,
            "the query is empty",
        ));
    }
    if req.query.len() > state.config.max_text_bytes {
        return Err(Error::too_large(
            ErrorCode::TextTooLong,
            format!("texts are limited to {} bytes", state.config.max_text_bytes),
        ));
    }
    let started = Instant::now();
    let query = batcher
        .embed(vec![req.query])
        .await?
        .pop()
        .ok_or_else(|| Error::Unavailable("the engine returned no vector".to_owned()))?;
    let model_id = batcher.model_id().to_owned();
    let found = top_k(state.store.as_ref(), &model_id, &query, k).await?;
    Ok(Json(SearchResponse {
        model_id,
        hits: found.hits,
        scored: found.scored,
        skipped: found.skipped,
        truncated: found.truncated,
        took_ms: started.elapsed().as_secs_f64() * 1_000.0,
    }))
}

/// `GET /dashboard/` redirects to the page without the slash (its files are relative to it).
pub(crate) async fn slash() -> Response {
    (
        StatusCode::PERMANENT_REDIRECT,
        [(header::LOCATION, "/dashboard")],
    )
        .into_response()
}
