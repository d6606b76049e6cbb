//! `POST /v1/jobs`, `POST /v1/jobs/claim`, `GET /v1/jobs/{id}` and the lease operations
//! (`heartbeat`, `ack`, `nack`).

use std::time::Duration;

use axum::http::HeaderMap;
use axum::http::StatusCode;
use ternflow_core::keys;
use ternflow_core::protocol::{
    AckBatchResponse, AckItem, AckItemOutcome, AckItemResult, AckRequest, AckResponse,
    ClaimRequest, ClaimResponse, EnqueueRequest, EnqueueResponse, ErrorDetail,
    HeartbeatBatchRequest, HeartbeatBatchResponse, HeartbeatItem, HeartbeatRequest,
    HeartbeatResponse, JobState, JobStatus, NackBatchRequest, NackBatchResponse, NackItemOutcome,
    NackItemResult, NackRequest, NackResponse, ReleaseBatchRequest, ReleaseBatchResponse,
    ReleaseItem, ReleaseOutcome, ReleaseRequest, StatusList, StatusRequest,
};
use ternflow_core::trace::TraceParent;

use axum::Extension;

use crate::auth::Role;
use crate::error::{Error, Result};
use crate::extract::{Json, Path};
use crate::identity::{is_clean, Identity, DEFAULT_TENANT};
use crate::integrity::verifier;
use crate::queue::claim::claim_waiting;
use crate::queue::describe::describe;
use crate::queue::fail::fail;
use crate::queue::finish::finish;
use crate::queue::{lease_lost, lost_or_missing, publish_depth, publish_finished, valid_id};
use crate::sessions::Claimed;
use crate::store::{JobRecord, Released, PRIORITY_RANGE};
use crate::tenants::Ctx;
use ternflow_core::ErrorCode;

/// Longest `delay_ms` accepted (30 days).
const MAX_DELAY_MS: u64 = 30 * 24 * 3_600_000;

/// The producer's trace id (its `traceparent`), shared by every job of its request; `None`
/// when it sent none (or a malformed one), and then each job starts a trace of its own.
fn trace_id_from(headers: &HeaderMap) -> Option<String> {
    headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(TraceParent::parse)
        .map(|t| t.trace_id)
}

/// The tenant's `max_queue` quota (`crate::quota`): 429 `quota_exceeded` when `adding` more
/// jobs would pass it. The count is a sample of the store's depth at most a second old plus
/// what was enqueued here since, so a burst cannot slip past it between two samples; the
/// operator's own tenant has no quota.
async fn check_queue_quota(state: &Ctx, adding: u64, now: u64) -> Result<()> {
    if &*state.tenant == DEFAULT_TENANT {
        return Ok(());
    }
    let max = state.config.quotas_of(&state.tenant).max_queue;
    let pending = match state.usage.pending_estimate(now) {
        Some(p) => p,
        None => {
            let d = state.store.depth(now).await?;
            let p = d.ready + d.delayed + d.leased;
            state.usage.sampled(now, p);
            p
        }
    };
    if pending + adding > max {
        state.usage.add(|c| &c.quota_refused, 1);
        return Err(Error::QuotaExceeded {
            message: format!(
                "this tenant has {pending} jobs pending; its max_queue quota is {max}"
            ),
            retry_after_s: 5,
        });
    }
    Ok(())
}

