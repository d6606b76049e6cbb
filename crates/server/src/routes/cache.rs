//! `GET/PUT/DELETE /v1/cache/{key}`: the remote cache. A `PUT` must carry the fence of a live
//! lock on the key (the server issued it), and the text (the server checks it hashes to the
//! key, and recomputes the vector as `crate::integrity` says); the rules are in
//! [`crate::cache`].

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use ternflow_core::keys::cache_key;
use ternflow_core::protocol::{CacheEntry, CachePut};

use crate::auth::Role;
use crate::cache::{check_write, invalidate, store_entry};
use crate::error::{Error, Result};
use crate::extract::{Json, Path};
use crate::identity::Identity;
use crate::integrity::shape::check_vector;
use crate::integrity::verifier::{self, Item};
use crate::queue::valid_id;
use crate::store::{Fenced, PutOutcome, Written};
use crate::tenants::Ctx;
use ternflow_core::ErrorCode;

/// An entry as `caller` may see it: its writer only for admins.
fn shown_to(caller: &Identity, mut e: CacheEntry) -> CacheEntry {
    if caller.role != Role::Admin {
        e.by = None;
    }
    e
}

pub(crate) async fn get(
    state: Ctx,
    Extension(caller): Extension<Identity>,
    Path(key): Path<String>,
) -> Result<Json<CacheEntry>> {
    valid_id(&key)?;
    match state.store.cache_get(&key, state.now()).await? {
        Some(e) => {
            state.metrics.add(|c| &c.cache_hits, 1);
            Ok(Json(shown_to(&caller, e)))
        }
        None => {
            state.metrics.add(|c| &c.cache_misses, 1);
            Err(Error::NotFound(format!("no cache entry {key}")))
        }
    }
}

pub(crate) async fn put(
    state: Ctx,
    Extension(caller): Extension<Identity>,
    Path(key): Path<String>,
    Json(req): Json<CachePut>,
) -> Result<Response> {
    check_write(&key, &req.model_id, &req.vector)?;
    check_vector(verifier::model_dim(&state, &req.model_id), &req.vector.0).inspect_err(|_| {
        state.metrics.add(|c| &c.results_refused, 1);
    })?;
    let writer = crate::integrity::Writer::of(&caller, req.worker.as_deref());
    let checkable = verifier::can_verify(&state, &req.model_id);
    // The text must be the key's: then the server knows what the vector should be.
    let item = match &req.text {
        Some(t) if cache_key(&req.model_id, t) != key => {
            state.metrics.add(|c| &c.results_refused, 1);
            return Err(Error::bad_request(
                ErrorCode::BadResult,
                "the text does not hash to this key",
            ));
        }
        Some(t) => Some(Item {
            written: Written::Cache(key.clone()),
            text: t.clone(),
            vector: req.vector.0.clone(),
        }),
        None if checkable => {
            return Err(Error::bad_request(
                ErrorCode::TextRequired,
                "a cache write of a model this server verifies carries its text",
            ))
        }
        None => None,
    };
    let probation = verifier::on_probation(&state, &writer).await?;
    let mut verified = false;
    if let (true, true, Some(item)) = (probation, checkable, &item) {
        if let Some(d) = verifier::recompute(&state, std::slice::from_ref(item))
            .await?
            .remove(0)
        {
            verifier::condemn(&state, &writer.sub, format!("c:{key} (on probation): {d}")).await;
            return Err(Error::Quarantined(format!(
                "the vector did not match the server's own embedding ({d}); this worker \
                 identity is quarantined"
            )));
        }
        verifier::credit(&state, &writer, 1).await;
        verified = true;
    }
    let fence = req.fence;
    let put = store_entry(
        &state,
        &key,
        req.model_id,
        req.vector,
        fence,
        Fenced::ByLock,
        req.ttl_ms,
        writer.provenance(state.now(), verified),
    );
    match put.await? {
        (entry, PutOutcome::Stored { replaced }) => {
            if let Err(e) = state
                .store
                .note_written(&writer.sub, vec![Written::Cache(key.clone())])
                .await
            {
                tracing::warn!(error = %e, "recording provenance");
            }
            if let (false, true, Some(item)) = (probation, checkable, item) {
                if verifier::sampled(&state) {
                    verifier::check_later(&state, &writer, vec![item]);
                }
            }
            let status = if replaced {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            Ok((status, Json(shown_to(&caller, entry))).into_response())
        }
        (_, PutOutcome::Stale(stored)) => Err(Error::Conflict {
            code: ErrorCode::StaleFence,
            message: format!(
                "a newer entry (fence {} > {}) is stored",
                stored.fence, fence
            ),
            entry: Some(Box::new(shown_to(&caller, stored))),
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
                code: ErrorCode::BadFence,
                message: "no live lock on this key carries that fence: take the lock \
                          (POST /v1/locks/{key}) and write with its fence"
                    .to_owned(),
                entry: stored.map(|e| Box::new(shown_to(&caller, e))),
                expires_at: None,
                retry_after_s: None,
            })
        }
    }
}

/// `DELETE /v1/cache/{key}`: an operator's act (admin). A worker never needs it, and a
/// visitor's worker token could otherwise delete its tenant's entries and, through the
/// `invalidate` event each delete sends, make every visitor's browser drop its copies.
pub(crate) async fn delete(
    state: Ctx,
    caller: Option<Extension<Identity>>,
    Path(key): Path<String>,
) -> Result<StatusCode> {
    if let Some(Extension(c)) = &caller {
        if c.role != Role::Admin {
            return Err(Error::Forbidden(
                "deleting a cache entry needs the admin role".to_owned(),
            ));
        }
    }
    valid_id(&key)?;
    if state.store.cache_delete(&key).await? {
        tracing::info!(key = ?key, by = ?caller.as_ref().map(|c| c.sub.clone()), "cache entry deleted");
        invalidate(&state, key).await;
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(Error::NotFound(format!("no cache entry {key}")))
    }
}
