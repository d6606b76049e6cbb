//! Queue rules shared by the job, dead-letter and event routes: id validation, the `jobs`
//! event, telling a lost lease from a missing job, ([`claim`]) a claim's long poll and the jobs
//! it hands out, ([`finish`]) the one path a result takes into the store, ([`fail`]) the one
//! path a nack takes, and ([`describe`])
//! what a result covers of its text when it is read.

use ternflow_core::keys;
use ternflow_core::protocol::{FinishedEvent, JobsEvent, ServerEvent};

use crate::error::{Error, Result};

pub(crate) mod claim;
pub(crate) mod describe;
pub(crate) mod fail;
pub(crate) mod finish;
use crate::tenants::Ctx;
use ternflow_core::ErrorCode;

/// Checks a job id, cache key or lock key.
///
/// # Errors
/// 400 `bad_id`.
pub(crate) fn valid_id(id: &str) -> Result<()> {
    if keys::is_valid_key(id) {
        Ok(())
    } else {
        Err(Error::bad_request(
            ErrorCode::BadId,
            "ids and keys are 1–200 characters of [A-Za-z0-9-_.:]",
        ))
    }
}

/// Publishes a `jobs` event with the current ready depth (wakes idle workers everywhere).
pub(crate) async fn publish_depth(state: &Ctx) {
    let now = state.now();
    let depth = match state.store.depth(now).await {
        Ok(d) => d.ready,
        Err(e) => {
            tracing::warn!(error = %e, "depth for jobs event");
            return;
        }
    };
    if let Err(e) = state
        .store
        .publish(ServerEvent::Jobs(JobsEvent { depth }))
        .await
    {
        tracing::warn!(error = %e, "publish jobs event");
    }
}

/// Announces finished jobs (`finished` event) to producers waiting on results.
pub(crate) async fn publish_finished(state: &Ctx, done: Vec<String>, dead: Vec<String>) {
    if done.is_empty() && dead.is_empty() {
        return;
    }
    let ev = ServerEvent::Finished(FinishedEvent { done, dead });
    if let Err(e) = state.store.publish(ev).await {
        tracing::warn!(error = %e, "publish finished event");
    }
}

/// 409 `lease_lost` when the job exists (its lease is someone else's, or it is finished), 404
/// when it does not.
pub(crate) async fn lost_or_missing(state: &Ctx, id: &str) -> Error {
    match state.store.status(id).await {
        Ok(None) => Error::no_job(id),
        Ok(Some(_)) => lease_lost(state),
        Err(e) => e,
    }
}

/// 409 `lease_lost`, counted.
pub(crate) fn lease_lost(state: &Ctx) -> Error {
    state.metrics.add(|c| &c.leases_lost, 1);
    Error::conflict(
        ErrorCode::LeaseLost,
        "this token does not hold the job's lease (expired and re-delivered, or finished)",
    )
}