pub(crate) async fn enqueue(
    state: Ctx,
    headers: HeaderMap,
    Json(req): Json<EnqueueRequest>,
) -> Result<Json<EnqueueResponse>> {
    let jobs = req.into_jobs();
    let cfg = &state.config;
    if jobs.is_empty() {
        return Err(Error::bad_request(
            ErrorCode::EmptyBatch,
            "no jobs to enqueue",
        ));
    }
    if jobs.len() > cfg.max_enqueue_batch {
        return Err(Error::too_large(
            ErrorCode::BatchTooLarge,
            format!("at most {} jobs per request", cfg.max_enqueue_batch),
        ));
    }
    let now = state.now();
    let trace_id = trace_id_from(&headers);
    let enqueue_span = crate::deliveries::traced();
    let mut records = Vec::with_capacity(jobs.len());
    for j in jobs {
        if j.text.len() > cfg.max_text_bytes {
            return Err(Error::too_large(
                ErrorCode::TextTooLong,
                format!("texts are limited to {} bytes", cfg.max_text_bytes),
            ));
        }
        let model_id = j
            .model_id
            .unwrap_or_else(|| state.default_model_id.to_string());
        if !model_id.is_empty() {
            valid_id(&model_id)?;
        }
        let id = match j.id {
            Some(id) => {
                valid_id(&id)?;
                id
            }
            None => keys::job_id(&model_id, &j.text),
        };
        let priority = j.priority.unwrap_or(0);
        if !PRIORITY_RANGE.contains(&priority) {
            return Err(Error::bad_request(
                ErrorCode::BadPriority,
                "priority must be within -1000..=1000",
            ));
        }
        let delay = j.delay_ms.unwrap_or(0);
        if delay > MAX_DELAY_MS {
            return Err(Error::bad_request(
                ErrorCode::BadDelay,
                "delay_ms is at most 30 days",
            ));
        }
        records.push(JobRecord {
            id,
            text: j.text,
            model_id,
            priority,
            available_at: now + delay,
            meta: j.meta,
            trace_id: match &enqueue_span {
                // Exported: the job's trace is the enqueue span's (the producer's when it sent
                // a traceparent), and that span is its deliveries' parent.
                Some(sc) => crate::deliveries::stored_trace(&sc.trace_id().to_string(), Some(sc)),
                None => trace_id
                    .clone()
                    .unwrap_or_else(|| format!("{:032x}", rand::random::<u128>().max(1))),
            },
        });
    }
    check_queue_quota(&state, records.len() as u64, now).await?;
    let out = state.store.enqueue(records, now).await?;
    let new = out.iter().filter(|e| e.new).count() as u64;
    state.usage.enqueued(new);
    state.metrics.add(|c| &c.jobs_enqueued, new);
    state
        .metrics
        .add(|c| &c.jobs_duplicate, out.len() as u64 - new);
    if new > 0 {
        publish_depth(&state).await;
    }
    Ok(Json(EnqueueResponse { jobs: out }))
}

pub(crate) async fn claim(
    state: Ctx,
    caller: Option<Extension<Identity>>,
    Json(req): Json<ClaimRequest>,
) -> Result<Json<ClaimResponse>> {
    if let Some(Extension(c)) = &caller {
        state.limits.check_claim(state.store.as_ref(), c).await?;
    }
    // A waiting claim holds a slot of its token's (one visitor cannot hold every waiter).
    let _poll = match &caller {
        Some(Extension(c)) if req.wait_ms > 0 => Some(state.limits.open_poll(c)?),
        _ => None,
    };
    let caller_is_admin = caller
        .as_ref()
        .is_none_or(|Extension(c)| c.role == Role::Admin);
    let cfg = state.config.clone();
    if !is_clean(&req.worker, 128) {
        return Err(Error::bad_request(
            ErrorCode::BadWorker,
            "worker must be 1–128 characters of [A-Za-z0-9._:@-]",
        ));
    }
    if let Some(m) = &req.model_id {
        valid_id(m)?;
    }
    if req.max == 0 || req.max > cfg.max_claim {
        return Err(Error::bad_request(
            ErrorCode::BadMax,
            format!("max must be within 1..={}", cfg.max_claim),
        ));
    }
    let owner = caller.as_ref().map_or("", |Extension(c)| &*c.sub);
    if let Some(session) = &req.session {
        valid_session(session)?;
        if state
            .sessions
            .is_ended(&state.tenant, session, owner, state.now())
        {
            return Err(session_ended());
        }
    }
    let wait = Duration::from_millis(req.wait_ms.min(cfg.max_wait_ms));
    let _waiting = (!wait.is_zero()).then(|| state.metrics.families.long_poll());
    let jobs = claim_waiting(
        &state,
        &req.worker,
        caller.as_ref().map(|Extension(c)| &*c.sub),
        req.max,
        req.model_id.as_deref(),
        wait,
        caller_is_admin,
    )
    .await?;
    if let Some(session) = &req.session {
        let held = jobs
            .iter()
            .filter(|j| !j.resolved)
            .map(|j| (j.id.clone(), j.lease.token.clone()));
        let now = state.now();
        if state
            .sessions
            .claimed(&state.tenant, session, owner, held, now)
            == Claimed::Ended
        {
            // The page ended the session while this claim was on its way: nobody will work
            // these, so they go back now, not after their leases.
            let leases: Vec<_> = jobs
                .into_iter()
                .filter(|j| !j.resolved)
                .map(|j| (j.id, j.lease.token))
                .collect();
            release_all(state, leases).await?;
            return Err(session_ended());
        }
    }
    Ok(Json(ClaimResponse { jobs }))
}

