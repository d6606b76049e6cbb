//! `GET /metrics` (Prometheus text), `GET /v1/stats` (JSON for the dashboard) and
//! `POST /v1/metrics` (worker snapshots).
//!
//! What an admin sees is its tenant's: a signed tenant admin gets its tenant's queue, workers,
//! counters and quotas, labelled `tenant="…"`, and nothing of another tenant or of the server;
//! the operator (a static admin token, tenant `default`) gets the server's counters, its own
//! tenant's queue and workers, and every open tenant's usage and quotas.

use std::fmt::Write as _;

use axum::extract::Extension;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use ternflow_core::protocol::{QueueDepth, Stats, WorkerMetrics};

use crate::error::{Error, Result};
use crate::extract::Json;
use crate::identity::{Identity, DEFAULT_TENANT};
use crate::quota::Quotas;
use crate::tenants::{Ctx, TenantUsage};
use crate::workers::{label, Bounds, Refused};
use ternflow_core::ErrorCode;

const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The quotas that apply to `tenant` (the operator's own tenant: the server defaults, for its
/// worker table only).
fn quotas(state: &Ctx) -> Quotas {
    if &*state.tenant == DEFAULT_TENANT {
        Quotas::default()
    } else {
        state.config.quotas_of(&state.tenant)
    }
}

/// One tenant's row in `/metrics`: its name, usage, quotas (none for `default`, the operator's
/// tenant, which has none) and (for its own admin) its queue.
struct TenantLines<'a> {
    name: &'a str,
    usage: &'a TenantUsage,
    quotas: Option<Quotas>,
    depth: Option<QueueDepth>,
}

/// The tenant families, each with its HELP and TYPE once and one sample a tenant (the text
/// format wants a family's samples together).
fn render_tenants(out: &mut String, rows: &[TenantLines<'_>]) {
    let family = |out: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    if rows.iter().any(|r| r.depth.is_some()) {
        family(
            out,
            "ternflow_tenant_queue",
            "gauge",
            "The tenant's jobs by state.",
        );
        for r in rows {
            let Some(d) = r.depth else { continue };
            let t = label(r.name);
            for (state, v) in [
                ("ready", d.ready),
                ("delayed", d.delayed),
                ("leased", d.leased),
                ("dead", d.dead),
            ] {
                let _ = writeln!(
                    out,
                    "ternflow_tenant_queue{{tenant=\"{t}\",state=\"{state}\"}} {v}"
                );
            }
        }
    }
    let Some(first) = rows.first() else { return };
    for (i, (name, help, _)) in first.usage.counters.list().into_iter().enumerate() {
        let metric = format!("ternflow_tenant_{name}_total");
        family(out, &metric, "counter", help);
        for r in rows {
            let v = r.usage.counters.list()[i].2;
            let _ = writeln!(out, "{metric}{{tenant=\"{}\"}} {v}", label(r.name));
        }
    }
    family(
        out,
        "ternflow_tenant_workers",
        "gauge",
        "Rows in the tenant's worker table.",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "ternflow_tenant_workers{{tenant=\"{}\"}} {}",
            label(r.name),
            r.usage.workers.len()
        );
    }
    family(
        out,
        "ternflow_tenant_cache_bytes",
        "gauge",
        "Bytes of the tenant's live cache entries (last sample plus writes since).",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "ternflow_tenant_cache_bytes{{tenant=\"{}\"}} {}",
            label(r.name),
            r.usage.cache_bytes_estimate().unwrap_or(0)
        );
    }
    if rows.iter().all(|r| r.quotas.is_none()) {
        return;
    }
    family(
        out,
        "ternflow_tenant_quota",
        "gauge",
        "The tenant's quotas (docs/security.md).",
    );
    for r in rows {
        let Some(q) = &r.quotas else { continue };
        let t = label(r.name);
        for (quota, v) in quota_list(q) {
            let _ = writeln!(
                out,
                "ternflow_tenant_quota{{tenant=\"{t}\",quota=\"{quota}\"}} {v}"
            );
        }
    }
}

