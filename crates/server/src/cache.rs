//! The remote cache's rules, shared by `PUT /v1/cache/{key}` and the write-through an ack can
//! carry: what a write must look like, its TTL, who vouches for its fence, and the `invalidate`
//! event when a live entry is replaced.

use ternflow_core::protocol::{CacheEntry, InvalidateEvent, Provenance, ServerEvent, Vector};

use crate::error::{Error, Result};
use crate::identity::DEFAULT_TENANT;
use crate::queue::valid_id;
use crate::store::{Fenced, PutOutcome};
use crate::tenants::Ctx;
use ternflow_core::ErrorCode;

/// Announces that `key`'s entry changed, so workers drop their local copies.
pub(crate) async fn invalidate(state: &Ctx, key: String) {
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
        return Err(Error::bad_request(
            ErrorCode::BadVector,
            "the vector is empty",
        ));
    }
    if model_id.is_empty() {
        return Err(Error::bad_request(
            ErrorCode::BadModel,
            "a cache entry needs the model_id that produced it",
        ));
    }
    match key.split_once(':') {
        Some((model, _)) if model == model_id => Ok(()),
        _ => Err(Error::bad_request(
            ErrorCode::ModelMismatch,
            "the key must be `model_id:texthash` with the entry's model_id",
        )),
    }
}

/// The tenant's `max_cache_bytes` quota (`crate::quota`): 429 `quota_exceeded` when storing
/// `adding` more bytes would pass it. The count is the sweeper's last sample of the store plus
/// what was stored here since; the operator's own tenant has no quota.
async fn check_cache_quota(state: &Ctx, adding: u64, now: u64) -> Result<()> {
    if &*state.tenant == DEFAULT_TENANT {
        return Ok(());
    }
    let max = state.config.quotas_of(&state.tenant).max_cache_bytes;
    let held = match state.usage.cache_bytes_estimate() {
        Some(b) => b,
        None => {
            let b = state.store.cache_bytes(now).await?;
            state.usage.cache_sampled(now, b);
            b
        }
    };
    if held + adding > max {
        state.usage.add(|c| &c.quota_refused, 1);
        return Err(Error::QuotaExceeded {
            message: format!(
                "this tenant's cache holds {held} bytes; its max_cache_bytes quota is {max}"
            ),
            retry_after_s: 30,
        });
    }
    Ok(())
}

/// Stores an entry written by `writer` (TTL with jitter; the fence vouched for by `fenced`),
/// counting it and announcing a replaced live entry.
///
/// # Errors
/// 429 `quota_exceeded` past the tenant's `max_cache_bytes`; the store's errors.
#[allow(clippy::too_many_arguments)] // one call per write path; a struct would only rename them
pub(crate) async fn store_entry(
    state: &Ctx,
    key: &str,
    model_id: String,
    vector: Vector,
    fence: u64,
    fenced: Fenced,
    ttl_ms: Option<u64>,
    writer: Provenance,
) -> Result<(CacheEntry, PutOutcome)> {
    let now = state.now();
    let bytes = crate::quota::entry_bytes(key, vector.0.len());
    check_cache_quota(state, bytes, now).await?;
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
            state.usage.cache_stored(bytes);
            if *replaced {
                invalidate(state, key.to_owned()).await;
            }
        }
        PutOutcome::Stale(_) => state.metrics.add(|c| &c.cache_stale_puts, 1),
        PutOutcome::Unfenced => state.metrics.add(|c| &c.cache_unfenced_puts, 1),
    }
    Ok((entry, outcome))
}
