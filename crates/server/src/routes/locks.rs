//! `POST /v1/locks/{key}`, `POST /v1/locks/{key}/renew`, `DELETE /v1/locks/{key}`. What one
//! token holds at once, and how long it holds one key, are capped per server
//! (`crate::lock_holds`). For the tenant's admin: `GET /v1/locks` (the live locks this server
//! granted, oldest first) and `POST /v1/locks/{key}/break` (releases one for its holder: the
//! recovery for a lock whose holder is gone, before its TTL would free it; the holder's fence
//! is then refused by the cache like any stale writer's).

use axum::http::{HeaderMap, StatusCode};
use axum::Extension;
use serde::{Deserialize, Serialize};
use ternflow_core::protocol::{LockGrant, LockRequest, LockToken};

use crate::error::{Error, Result};
use crate::extract::{Json, OptionalJson, Path, Query};
use crate::identity::Identity;
use crate::queue::valid_id;
use crate::store::LockOutcome;
use crate::tenants::Ctx;
use ternflow_core::ErrorCode;

/// A key's name where this server tracks locks of every tenant (the locks it granted, the
/// contention episodes of `crate::metrics::Contention`): tenants' keys apart.
fn tenant_key(state: &Ctx, key: &str) -> String {
    format!("{}/{key}", state.tenant)
}

/// The body is optional: empty means the default TTL.
pub(crate) async fn acquire(
    state: Ctx,
    caller: Option<Extension<Identity>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    OptionalJson(req): OptionalJson<LockRequest>,
) -> Result<Json<LockGrant>> {
    valid_id(&key)?;
    let mut ttl = state.config.lock_ttl(req.ttl_ms);
    let now = state.now();
    if let Some(Extension(c)) = &caller {
        ttl = state.lock_holds.admit(c, &key, ttl, now)?;
    }
    match state.store.lock_acquire(&key, ttl, now).await? {
        LockOutcome::Granted(g) => {
            state.metrics.add(|c| &c.lock_acquired, 1);
            state
                .metrics
                .families
                .lock_freed(&tenant_key(&state, &key), now);
            if let Some(Extension(c)) = &caller {
                state
                    .lock_holds
                    .granted(c, &key, &g.token, g.expires_at, now);
            }
            let sub = caller.as_ref().map(|Extension(c)| &*c.sub);
            state.track_lock(&tenant_key(&state, &key), &g.token, sub, g.expires_at);
            Ok(Json(g))
        }
        LockOutcome::Held { expires_at } => {
            state.metrics.add(|c| &c.lock_contended, 1);
            let waiter = headers.get("traceparent").and_then(|v| v.to_str().ok());
            state
                .metrics
                .families
                .lock_refused(&tenant_key(&state, &key), waiter, expires_at, now);
            Err(Error::Conflict {
                code: ErrorCode::LockHeld,
                message: "the lock is held by another worker".to_owned(),
                entry: None,
                expires_at: Some(expires_at),
                retry_after_s: Some(expires_at.saturating_sub(now).div_ceil(1_000)),
            })
        }
    }
}

pub(crate) async fn renew(
    state: Ctx,
    caller: Option<Extension<Identity>>,
    Path(key): Path<String>,
    Json(req): Json<LockToken>,
) -> Result<Json<LockGrant>> {
    valid_id(&key)?;
    let mut ttl = state.config.lock_ttl(req.ttl_ms);
    let now = state.now();
    if let Some(Extension(c)) = &caller {
        ttl = state.lock_holds.renewal(c, &key, ttl, now).ok_or_else(|| {
            Error::conflict(
                ErrorCode::LockLost,
                format!(
                    "this token has held the lock for {} s, the longest one token may; it runs \
                     out at its expiry",
                    state.config.max_lock_hold_ms / 1_000
                ),
            )
        })?;
    }
    match state.store.lock_renew(&key, &req.token, ttl, now).await? {
        Some(g) => {
            if let Some(Extension(c)) = &caller {
                state
                    .lock_holds
                    .granted(c, &key, &g.token, g.expires_at, now);
            }
            let sub = caller.as_ref().map(|Extension(c)| &*c.sub);
            state.track_lock(&tenant_key(&state, &key), &g.token, sub, g.expires_at);
            Ok(Json(g))
        }
        None => Err(Error::conflict(
            ErrorCode::LockLost,
            "this token does not hold the lock (expired or taken over)",
        )),
    }
}