/// A worker session id: 1–64 characters of `[A-Za-z0-9_-]`.
pub(crate) fn valid_session(session: &str) -> Result<()> {
    let ok = (1..=64).contains(&session.len())
        && session
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::bad_request(
            ErrorCode::BadSession,
            "session must be 1–64 characters of [A-Za-z0-9_-]",
        ))
    }
}

fn session_ended() -> Error {
    Error::conflict(
        ErrorCode::SessionEnded,
        "this worker session was ended by its page's hand-back: claim under a new one",
    )
}

pub(crate) async fn heartbeat(
    state: Ctx,
    Path(id): Path<String>,
    Json(req): Json<HeartbeatRequest>,
) -> Result<Json<HeartbeatResponse>> {
    valid_id(&id)?;
    let now = state.now();
    match state
        .store
        .heartbeat(
            &id,
            &req.token,
            state.config.lease_ms,
            state.config.max_lease_hold_ms,
            now,
        )
        .await?
    {
        Some(lease) => Ok(Json(HeartbeatResponse { lease })),
        None => Err(lost_or_missing(&state, &id).await),
    }
}

/// `POST /v1/jobs/heartbeat`: extends many leases in one store step, each answered on its own.
pub(crate) async fn heartbeat_batch(
    state: Ctx,
    Json(req): Json<HeartbeatBatchRequest>,
) -> Result<Json<HeartbeatBatchResponse>> {
    if req.leases.is_empty() {
        return Err(Error::bad_request(ErrorCode::EmptyBatch, "no leases"));
    }
    if req.leases.len() > state.config.max_claim as usize {
        return Err(Error::too_large(
            ErrorCode::BatchTooLarge,
            format!("at most {} leases per request", state.config.max_claim),
        ));
    }
    for l in &req.leases {
        valid_id(&l.id)?;
    }
    let now = state.now();
    let ids: Vec<String> = req.leases.iter().map(|l| l.id.clone()).collect();
    let leases = req.leases.into_iter().map(|l| (l.id, l.token)).collect();
    let found = state
        .store
        .heartbeat_many(
            leases,
            state.config.lease_ms,
            state.config.max_lease_hold_ms,
            now,
        )
        .await?;
    let lost = found.iter().filter(|l| l.is_none()).count();
    if lost > 0 {
        state.metrics.add(|c| &c.leases_lost, lost as u64);
    }
    Ok(Json(HeartbeatBatchResponse {
        results: ids
            .into_iter()
            .zip(found)
            .map(|(id, lease)| HeartbeatItem { id, lease })
            .collect(),
    }))
}

pub(crate) async fn ack(
    state: Ctx,
    Extension(caller): Extension<Identity>,
    Path(id): Path<String>,
    Json(req): Json<AckRequest>,
) -> Result<Json<AckResponse>> {
    valid_id(&id)?;
    let writer = crate::integrity::Writer::of(&caller, req.worker.as_deref());
    let item = AckItem { id, ack: req };
    let finishing = state.clone();
    let r = to_the_end(async move { finish(&finishing, &writer, vec![item]).await })
        .await?
        .pop()
        .ok_or_else(|| Error::Unavailable("no answer for the ack".to_owned()))?;
    match r.outcome {
        AckItemOutcome::Done => Ok(Json(AckResponse {
            id: r.id,
            first: true,
        })),
        // Pending (k-of-n agreement): this ack is taken; the job is not final yet.
        AckItemOutcome::Repeated | AckItemOutcome::Pending => Ok(Json(AckResponse {
            id: r.id,
            first: false,
        })),
        AckItemOutcome::LeaseLost => Err(lease_lost(&state)),
        AckItemOutcome::Missing => Err(Error::no_job(&r.id)),
        AckItemOutcome::Refused => {
            let e = r.error.unwrap_or(ErrorDetail {
                code: ErrorCode::BadResult.as_str().to_owned(),
                message: String::new(),
            });
            Err(Error::refused(&e.code, e.message))
        }
    }
}

/// [`AckBatchRequest`](ternflow_core::protocol::AckBatchRequest) as it is read: each ack decoded on its own, so one that does not decode
/// (a vector that is not base64 of `f32`s, a NaN) is refused alone instead of failing the batch.
#[derive(serde::Deserialize)]
pub(crate) struct AckBatchWire {
    /// Each ack as its raw JSON text (only scanned here, decoded once below).
    acks: Vec<Box<serde_json::value::RawValue>>,
    #[serde(default)]
    worker: Option<String>,
}

