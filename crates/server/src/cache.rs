//! The remote cache's rules, shared by `PUT /v1/cache/{key}` and the write-through an ack can
//! carry: what a write must look like, its TTL, who vouches for its fence, and the `invalidate`
//! event when a live entry is replaced.

use ternflow_core::protocol::{CacheEntry, InvalidateEvent, Provenance, ServerEvent, Vector};

use crate::error::{Error, Result};
use crate::queue::valid_id;
use crate::state::AppState;
use crate::store::{Fenced, PutOutcome};

/// Announces that `key`'s entry changed, so workers drop their local copies.
pub(crate) async fn invalidate(state: &AppState, key: String) {
    let ev = ServerEvent::Invalidate(InvalidateEvent { keys: vec![key] });
    if let Err(e) = state.store.publish(ev).await {
        tracing::warn!(error = %e, "publish invalidate event");
    }
}

/// Checks a cache write's key and model before anything is stored.
///
/// # Errors
/// 400 `bad_id`, `bad_vector` or `model_mismatch`.
pub(crate) fn check_write(key: &str, model_id: &str, vector: &Vector) -> Result<()> {
    valid_id(key)?;
    if vector.0.is_empty() {
        return Err(Error::bad_request("bad_vector", "the vector is empty"));
    }
    if model_id.is_empty() {
        return Err(Error::bad_request(
            "bad_model",
            "a cache entry needs the model_id that produced it",
        ));
    }
    match key.split_once(':') {
        Some((model, _)) if model == model_id => Ok(()),
        _ => Err(Error::bad_request(
            "model_mismatch",
            "the key must be `model_id:texthash` with the entry's model_id",
        )),
    }
}

/// Stores an entry written by `writer` (TTL with jitter; the fence vouched for by `fenced`),
/// counting it and announcing a replaced live entry.
#[allow(clippy::too_many_arguments)] // one call per write path; a struct would only rename them
pub(crate) async fn store_entry(
    state: &AppState,
    key: &str,
    model_id: String,
    vector: Vector,
    fence: u64,
    fenced: Fenced,
    ttl_ms: Option<u64>,
    writer: Provenance,
) -> Result<(CacheEntry, PutOutcome)> {
    let now = state.now();
    let entry = CacheEntry {
        model_id,
        vector,
        fence,
        expires_at: now + state.config.cache_ttl(ttl_ms),
        by: Some(writer),
    };
    let outcome = state
        .store
        .cache_put(key, entry.clone(), fenced, now)
        .await?;
    match &outcome {
        PutOutcome::Stored { replaced } => {
            state.metrics.add(|c| &c.cache_puts, 1);
            if *replaced {
                invalidate(state, key.to_owned()).await;
            }
        }
        PutOutcome::Stale(_) => state.metrics.add(|c| &c.cache_stale_puts, 1),
        PutOutcome::Unfenced => state.metrics.add(|c| &c.cache_unfenced_puts, 1),
    }
    Ok((entry, outcome))
}
