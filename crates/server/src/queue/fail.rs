//! Failing jobs: the one path every nack takes. A nack is a worker's word that it could not do
//! a job, now (`retryable`) or ever; like a result it comes from a stranger's browser, so the
//! server does not let it alone end a job when it can do better:
//!
//! - a nack that would end the job (`retryable: false`, or its last attempt) of a model the
//!   server runs: the server embeds the text itself, within the tenant's embed budget, and the
//!   job is done (`source: backend`, by [`SERVER_WRITER`], verified). Only when the server's own
//!   engine fails too does the job go to the dead-letter queue. When the budget or the engine
//!   queue refuses, the job stays alive (retried, its attempt not the last);
//! - `retryable: false` for a model the server cannot run: the job is retried instead, and goes
//!   to the dead-letter queue after its attempts like any failing job. One token cannot send a
//!   tenant's queue to the dead-letter queue in a request.
//!
//! With verification off for the tenant (`--verify-tenants … "enabled": false`) its workers'
//! word is taken as it comes, as before.

use ternflow_core::http_handler::embed_units;
use ternflow_core::protocol::{
    JobResult, NackItemOutcome, NackRequest, NackResponse, Provenance, ResultSource, Vector,
};

use super::publish_finished;
use crate::error::{Error, Result};
use crate::identity::{Identity, SERVER_WRITER};
use crate::integrity::verifier;
use crate::store::{AckInput, AckOutcome};
use crate::tenants::Ctx;

/// What the server's own attempt at a job came to.
enum Attempt {
    /// Done and stored.
    Done,
    /// The worker's lease was lost meanwhile (another worker holds it, or it was acked).
    LeaseLost,
    /// The job is gone.
    Missing,
    /// Not tried now (the embed budget or queue refused): the job must stay alive.
    Deferred,
    /// The server's engine failed on the text too: the worker's nack stands.
    Failed(String),
}

/// Applies one nack of `caller`'s (`None`: a server without tokens) to job `id`: its backoff
/// from the attempt number, the rules above, then the store's answer (counted).
///
/// # Errors
/// The store's (the worker sends the nack again).
pub(crate) async fn fail(
    state: &Ctx,
    caller: Option<&Identity>,
    id: &str,
    req: NackRequest,
) -> Result<NackItemOutcome> {
    let now = state.now();
    let cfg = &state.config;
    // The backoff depends on the attempt number, which the store knows; ask it first.
    let attempt = match state.store.status(id).await? {
        Some(s) => s.attempt,
        None => return Ok(NackItemOutcome::Missing),
    };
    let mut error = crate::store::cap_error(req.error);
    let mut max_attempts = cfg.max_attempts;
    if verifier::policy(state).enabled && (!error.retryable || attempt >= max_attempts) {
        match job_model(state, id).await? {
            Some((text, model)) if verifier::runs(state, &model) => {
                match embed_it(state, caller, id, &req.token, text, model, now).await? {
                    Attempt::Done => return Ok(NackItemOutcome::Done),
                    Attempt::LeaseLost => return Ok(NackItemOutcome::LeaseLost),
                    Attempt::Missing => return Ok(NackItemOutcome::Missing),
                    Attempt::Deferred => {
                        error.retryable = true;
                        max_attempts = attempt.saturating_add(1);
                    }
                    Attempt::Failed(why) => {
                        error.message = format!("{} (the server failed too: {why})", error.message);
                        error = crate::store::cap_error(error);
                    }
                }
            }
            Some(_) if !error.retryable => {
                // A model the server cannot run: one worker's word does not end the job.
                error.retryable = true;
                error.message = format!(
                    "{} (sent as permanent; retried: a worker's nack alone does not dead-letter a job)",
                    error.message
                );
                error = crate::store::cap_error(error);
                state.metrics.add(|c| &c.nacks_overruled, 1);
            }
            _ => {}
        }
    }
    let retry_at = now + cfg.backoff_ms(attempt);
    let Some(resp) = state
        .store
        .nack(id, &req.token, error, retry_at, max_attempts, now)
        .await?
    else {
        return Ok(NackItemOutcome::LeaseLost);
    };
    state.metrics.add(|c| &c.jobs_nacked, 1);
    tracing::info!(job = %id, outcome = ?resp, "nacked");
    Ok(match resp {
        NackResponse::Dead => {
            state.metrics.add(|c| &c.jobs_dead, 1);
            NackItemOutcome::Dead
        }
        NackResponse::Retry { available_at } => {
            state.metrics.add(|c| &c.jobs_retried, 1);
            NackItemOutcome::Retry { available_at }
        }
        NackResponse::Done => NackItemOutcome::Done,
    })
}