/// The `id` of an ack that did not decode, if it has a string one.
#[derive(serde::Deserialize)]
struct IdOnly {
    #[serde(default)]
    id: Option<String>,
}

/// `POST /v1/jobs/ack`: many acks in one request and one store step, each answered on its own
/// (a lost lease or a malformed ack never drops the others). A store failure fails the whole
/// request (503): the worker sends the same batch again, and acks are idempotent per token.
pub(crate) async fn ack_batch(
    state: Ctx,
    Extension(caller): Extension<Identity>,
    Json(req): Json<AckBatchWire>,
) -> Result<Json<AckBatchResponse>> {
    if req.acks.is_empty() {
        return Err(Error::bad_request(ErrorCode::EmptyBatch, "no acks"));
    }
    if req.acks.len() > state.config.max_claim as usize {
        return Err(Error::too_large(
            ErrorCode::BatchTooLarge,
            format!("at most {} acks per request", state.config.max_claim),
        ));
    }
    let writer = crate::integrity::Writer::of(&caller, req.worker.as_deref());
    let mut decoded = Vec::with_capacity(req.acks.len());
    let mut undecodable = Vec::new();
    for (i, raw) in req.acks.iter().enumerate() {
        match serde_json::from_str::<AckItem>(raw.get()) {
            Ok(item) => decoded.push(item),
            Err(e) => undecodable.push((
                i,
                AckItemResult {
                    id: serde_json::from_str::<IdOnly>(raw.get())
                        .ok()
                        .and_then(|x| x.id)
                        .unwrap_or_default(),
                    outcome: AckItemOutcome::Refused,
                    error: Some(ErrorDetail {
                        code: ErrorCode::BadResult.as_str().to_owned(),
                        message: format!("this ack does not decode: {e}"),
                    }),
                },
            )),
        }
    }
    let mut results = if decoded.is_empty() {
        Vec::new()
    } else {
        to_the_end(async move { finish(&state, &writer, decoded).await }).await?
    };
    // Back in request order.
    for (i, r) in undecodable {
        results.insert(i.min(results.len()), r);
    }
    Ok(Json(AckBatchResponse { results }))
}

/// Runs `work` to its end even when the request is dropped: a worker's page that closes while
/// its acks are on their way cuts the connection, and axum then drops the handler — after the
/// store took the acks, before their counts, cache writes and events (seen as 32 jobs done
/// with no `jobs_acked` in tests/e2e/leaving.test.mjs). Its own task, in the request's span.
async fn to_the_end<T: Send + 'static>(
    work: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    use tracing::Instrument as _;
    match tokio::spawn(work.instrument(tracing::Span::current())).await {
        Ok(r) => r,
        Err(e) => Err(Error::Unavailable(format!(
            "the request did not finish: {e}"
        ))),
    }
}

