//! `POST /v1/locks/{key}`, `POST /v1/locks/{key}/renew`, `DELETE /v1/locks/{key}`. What one
//! token holds at once, and how long it holds one key, are capped per server
//! (`crate::lock_holds`).

use axum::http::StatusCode;
use axum::Extension;
use ternflow_core::protocol::{LockGrant, LockRequest, LockToken};

use crate::error::{Error, Result};
use crate::extract::{Json, OptionalJson, Path};
use crate::identity::Identity;
use crate::queue::valid_id;
use crate::store::LockOutcome;
use crate::tenants::Ctx;
use ternflow_core::ErrorCode;

/// The body is optional: empty means the default TTL.
pub(crate) async fn acquire(
    state: Ctx,
    caller: Option<Extension<Identity>>,
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
            if let Some(Extension(c)) = &caller {
                state
                    .lock_holds
                    .granted(c, &key, &g.token, g.expires_at, now);
            }
            state.track_lock(&format!("{}/{key}", state.tenant), &g.token, g.expires_at);
            Ok(Json(g))
        }
        LockOutcome::Held { expires_at } => {
            state.metrics.add(|c| &c.lock_contended, 1);
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
            state.track_lock(&format!("{}/{key}", state.tenant), &g.token, g.expires_at);
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
        state.forget_lock(&format!("{}/{key}", state.tenant), &req.token);
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(Error::conflict(
            ErrorCode::LockLost,
            "this token does not hold the lock (expired or taken over)",
        ))
    }
}
