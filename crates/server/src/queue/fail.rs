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
//! A lease that expires is a failure no worker reports; the claim applies the same rule to a
//! job whose last allowed lease expired (`super::claim`, [`past_their_attempts`]), charging no
//! token (at most one embedding per job; bounded by the engine's queue).
//!
//! With verification off for the tenant (`--verify-tenants … "enabled": false`) its workers'
//! word is taken as it comes, as before.

use ternflow_core::http_handler::embed_units;
use ternflow_core::protocol::{
    JobResult, NackItemOutcome, NackRequest, NackResponse, Provenance, ResultSource, Vector,
};

use super::publish_finished;
use crate::deliveries::Ending;
use crate::error::{Error, Result};
use crate::identity::{Identity, SERVER_WRITER};
use crate::integrity::verifier;
use crate::metrics::NackOutcome;
use crate::store::{AckInput, AckOutcome, Fenced};
use crate::tenants::Ctx;

/// What the server's own attempt at a job came to.
pub(crate) enum Attempt {
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
    let outcome = fail_once(state, caller, id, req).await?;
    let ending = match outcome {
        NackItemOutcome::Retry { .. } => Some(Ending::Retried),
        NackItemOutcome::Dead => Some(Ending::DeadLettered),
        NackItemOutcome::Done => Some(Ending::DoneByServer),
        NackItemOutcome::LeaseLost | NackItemOutcome::Missing => None,
    };
    if let Some(ending) = ending {
        let sub = caller.map_or("", |c| &*c.sub);
        state.sessions.finished(&state.tenant, id);
        state.deliveries.end(&state.tenant, id, ending, None, sub);
    }
    Ok(outcome)
}

async fn fail_once(
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
                // The sender must hold the lease before the server spends on the job (a
                // heartbeat: it checks the token and keeps the lease while the server embeds).
                if state
                    .store
                    .heartbeat(id, &req.token, cfg.lease_ms, cfg.max_lease_hold_ms, now)
                    .await?
                    .is_none()
                {
                    return Ok(NackItemOutcome::LeaseLost);
                }
                match done_by_server(state, caller, id, &req.token, text, model, now).await? {
                    Attempt::Done => {
                        state
                            .metrics
                            .families
                            .nacked(&error.code, NackOutcome::Done);
                        return Ok(NackItemOutcome::Done);
                    }
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
    let reason = error.code.clone();
    let Some(resp) = state
        .store
        .nack(id, &req.token, error, retry_at, max_attempts, now)
        .await?
    else {
        return Ok(NackItemOutcome::LeaseLost);
    };
    state.metrics.add(|c| &c.jobs_nacked, 1);
    tracing::info!(job = %id, outcome = ?resp, "nacked");
    let families = &state.metrics.families;
    Ok(match resp {
        NackResponse::Dead => {
            state.metrics.dead_lettered(&reason, 1);
            families.nacked(&reason, NackOutcome::Dead);
            NackItemOutcome::Dead
        }
        NackResponse::Retry { available_at } => {
            state.metrics.add(|c| &c.jobs_retried, 1);
            families.nacked(&reason, NackOutcome::Retry);
            NackItemOutcome::Retry { available_at }
        }
        NackResponse::Done => {
            families.nacked(&reason, NackOutcome::Done);
            NackItemOutcome::Done
        }
    })
}

/// The job's text and the model its result must be of (a job enqueued without one takes the
/// server's, as a claim would give it); `None` for an unknown job.
pub(crate) async fn job_model(state: &Ctx, id: &str) -> Result<Option<(String, String)>> {
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
/// tenant's embed budgets, as `POST /v1/embed` would be, when there is a caller) and stores
/// the result under the lease `token` (the nacking worker's, or the claim's).
pub(crate) async fn done_by_server(
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
    let by = Provenance {
        tenant: state.tenant.to_string(),
        sub: SERVER_WRITER.to_owned(),
        worker: None,
        at: now,
        verified: true,
    };
    let result = JobResult {
        model_id: model.clone(),
        vector: Vector(vector),
        source: ResultSource::Backend,
        by: Some(by.clone()),
    };
    let input = AckInput {
        id: id.to_owned(),
        token: token.to_owned(),
        result: result.clone(),
    };
    let outcome = state.store.ack_many(vec![input], now).await?.pop();
    Ok(match outcome {
        Some(AckOutcome::Done { fence, text_hash }) => {
            // Into the remote cache too, under the lease's fence, as a worker's ack would write
            // it through: the next visitor with this text is served, not the engine again.
            let key = format!("{model}:{text_hash}");
            if let Err(e) = crate::cache::store_entry(
                state,
                &key,
                model,
                result.vector,
                fence,
                Fenced::ByLease,
                None,
                by,
            )
            .await
            {
                tracing::debug!(key = %key, error = %e, "the server's result not cached");
            }
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

/// Jobs of `jobs` a claim delivered past their attempts: the store re-delivers an expired job
/// however many times it was delivered when verification is on (it is told no limit), and the
/// server decides here what the store would have: a job of the server's model whose last
/// allowed lease expired is embedded by the server under the new lease and taken out of the
/// claim; any other (or one the server's engine fails on) is dead-lettered with
/// `lease_expired`, as the store did. One the server cannot pay for now is handed out.
///
/// # Errors
/// The store's.
pub(crate) async fn past_their_attempts(
    state: &Ctx,
    jobs: &mut Vec<ternflow_core::protocol::ClaimedJob>,
    now: u64,
) -> Result<()> {
    let max = state.config.max_attempts;
    if jobs.iter().all(|j| j.attempt <= max) {
        return Ok(());
    }
    let (late, keep): (Vec<_>, Vec<_>) = std::mem::take(jobs)
        .into_iter()
        .partition(|j| j.attempt > max);
    *jobs = keep;
    let mut dead = Vec::new();
    for j in late {
        let why = match job_model(state, &j.id).await? {
            Some((text, model)) if verifier::runs(state, &model) => {
                match done_by_server(state, None, &j.id, &j.lease.token, text, model, now).await? {
                    Attempt::Done | Attempt::LeaseLost | Attempt::Missing => continue,
                    Attempt::Deferred => {
                        jobs.push(j);
                        continue;
                    }
                    Attempt::Failed(why) => format!(" (the server failed too: {why})"),
                }
            }
            Some(_) => String::new(),
            None => continue,
        };
        let error = ternflow_core::protocol::JobError {
            code: ternflow_core::ErrorCode::LeaseExpired.as_str().to_owned(),
            message: format!("its last allowed lease (attempt {max}) expired{why}"),
            retryable: false,
        };
        let answer = state
            .store
            .nack(
                &j.id,
                &j.lease.token,
                crate::store::cap_error(error),
                now,
                max,
                now,
            )
            .await?;
        if matches!(answer, Some(NackResponse::Dead)) {
            state
                .metrics
                .dead_lettered(ternflow_core::ErrorCode::LeaseExpired.as_str(), 1);
            dead.push(j.id);
        }
    }
    publish_finished(state, Vec::new(), dead).await;
    Ok(())
}
