//! `GET/PUT/DELETE /v1/cache/{key}`: the remote cache, with fences and TTL jitter.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ternflow_core::protocol::{CacheEntry, CachePut, InvalidateEvent, ServerEvent, Vector};

use super::jobs::valid_id;
use crate::error::{Error, Result};
use crate::json::Json;
use crate::state::AppState;
use crate::store::PutOutcome;

async fn invalidate(state: &AppState, key: String) {
    let ev = ServerEvent::Invalidate(InvalidateEvent { keys: vec![key] });
    if let Err(e) = state.store.publish(ev).await {
        tracing::warn!(error = %e, "publish invalidate event");
    }
}

pub(crate) async fn get(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> Result<Json<CacheEntry>> {
    valid_id(&key)?;
    match state.store.cache_get(&key, state.now()).await? {
        Some(e) => {
            state.metrics.add(|c| &c.cache_hits, 1);
            Ok(Json(e))
        }
        None => {
            state.metrics.add(|c| &c.cache_misses, 1);
            Err(Error::NotFound(format!("no cache entry {key}")))
        }
    }
}

/// Checks a cache write's key and model before anything is stored.
pub(crate) fn check_write(key: &str, model_id: &str, vector: &Vector) -> Result<()> {
    valid_id(key)?;
    if vector.0.is_empty() {
        return Err(Error::bad_request("bad_vector", "the vector is empty"));
    }
    if let Some((model, _)) = key.split_once(':') {
        if model != model_id {
            return Err(Error::bad_request(
                "model_mismatch",
                "the key's model id prefix differs from the entry's model_id",
            ));
        }
    }
    Ok(())
}

/// Stores an entry (fenced, TTL with jitter), counting it and announcing a replaced live entry.
/// Shared by `PUT /v1/cache/{key}` and the write-through an ack can carry.
pub(crate) async fn store_entry(
    state: &AppState,
    key: &str,
    model_id: String,
    vector: Vector,
    fence: u64,
    ttl_ms: Option<u64>,
) -> Result<(CacheEntry, PutOutcome)> {
    let now = state.now();
    let entry = CacheEntry {
        model_id,
        vector,
        fence,
        expires_at: now + state.config.cache_ttl(ttl_ms),
    };
    let outcome = state.store.cache_put(key, entry.clone(), now).await?;
    match &outcome {
        PutOutcome::Stored { replaced } => {
            state.metrics.add(|c| &c.cache_puts, 1);
            if *replaced {
                invalidate(state, key.to_owned()).await;
            }
        }
        PutOutcome::Stale(_) => state.metrics.add(|c| &c.cache_stale_puts, 1),
    }
    Ok((entry, outcome))
}

pub(crate) async fn put(
    State(state): State<AppState>,
    Path(key): Path<String>,
    Json(req): Json<CachePut>,
) -> Result<Response> {
    check_write(&key, &req.model_id, &req.vector)?;
    let fence = req.fence;
    match store_entry(&state, &key, req.model_id, req.vector, fence, req.ttl_ms).await? {
        (entry, PutOutcome::Stored { replaced }) => {
            let status = if replaced {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            Ok((status, Json(entry)).into_response())
        }
        (_, PutOutcome::Stale(stored)) => Err(Error::Conflict {
            code: "stale_fence",
            message: format!(
                "a newer entry (fence {} > {}) is stored",
                stored.fence, fence
            ),
            body: serde_json::to_value(serde_json::json!({ "entry": stored })).ok(),
            retry_after_s: None,
        }),
    }
}

pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> Result<StatusCode> {
    valid_id(&key)?;
    if state.store.cache_delete(&key).await? {
        invalidate(&state, key).await;
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(Error::NotFound(format!("no cache entry {key}")))
    }
}
