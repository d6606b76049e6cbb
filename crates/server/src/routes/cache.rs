//! `GET/PUT/DELETE /v1/cache/{key}`: the remote cache. A `PUT` must carry the fence of a live
//! lock on the key (the server issued it); the rules are in [`crate::cache`].

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ternflow_core::protocol::{CacheEntry, CachePut};

use crate::cache::{check_write, invalidate, store_entry};
use crate::error::{Error, Result};
use crate::extract::{Json, Path};
use crate::queue::valid_id;
use crate::store::{Fenced, PutOutcome};
use crate::tenants::Ctx;

pub(crate) async fn get(Ctx(state): Ctx, Path(key): Path<String>) -> Result<Json<CacheEntry>> {
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

pub(crate) async fn put(
    Ctx(state): Ctx,
    Path(key): Path<String>,
    Json(req): Json<CachePut>,
) -> Result<Response> {
    check_write(&key, &req.model_id, &req.vector)?;
    let fence = req.fence;
    let put = store_entry(
        &state,
        &key,
        req.model_id,
        req.vector,
        fence,
        Fenced::ByLock,
        req.ttl_ms,
    );
    match put.await? {
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
            entry: Some(Box::new(stored)),
            expires_at: None,
            retry_after_s: None,
        }),
        (_, PutOutcome::Unfenced) => {
            // The entry that is stored, if any, is the one every worker should agree on.
            let stored = state
                .store
                .cache_get(&key, state.now())
                .await
                .ok()
                .flatten();
            Err(Error::Conflict {
                code: "bad_fence",
                message: "no live lock on this key carries that fence: take the lock \
                          (POST /v1/locks/{key}) and write with its fence"
                    .to_owned(),
                entry: stored.map(Box::new),
                expires_at: None,
                retry_after_s: None,
            })
        }
    }
}

pub(crate) async fn delete(Ctx(state): Ctx, Path(key): Path<String>) -> Result<StatusCode> {
    valid_id(&key)?;
    if state.store.cache_delete(&key).await? {
        invalidate(&state, key).await;
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(Error::NotFound(format!("no cache entry {key}")))
    }
}
