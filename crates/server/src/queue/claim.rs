//! A claim: leases up to `max` jobs to a worker, waiting for work up to a deadline (a long
//! poll woken by enqueues and by the event hub), and hands each job out ready to run: the model
//! named for jobs enqueued without one, its text looked up in the cache (a cached text finished
//! by the claim itself, `resolve_cached`), and a span of its own in the job's trace.

use std::time::Duration;

use ternflow_core::protocol::ClaimedJob;

use super::fail::past_their_attempts;
use super::finish::resolve_cached;
use super::{publish_depth, publish_finished};
use crate::error::{Error, Result};
use crate::integrity::verifier;
use crate::tenants::Ctx;

/// How often a long-poll re-checks for due delayed jobs and expired leases.
const POLL_TICK: Duration = Duration::from_millis(250);

/// Leases up to `max` jobs to `worker` (checked by the route; `sub`: the caller's writer identity,
/// recorded with each lease for the history of a delivery that fails), waiting up to `wait` while
/// none is ready; an empty list once `wait` has passed. Jobs enqueued without a model get `model_id`,
/// the claiming worker's. `show_provenance`: whether a cached entry keeps its writer (the
/// operator sees it; a worker does not learn who wrote what).
///
/// # Errors
/// 503 while the server shuts down; the store's errors.
pub(crate) async fn claim_waiting(
    state: &Ctx,
    worker: &str,
    sub: Option<&str>,
    max: u32,
    model_id: Option<&str>,
    wait: Duration,
    show_provenance: bool,
) -> Result<Vec<ClaimedJob>> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut shutdown = state.shutdown_signal();
    loop {
        if state.is_shutting_down() {
            return Err(Error::Unavailable("the server is shutting down".to_owned()));
        }
        // Register interest before looking, so an enqueue in between still wakes us.
        let notified = state.hub.work_available();
        let now = state.now();
        // With verification on, the server decides what becomes of a job whose last allowed
        // lease expired (`fail::past_their_attempts`), so the store is told no limit.
        let checked = verifier::policy(state).enabled;
        let limit = if checked {
            u32::MAX
        } else {
            state.config.max_attempts
        };
        let mut claimed = state
            .store
            .claim(worker, sub, max, state.config.lease_ms, limit, now)
            .await?;
        if checked {
            past_their_attempts(state, &mut claimed.jobs, now).await?;
        }
        let m = &state.metrics;
        m.add(|c| &c.leases_expired, claimed.expired.len() as u64);
        m.dead_lettered(
            ternflow_core::ErrorCode::LeaseExpired.as_str(),
            claimed.dead.len() as u64,
        );
        if !claimed.expired.is_empty() {
            publish_depth(state).await;
        }
        if !claimed.dead.is_empty() {
            publish_finished(state, Vec::new(), claimed.dead.clone()).await;
        }
        if !claimed.jobs.is_empty() || tokio::time::Instant::now() >= deadline {
            m.add(|c| &c.jobs_claimed, claimed.jobs.len() as u64);
            m.jobs_claimed(claimed.jobs.iter().map(|j| j.id.as_str()), now);
            let mut jobs = claimed.jobs;
            hand_out(state, &mut jobs, worker, model_id, show_provenance, now).await;
            return Ok(jobs);
        }
        let tick = deadline
            .saturating_duration_since(tokio::time::Instant::now())
            .min(POLL_TICK);
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep(tick) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Makes claimed `jobs` ready to run: the claiming worker's model for jobs enqueued without one,
/// each text looked up in the cache (one store step, so the worker needs no `GET`; a cached text
/// is finished by the claim itself), a writer's provenance shown only when `show_provenance`,
/// and a span of its own in each job's trace.
async fn hand_out(
    state: &Ctx,
    jobs: &mut [ClaimedJob],
    worker: &str,
    model_id: Option<&str>,
    show_provenance: bool,
    now: u64,
) {
    let m = &state.metrics;
    for j in jobs.iter_mut() {
        // One rule for jobs enqueued without a model: they are embedded with the
        // claiming worker's model, which the claim names.
        if j.model_id.is_empty() {
            if let Some(model) = model_id {
                j.model_id = model.to_owned();
            }
        }
    }
    // Look every text up in the cache now (one store step), so the worker needs no
    // GET of its own. Best effort: a failed lookup leaves `cache_checked` false and the
    // worker asks.
    let keys: Vec<String> = jobs
        .iter()
        .map(|j| ternflow_core::keys::cache_key(&j.model_id, &j.text))
        .collect();
    if let Ok(entries) = state.store.cache_get_many(&keys, now).await {
        for (j, entry) in jobs.iter_mut().zip(entries) {
            m.add(
                |c| {
                    if entry.is_some() {
                        &c.cache_hits
                    } else {
                        &c.cache_misses
                    }
                },
                1,
            );
            j.cache_checked = true;
            j.cached = entry;
        }
    }
    resolve_cached(state, jobs, now).await;
    if !show_provenance {
        for j in jobs.iter_mut() {
            if let Some(e) = &mut j.cached {
                e.by = None;
            }
        }
    }
    // Each job's delivery is a span of its own in the job's trace: one this server exports
    // (`crate::deliveries`) when this claim's span is, else an id minted for the worker's
    // requests to share.
    let claim_span = crate::deliveries::traced();
    for j in jobs.iter_mut() {
        let opened = claim_span.as_ref().and_then(|c| {
            let claim = crate::deliveries::Claim {
                tenant: &state.tenant,
                job: &j.id,
                attempt: j.attempt,
                worker,
                trace: &j.traceparent,
            };
            state.deliveries.open(&claim, c)
        });
        let (trace_id, _) = crate::deliveries::split_trace(&j.traceparent);
        let span = opened.map_or_else(
            || format!("{:016x}", rand::random::<u64>().max(1)),
            |s| s.to_string(),
        );
        j.traceparent = format!("00-{trace_id}-{span}-01");
        if j.resolved {
            state.deliveries.end(
                &state.tenant,
                &j.id,
                crate::deliveries::Ending::ResolvedAtClaim,
                None,
                "",
            );
        }
        tracing::info!(job = %j.id, traceparent = %j.traceparent, worker = %worker,
            attempt = j.attempt, fence = j.lease.fence, "claimed");
    }
}