/// `POST /v1/jobs/{id}/release`: a stopping worker hands the lease back; the job is ready again
/// at once. Its first `--free-releases` releases do not count the attempt; past them a release
/// is an attempt (a worker cannot keep a job by releasing and claiming it again), and with
/// verification on the next claim past the job's attempts has the server do it
/// (`queue::fail::past_their_attempts`), so the store is told no limit, as the claim tells it.
pub(crate) async fn release(
    state: Ctx,
    Path(id): Path<String>,
    Json(req): Json<ReleaseRequest>,
) -> Result<StatusCode> {
    valid_id(&id)?;
    let outcome = release_one(&state, &id, &req.token).await?;
    if outcome == ReleaseOutcome::Lost {
        return Err(lost_or_missing(&state, &id).await);
    }
    if outcome == ReleaseOutcome::Dead {
        publish_finished(&state, Vec::new(), vec![id]).await;
    }
    publish_depth(&state).await;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/jobs/release`: hands many leases back, each answered on its own (a lease the token
/// does not hold is `lost`, nothing changed): what a stopping worker, or a page going away,
/// sends for every lease it holds.
pub(crate) async fn release_batch(
    state: Ctx,
    caller: Option<Extension<Identity>>,
    Json(req): Json<ReleaseBatchRequest>,
) -> Result<Json<ReleaseBatchResponse>> {
    if req.leases.is_empty() && req.session.is_none() {
        return Err(Error::bad_request(ErrorCode::EmptyBatch, "no leases"));
    }
    if req.leases.len() > state.config.max_claim as usize {
        return Err(Error::too_large(
            ErrorCode::BatchTooLarge,
            format!("at most {} leases per request", state.config.max_claim),
        ));
    }
    for l in &req.leases {
        valid_id(&l.id)?;
    }
    if let Some(session) = &req.session {
        valid_session(session)?;
    }
    let owner = caller.map_or_else(String::new, |Extension(c)| c.sub.to_string());
    // To the end: the sender is often a page that is gone (`keepalive`), and a connection
    // dropped halfway must not leave half the leases held.
    let done = to_the_end(async move {
        let named: Vec<_> = req.leases.into_iter().map(|l| (l.id, l.token)).collect();
        // The session's end first: a claim of its that lands from now on is handed back by
        // the claim itself.
        let from_session: Vec<_> = match &req.session {
            Some(session) => {
                let now = state.now();
                let mut held = state.sessions.end(&state.tenant, session, &owner, now);
                held.retain(|h| !named.contains(h));
                held
            }
            None => Vec::new(),
        };
        let unnamed = from_session.len();
        let results = release_all(state.clone(), named).await?;
        let mut from_session = release_all(state, from_session).await?;
        // What the page's list did not name and was finished meanwhile is not news.
        from_session.retain(|r| r.outcome != ReleaseOutcome::Lost);
        if let Some(session) = &req.session {
            tracing::debug!(
                session = %session,
                named = results.len(),
                unnamed,
                handed_back = from_session.len(),
                "a worker session ended"
            );
        }
        Ok::<_, Error>(ReleaseBatchResponse {
            results,
            from_session,
        })
    });
    Ok(Json(done.await?))
}

/// Hands back each of `leases` (`(job id, token)`), answered in order, and publishes what
/// changed.
pub(crate) async fn release_all(
    state: Ctx,
    leases: Vec<(String, String)>,
) -> Result<Vec<ReleaseItem>> {
    let mut results = Vec::with_capacity(leases.len());
    let mut dead = Vec::new();
    for (id, token) in leases {
        let outcome = release_one(&state, &id, &token).await?;
        if outcome == ReleaseOutcome::Dead {
            dead.push(id.clone());
        }
        results.push(ReleaseItem { id, outcome });
    }
    // A lease already finished or lost is not counted as lost here: a page that goes away
    // while its last acks land sends some of those.
    publish_finished(&state, Vec::new(), dead).await;
    if results.iter().any(|r| r.outcome != ReleaseOutcome::Lost) {
        publish_depth(&state).await;
    }
    Ok(results)
}

/// Hands `id`'s lease back if `token` holds it, counted as the job's rules say (its first
/// `--free-releases` use no attempt), with the metrics; the caller publishes.
async fn release_one(state: &Ctx, id: &str, token: &str) -> Result<ReleaseOutcome> {
    let limit = if verifier::policy(state).enabled {
        u32::MAX
    } else {
        state.config.max_attempts
    };
    let free = state.config.free_releases;
    let outcome = match state
        .store
        .release(id, token, free, limit, state.now())
        .await?
    {
        Released::NotHeld => return Ok(ReleaseOutcome::Lost),
        Released::Free => ReleaseOutcome::Released,
        Released::Counted => ReleaseOutcome::Counted,
        Released::Dead => ReleaseOutcome::Dead,
    };
    state.metrics.add(|c| &c.leases_released, 1);
    let ending = if outcome == ReleaseOutcome::Dead {
        crate::deliveries::Ending::DeadLettered
    } else {
        crate::deliveries::Ending::Released
    };
    state.sessions.finished(&state.tenant, id);
    state.deliveries.end(&state.tenant, id, ending, None, "");
    if outcome != ReleaseOutcome::Released {
        state.metrics.add(|c| &c.releases_counted, 1);
    }
    if outcome == ReleaseOutcome::Dead {
        state.metrics.dead_lettered(ErrorCode::Released.as_str(), 1);
    }
    Ok(outcome)
}

pub(crate) async fn nack(
    state: Ctx,
    caller: Option<Extension<Identity>>,
    Path(id): Path<String>,
    Json(req): Json<NackRequest>,
) -> Result<Json<NackResponse>> {
    valid_id(&id)?;
    let (failing, who, job) = (state.clone(), caller.map(|c| c.0), id.clone());
    let outcome = to_the_end(async move {
        let outcome = fail(&failing, who.as_ref(), &job, req).await?;
        if outcome == NackItemOutcome::Dead {
            publish_finished(&failing, Vec::new(), vec![job]).await;
        }
        Ok(outcome)
    })
    .await?;
    match outcome {
        NackItemOutcome::Retry { available_at } => Ok(Json(NackResponse::Retry { available_at })),
        NackItemOutcome::Dead => Ok(Json(NackResponse::Dead)),
        NackItemOutcome::Done => Ok(Json(NackResponse::Done)),
        NackItemOutcome::LeaseLost => Err(lease_lost(&state)),
        NackItemOutcome::Missing => Err(Error::no_job(&id)),
    }
}

/// `POST /v1/jobs/nack`: many nacks, each applied as the single nack would be (concurrently, so
/// the store commits them together) and answered on its own.
pub(crate) async fn nack_batch(
    state: Ctx,
    caller: Option<Extension<Identity>>,
    Json(req): Json<NackBatchRequest>,
) -> Result<Json<NackBatchResponse>> {
    if req.nacks.is_empty() {
        return Err(Error::bad_request(ErrorCode::EmptyBatch, "no nacks"));
    }
    if req.nacks.len() > state.config.max_claim as usize {
        return Err(Error::too_large(
            ErrorCode::BatchTooLarge,
            format!("at most {} nacks per request", state.config.max_claim),
        ));
    }
    for n in &req.nacks {
        valid_id(&n.id)?;
    }
    let caller = caller.map(|c| c.0);
    // To the end, as an ack: nacks the store took are counted and published.
    let answer = to_the_end(async move {
        let ids: Vec<String> = req.nacks.iter().map(|n| n.id.clone()).collect();
        let caller = caller.as_ref();
        let outcomes = futures_util::future::try_join_all(req.nacks.into_iter().map(|n| {
            let state = &state;
            async move { fail(state, caller, &n.id, n.nack).await }
        }))
        .await?;
        let dead: Vec<String> = ids
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| matches!(o, NackItemOutcome::Dead))
            .map(|(id, _)| id.clone())
            .collect();
        let lost = outcomes
            .iter()
            .filter(|o| matches!(o, NackItemOutcome::LeaseLost))
            .count();
        if lost > 0 {
            state.metrics.add(|c| &c.leases_lost, lost as u64);
        }
        publish_finished(&state, Vec::new(), dead).await;
        Ok(NackBatchResponse {
            results: ids
                .into_iter()
                .zip(outcomes)
                .map(|(id, outcome)| NackItemResult { id, outcome })
                .collect(),
        })
    })
    .await?;
    Ok(Json(answer))
}

/// Most ids in one `POST /v1/jobs/status`.
const MAX_STATUS_IDS: usize = 1_000;

/// `POST /v1/jobs/status`: many jobs' status (and results) in one request, in order.
/// Drops a result's provenance for callers who may not see it (all but admins).
fn shown_to(caller: &Identity, mut s: JobStatus) -> JobStatus {
    if caller.role != Role::Admin {
        if let JobState::Done { result, .. } = &mut s.state {
            result.by = None;
        }
    }
    s
}

pub(crate) async fn status_many(
    state: Ctx,
    Extension(caller): Extension<Identity>,
    Json(req): Json<StatusRequest>,
) -> Result<Json<StatusList>> {
    if req.ids.len() > MAX_STATUS_IDS {
        return Err(Error::too_large(
            ErrorCode::BatchTooLarge,
            format!("at most {MAX_STATUS_IDS} ids per request"),
        ));
    }
    for id in &req.ids {
        valid_id(id)?;
    }
    let lookups = req.ids.iter().map(|id| state.store.status(id));
    let found = futures_util::future::try_join_all(lookups).await?;
    let mut out = StatusList {
        jobs: Vec::with_capacity(req.ids.len()),
        missing: Vec::new(),
    };
    for (id, st) in req.ids.into_iter().zip(found) {
        match st {
            Some(mut s) => {
                if !req.vectors {
                    if let JobState::Done { result, .. } = &mut s.state {
                        result.vector.0.clear();
                    }
                }
                out.jobs.push(shown_to(&caller, s))
            }
            None => out.missing.push(id),
        }
    }
    describe(&state, &mut out.jobs).await;
    Ok(Json(out))
}

pub(crate) async fn status(
    state: Ctx,
    Extension(caller): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Json<JobStatus>> {
    valid_id(&id)?;
    let s = state
        .store
        .status(&id)
        .await?
        .ok_or_else(|| Error::no_job(&id))?;
    let mut one = [shown_to(&caller, s)];
    describe(&state, &mut one).await;
    let [s] = one;
    Ok(Json(s))
}