/// The job's text and the model its result must be of (a job enqueued without one takes the
/// server's, as a claim would give it); `None` for an unknown job.
async fn job_model(state: &Ctx, id: &str) -> Result<Option<(String, String)>> {
    let input = state
        .store
        .job_inputs(&[id.to_owned()])
        .await?
        .pop()
        .flatten();
    Ok(input.map(|(text, model)| {
        let model = if model.is_empty() {
            state
                .embed
                .as_ref()
                .map(|b| b.model_id().to_owned())
                .unwrap_or_default()
        } else {
            model
        };
        (text, model)
    }))
}

/// The server embeds job `id`'s `text` with its own `model` (paid from the caller's and the
/// tenant's embed budgets, as `POST /v1/embed` would be) and stores the result under the
/// nacking worker's lease `token`.
async fn embed_it(
    state: &Ctx,
    caller: Option<&Identity>,
    id: &str,
    token: &str,
    text: String,
    model: String,
    now: u64,
) -> Result<Attempt> {
    let Some(batcher) = state.embed.clone() else {
        return Ok(Attempt::Deferred);
    };
    if let Some(caller) = caller {
        let cost = embed_units(std::slice::from_ref(&text));
        let tenant_budget = state.config.quotas_of(&state.tenant).embed_tokens_per_min;
        if let Err(e) = state
            .limits
            .spend_embed(state.store.as_ref(), caller, tenant_budget, cost)
            .await
        {
            tracing::info!(job = %id, error = %e, "a failed job's embedding deferred");
            return Ok(Attempt::Deferred);
        }
    }
    let vector = match batcher.embed_with(vec![text], None).await {
        Ok((mut v, _)) if v.len() == 1 => v.remove(0),
        Ok(_) => return Ok(Attempt::Failed("no vector".to_owned())),
        Err(Error::TooManyRequests { .. }) => return Ok(Attempt::Deferred),
        Err(e) => return Ok(Attempt::Failed(e.to_string())),
    };
    let result = JobResult {
        model_id: model,
        vector: Vector(vector),
        source: ResultSource::Backend,
        by: Some(Provenance {
            tenant: state.tenant.to_string(),
            sub: SERVER_WRITER.to_owned(),
            worker: None,
            at: now,
            verified: true,
        }),
    };
    let input = AckInput {
        id: id.to_owned(),
        token: token.to_owned(),
        result,
    };
    let outcome = state.store.ack_many(vec![input], now).await?.pop();
    Ok(match outcome {
        Some(AckOutcome::Done { .. }) => {
            state.metrics.job_acked(id, ResultSource::Backend, now);
            state.metrics.add(|c| &c.jobs_acked, 1);
            state.metrics.add(|c| &c.jobs_done_by_server, 1);
            state.usage.add(|c| &c.jobs_acked, 1);
            state.metrics.record_acks(now, 1);
            publish_finished(state, vec![id.to_owned()], Vec::new()).await;
            tracing::info!(job = %id, "a failed job embedded by the server");
            Attempt::Done
        }
        Some(AckOutcome::Repeated) => Attempt::Done,
        Some(AckOutcome::Stale) => Attempt::LeaseLost,
        Some(AckOutcome::Missing) | None => Attempt::Missing,
        Some(AckOutcome::WrongModel { expected }) => {
            Attempt::Failed(format!("the job is of model {expected}"))
        }
    })
}