pub(crate) async fn release(
    state: Ctx,
    caller: Option<Extension<Identity>>,
    Path(key): Path<String>,
    Json(req): Json<LockToken>,
) -> Result<StatusCode> {
    valid_id(&key)?;
    if let Some(Extension(c)) = &caller {
        // Forgotten even when the store no longer has it (expired, taken over): not held.
        state.lock_holds.released(c, &key, &req.token, state.now());
    }
    if state.store.lock_release(&key, &req.token).await? {
        state.metrics.add(|c| &c.lock_released, 1);
        state
            .metrics
            .families
            .lock_freed(&tenant_key(&state, &key), state.now());
        state.forget_lock(&tenant_key(&state, &key), &req.token);
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(Error::conflict(
            ErrorCode::LockLost,
            "this token does not hold the lock (expired or taken over)",
        ))
    }
}

/// Most locks `GET /v1/locks` lists.
const MAX_LISTED: usize = 1_000;

/// `GET /v1/locks` query.
#[derive(Debug, Deserialize)]
pub(crate) struct ListQuery {
    /// Only locks held at least this long (ms) by their current holder.
    #[serde(default)]
    held_ms: u64,
    limit: Option<usize>,
}

/// One live lock this server granted.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct HeldLock {
    key: String,
    /// The holder's writer identity (absent: a server without tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    sub: Option<String>,
    /// When the holder got it (Unix ms; renewals keep it).
    granted_at: u64,
    /// When it runs out unless renewed (Unix ms).
    expires_at: u64,
    /// How long the holder has had it (ms).
    held_ms: u64,
}

/// `GET /v1/locks` response.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct LockList {
    locks: Vec<HeldLock>,
}

pub(crate) async fn list(state: Ctx, Query(q): Query<ListQuery>) -> Result<Json<LockList>> {
    let now = state.now();
    let prefix = tenant_key(&state, "");
    let limit = q.limit.unwrap_or(100).min(MAX_LISTED);
    let locks = state
        .locks
        .list(&prefix, now, usize::MAX)
        .into_iter()
        .filter(|(_, g)| now.saturating_sub(g.granted_at) >= q.held_ms)
        .take(limit)
        .map(|(k, g)| HeldLock {
            key: k[prefix.len()..].to_owned(),
            sub: g.sub,
            granted_at: g.granted_at,
            expires_at: g.expires_at,
            held_ms: now.saturating_sub(g.granted_at),
        })
        .collect();
    Ok(Json(LockList { locks }))
}

pub(crate) async fn break_lock(
    state: Ctx,
    caller: Option<Extension<Identity>>,
    Path(key): Path<String>,
) -> Result<StatusCode> {
    valid_id(&key)?;
    let tracked = tenant_key(&state, &key);
    let Some(held) = state.locks.holder(&tracked, state.now()) else {
        return Err(Error::NotFound(format!(
            "no live lock on {key} granted by this server (a lock granted by another server of \
             the fleet is broken there; any lock frees itself at its expiry)"
        )));
    };
    if !state.store.lock_release(&key, &held.token).await? {
        // Released, expired or taken over meanwhile: not held by that holder any more.
        state.forget_lock(&tracked, &held.token);
        return Err(Error::NotFound(format!(
            "the lock on {key} is no longer held"
        )));
    }
    state.forget_lock(&tracked, &held.token);
    state.metrics.add(|c| &c.locks_broken, 1);
    state.metrics.families.lock_freed(&tracked, state.now());
    tracing::warn!(target: "ternflow::audit", tenant = %state.tenant, by = caller.as_ref().map_or("-", |Extension(c)| &*c.sub),
        key = %key, holder = held.sub.as_deref().unwrap_or("-"),
        held_ms = state.now().saturating_sub(held.granted_at), "lock broken");
    Ok(StatusCode::NO_CONTENT)
}