/// A tenant's quotas by name.
pub(crate) fn quota_list(q: &Quotas) -> [(&'static str, u64); 4] {
    [
        ("max_queue", q.max_queue),
        ("max_workers", q.max_workers as u64),
        ("embed_tokens_per_min", u64::from(q.embed_tokens_per_min)),
        ("max_cache_bytes", q.max_cache_bytes),
    ]
}

/// The longest `/metrics` waits for the store's queue depth. A scrape must answer while the
/// store is down or slow (Prometheus' scrape timeout is 10 s by default, and as short as the
/// interval when that is shorter): past this the page goes out without the queue's gauges,
/// with the store's failures in `ternflow_store_op_errors_total`, so the store alerts can fire
/// instead of the server looking down.
const DEPTH_DEADLINE: std::time::Duration = std::time::Duration::from_millis(500);

/// The queue's depth, or `None` when the store fails or takes longer than [`DEPTH_DEADLINE`]
/// (a timeout is counted as a failed `depth`: the timed store never saw it end).
async fn depth_in_time(state: &Ctx, now: u64) -> Option<QueueDepth> {
    match tokio::time::timeout(DEPTH_DEADLINE, state.store.depth(now)).await {
        Ok(Ok(depth)) => Some(depth),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "/metrics: the queue's depth is left out");
            None
        }
        Err(_) => {
            state
                .metrics
                .families
                .store_op("depth", DEPTH_DEADLINE.as_secs_f64(), false);
            tracing::warn!(
                deadline_ms = DEPTH_DEADLINE.as_millis() as u64,
                "/metrics: the store did not give the queue's depth in time; it is left out"
            );
            None
        }
    }
}

pub(crate) async fn prometheus(
    state: Ctx,
    Extension(caller): Extension<Identity>,
) -> Result<impl IntoResponse> {
    let now = state.now();
    let depth = depth_in_time(&state, now).await;
    let mut text = String::with_capacity(4_096);
    if caller.is_operator() {
        text = state.metrics.render(depth, state.locks_held(), now);
        let (open, opened, closed) = state.tenants.counts().await;
        let _ = writeln!(
            text,
            "# HELP ternflow_tenants_open Tenants with an open store (besides default).\n\
             # TYPE ternflow_tenants_open gauge\nternflow_tenants_open {open}\n\
             # HELP ternflow_tenants_opened_total Tenant stores opened since start.\n\
             # TYPE ternflow_tenants_opened_total counter\nternflow_tenants_opened_total {opened}\n\
             # HELP ternflow_tenants_closed_total Tenant stores closed (idle or least recently used).\n\
             # TYPE ternflow_tenants_closed_total counter\nternflow_tenants_closed_total {closed}"
        );
        let all = state.tenants.all().await;
        let rows: Vec<TenantLines<'_>> = all
            .iter()
            .map(|(name, t)| TenantLines {
                name,
                usage: &t.usage,
                quotas: (&**name != DEFAULT_TENANT).then(|| state.config.quotas_of(name)),
                depth: None,
            })
            .collect();
        render_tenants(&mut text, &rows);
    } else {
        render_tenants(
            &mut text,
            &[TenantLines {
                name: &state.tenant,
                usage: &state.usage,
                quotas: (&*state.tenant != DEFAULT_TENANT).then(|| quotas(&state)),
                depth,
            }],
        );
    }
    state.usage.workers.render(&state.tenant, now, &mut text);
    Ok(([(header::CONTENT_TYPE, TEXT)], text))
}

pub(crate) async fn stats(
    state: Ctx,
    Extension(caller): Extension<Identity>,
) -> Result<Json<Stats>> {
    let now = state.now();
    let queue = state.store.depth(now).await?;
    let workers = state.usage.workers.snapshots(now);
    if caller.is_operator() {
        let mut counters = state.counter_map();
        let (open, opened, closed) = state.tenants.counts().await;
        counters.insert("tenants_open".to_owned(), open as u64);
        counters.insert("tenants_opened".to_owned(), opened);
        counters.insert("tenants_closed".to_owned(), closed);
        return Ok(Json(Stats {
            queue,
            counters,
            ack_rate: state.metrics.ack_rate(now),
            workers,
        }));
    }
    // A tenant's admin: its own counters over the tenant's life, every server's together
    // (the store's totals), nothing of the server's (they add up every tenant).
    Ok(Json(Stats {
        queue,
        counters: state.usage.totals(state.store.as_ref()).await?,
        ack_rate: 0.0,
        workers,
    }))
}

pub(crate) async fn push(
    state: Ctx,
    Extension(caller): Extension<Identity>,
    headers: axum::http::HeaderMap,
    Json(snap): Json<WorkerMetrics>,
) -> Result<StatusCode> {
    let ua = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let max = quotas(&state).max_workers;
    let bounds = if &*state.tenant == DEFAULT_TENANT {
        Bounds::fleet(max)
    } else {
        Bounds::visitors(max)
    };
    match state
        .usage
        .workers
        .push(snap, ua, &caller.sub, state.now(), bounds)
    {
        Ok(()) => Ok(StatusCode::NO_CONTENT),
        Err(Refused::BadName) => Err(Error::bad_request(
            ErrorCode::BadWorker,
            "worker must be 1–128 characters of [A-Za-z0-9._:@-]",
        )),
        Err(Refused::Full(n)) => {
            state.usage.add(|c| &c.quota_refused, 1);
            Err(Error::QuotaExceeded {
                message: format!(
                    "this tenant already has {n} workers reporting (its max_workers quota)"
                ),
                retry_after_s: 60,
            })
        }
    }
}
