//! Finishing jobs: the one path every result takes into the store, whether a worker acks it
//! (alone or in a batch: a single ack is a batch of one) or the claim resolves it from the
//! remote cache. The checks, the provenance and the verification of `crate::integrity` happen
//! here, once.

use std::collections::HashMap;

use ternflow_core::protocol::{
    AckCacheWrite, AckItem, AckItemOutcome, AckItemResult, ClaimedJob, ErrorDetail, JobResult,
    ResultSource,
};

use super::{publish_finished, valid_id};
use crate::cache;
use crate::error::{Error, Result};
use crate::integrity::shape::check_vector;
use crate::integrity::verifier::{self, Item};
use crate::integrity::Writer;
use crate::store::{AckInput, AckOutcome, Fenced, Written};
use crate::tenants::Ctx;
use ternflow_core::ErrorCode;

/// What every ack must look like before the store sees it.
fn check_ack(state: &Ctx, item: &AckItem) -> Result<()> {
    valid_id(&item.id)?;
    let r = &item.ack.result;
    if r.model_id.is_empty() {
        return Err(Error::bad_request(
            ErrorCode::BadModel,
            "the result needs the model_id that produced it",
        ));
    }
    if let Some(c) = &item.ack.cache {
        valid_id(&c.key)?;
    }
    check_vector(verifier::model_dim(state, &r.model_id), &r.vector.0)
}

fn refused(id: String, e: &Error) -> AckItemResult {
    AckItemResult {
        id,
        outcome: AckItemOutcome::Refused,
        error: Some(ErrorDetail {
            code: e.code().as_str().to_owned(),
            message: e.to_string(),
        }),
    }
}

fn model_mismatch(expected: &str, got: &str) -> Error {
    Error::bad_request(
        ErrorCode::ModelMismatch,
        format!("the job is of model {expected}; the result names {got}"),
    )
}

/// Finishes `acks` of `writer`, each answered on its own in order: shape checks, then (on
/// probation) recomputation before anything is stored, the store's ack (which refuses a result
/// of another model than the job's), the cache write-through, the provenance index, and (after
/// probation) a sampled check off the request's path.
///
/// # Errors
/// 403 `quarantined` when a result does not verify (nothing of the batch is stored); the
/// store's and the engine's errors (the worker sends the batch again).
pub async fn finish(
    state: &Ctx,
    writer: &Writer,
    mut acks: Vec<AckItem>,
) -> Result<Vec<AckItemResult>> {
    // The workers' reports of their steps, for the deliveries this server traces: taken only
    // with an ack the store accepted (`crate::deliveries`).
    let timings: Vec<_> = acks.iter_mut().map(|a| a.ack.timing.take()).collect();
    let results = finish_acks(state, writer, acks).await?;
    for (r, timing) in results.iter().zip(&timings) {
        if matches!(r.outcome, AckItemOutcome::Done | AckItemOutcome::Pending) {
            state.sessions.finished(&state.tenant, &r.id);
            state.deliveries.end(
                &state.tenant,
                &r.id,
                crate::deliveries::Ending::Acked,
                timing.as_ref(),
                &writer.sub,
            );
        }
    }
    Ok(results)
}

async fn finish_acks(
    state: &Ctx,
    writer: &Writer,
    acks: Vec<AckItem>,
) -> Result<Vec<AckItemResult>> {
    let now = state.now();
    let mut results: Vec<Option<AckItemResult>> = vec![None; acks.len()];
    let mut items: Vec<(usize, AckItem)> = Vec::with_capacity(acks.len());
    // Only the first ack of a job in a batch is taken: what follows decides per job id (which
    // results are relayed, which are checked), and a second ack beside the first could make
    // the first pass as something it is not (a relay beside a lie made the lie the cache entry
    // writer's, unchecked).
    let mut seen = std::collections::HashSet::with_capacity(acks.len());
    for (i, item) in acks.into_iter().enumerate() {
        if !seen.insert(item.id.clone()) {
            state.metrics.add(|c| &c.results_refused, 1);
            let e = Error::bad_request(
                ErrorCode::BadBody,
                format!(
                    "job {} appears more than once in this batch; only its first ack is taken",
                    item.id
                ),
            );
            results[i] = Some(refused(item.id, &e));
            continue;
        }
        match check_ack(state, &item) {
            Ok(()) => items.push((i, item)),
            Err(e) => {
                state.metrics.add(|c| &c.results_refused, 1);
                results[i] = Some(refused(item.id, &e));
            }
        }
    }

    // Vectors taken from the remote cache, equal to its entry: that entry's writer's.
    let relayed = relayed_from_cache(state, &items).await?;
    let probation = verifier::on_probation(state, writer).await?;
    let mut verified = vec![false; items.len()];
    let own: Vec<String> = items
        .iter()
        .filter(|(_, a)| !relayed.contains_key(&a.id))
        .map(|(_, a)| a.id.clone())
        .collect();
    if probation && !own.is_empty() {
        let ids = own;
        let inputs = state.store.job_inputs(&ids).await?;
        let mut check = Vec::new();
        let mut keep = Vec::with_capacity(items.len());
        let mut inputs = ids.into_iter().zip(inputs).collect::<HashMap<_, _>>();
        for (i, item) in items.into_iter() {
            let Some(input) = inputs.remove(&item.id) else {
                keep.push((i, item)); // relayed from the cache
                continue;
            };
            let model = &item.ack.result.model_id;
            match input {
                Some((_, job_model)) if !job_model.is_empty() && &job_model != model => {
                    state.metrics.add(|c| &c.results_refused, 1);
                    results[i] = Some(refused(item.id, &model_mismatch(&job_model, model)));
                    continue;
                }
                Some((text, _)) if verifier::can_verify(state, model) => {
                    check.push((keep.len(), text));
                }
                Some(_) => state.metrics.add(|c| &c.results_unverifiable, 1),
                None => {}
            }
            keep.push((i, item));
        }
        items = keep;
        verified = vec![false; items.len()];
        if !check.is_empty() {
            let to_check: Vec<Item> = check
                .iter()
                .map(|(k, text)| Item {
                    written: Written::Job(items[*k].1.id.clone()),
                    text: text.clone(),
                    vector: items[*k].1.ack.result.vector.0.clone(),
                })
                .collect();
            let diffs = verifier::recompute(state, &to_check).await?;
            if let Some((item, d)) = to_check
                .iter()
                .zip(&diffs)
                .find_map(|(i, d)| d.as_ref().map(|d| (i, d)))
            {
                let reason = format!("{} (on probation): {d}", item.written.encode());
                verifier::condemn(state, &writer.sub, reason).await;
                return Err(Error::Quarantined(format!(
                    "a result did not match the server's own embedding ({d}); this worker \
                     identity is quarantined"
                )));
            }
            for (k, _) in &check {
                verified[*k] = true;
            }
            verifier::credit(state, writer, check.len() as u64).await;
        }
    }

    // k-of-n agreement for the models the server cannot recompute.
    let pol = verifier::policy(state);
    let mut agreed: HashMap<String, Vec<String>> = HashMap::new();
    if pol.enabled && pol.agreement > 1 {
        let mut keep = Vec::with_capacity(items.len());
        let mut keep_verified = Vec::with_capacity(items.len());
        for ((i, item), v) in items.into_iter().zip(verified) {
            if verifier::runs(state, &item.ack.result.model_id) {
                keep.push((i, item));
                keep_verified.push(v);
                continue;
            }
            match agree(state, writer, &item, pol.agreement).await? {
                Agreement::Reached { dissenters } => {
                    agreed.insert(item.id.clone(), dissenters);
                    keep.push((i, item));
                    keep_verified.push(true);
                }
                Agreement::Not(outcome) => {
                    results[i] = Some(AckItemResult {
                        id: item.id,
                        outcome,
                        error: None,
                    });
                }
            }
        }
        items = keep;
        verified = keep_verified;
    }

    // Into the store, each result carrying its provenance.
    let inputs: Vec<AckInput> = items
        .iter()
        .zip(&verified)
        .map(|((_, item), &v)| AckInput {
            id: item.id.clone(),
            token: item.ack.token.clone(),
            result: JobResult {
                by: match relayed.get(&item.id) {
                    Some(entry_writer) => entry_writer.clone(),
                    None => Some(writer.provenance(now, v)),
                },
                ..item.ack.result.clone()
            },
        })
        .collect();
    let outcomes = state.store.ack_many(inputs, now).await?;
    let mut writes = Vec::new();
    let mut written = Vec::new();
    let mut relayed_written: HashMap<String, Vec<Written>> = HashMap::new();
    let mut sample = Vec::new();
    let mut done_ids = Vec::new();
    for (((i, item), outcome), v) in items.into_iter().zip(outcomes).zip(verified) {
        let outcome = match outcome {
            AckOutcome::Done { fence, text_hash } => {
                let result = item.ack.result;
                state.metrics.job_acked(&item.id, result.source, now);
                done_ids.push(item.id.clone());
                match relayed.get(&item.id) {
                    Some(Some(by)) => relayed_written
                        .entry(by.sub.clone())
                        .or_default()
                        .push(Written::Job(item.id.clone())),
                    Some(None) => {}
                    None => written.push(Written::Job(item.id.clone())),
                }
                if let Some(dissenters) = agreed.remove(&item.id) {
                    settle_agreement(state, &item.id, dissenters).await;
                }
                if !probation
                    && !relayed.contains_key(&item.id)
                    && verifier::can_verify(state, &result.model_id)
                    && verifier::sampled(state)
                {
                    sample.push((item.id.clone(), result.vector.0.clone()));
                }
                if let Some(c) = item.ack.cache {
                    if write_key_ok(state, &item.id, &c, &result.model_id, &text_hash) {
                        written.push(Written::Cache(c.key.clone()));
                        writes.push(write_through(state, writer, c, result, fence, v));
                    }
                }
                AckItemOutcome::Done
            }
            AckOutcome::Repeated => AckItemOutcome::Repeated,
            AckOutcome::Stale => {
                state.metrics.add(|c| &c.leases_lost, 1);
                AckItemOutcome::LeaseLost
            }
            AckOutcome::Missing => AckItemOutcome::Missing,
            AckOutcome::WrongModel { expected } => {
                state.metrics.add(|c| &c.results_refused, 1);
                let e = model_mismatch(&expected, &item.ack.result.model_id);
                results[i] = Some(refused(item.id, &e));
                continue;
            }
        };
        results[i] = Some(AckItemResult {
            id: item.id,
            outcome,
            error: None,
        });
    }
    let done = done_ids.len() as u64;
    if done > 0 {
        tracing::debug!(done, sub = %writer.sub, "acked");
    }
    // The cache writes, the provenance records and the finished event do not depend on one
    // another (the results are stored by the ack above): issued together, the store takes them
    // in one go (on Redis their first commands share one pipelined write, where one at a time
    // cost a round trip — and a wake-up on each side — each).
    let notes = async {
        if let Err(e) = state.store.note_written(&writer.sub, written).await {
            tracing::warn!(error = %e, "recording provenance");
        }
    };
    let relayed_notes = relayed_written.into_iter().map(|(sub, items)| async move {
        if let Err(e) = state.store.note_written(&sub, items).await {
            tracing::warn!(error = %e, "recording provenance of relayed results");
        }
    });
    futures_util::join!(
        futures_util::future::join_all(writes),
        notes,
        futures_util::future::join_all(relayed_notes),
        publish_finished(state, done_ids, Vec::new()),
    );
    state.metrics.add(|c| &c.jobs_acked, done);
    state.usage.add(|c| &c.jobs_acked, done);
    state.metrics.record_acks(now, done);
    if !sample.is_empty() {
        sample_later(state, writer, sample).await;
    }
    Ok(results.into_iter().flatten().collect())
}

/// The acks whose vector the worker took from a cache (source `local` or `remote`) and that
/// equal the remote cache's entry for the job's text, bit for bit: job id → the entry's writer.
/// Such a result is the entry writer's (a liar found later takes it back), and is not checked
/// again. A vector a worker says it took from a cache but that is not the entry's is its own.
async fn relayed_from_cache(
    state: &Ctx,
    items: &[(usize, AckItem)],
) -> Result<HashMap<String, Option<ternflow_core::protocol::Provenance>>> {
    let relays: Vec<&AckItem> = items
        .iter()
        .map(|(_, a)| a)
        .filter(|a| {
            matches!(
                a.ack.result.source,
                ResultSource::Local | ResultSource::Remote
            )
        })
        .collect();
    let mut out = HashMap::new();
    if relays.is_empty() {
        return Ok(out);
    }
    let ids: Vec<String> = relays.iter().map(|a| a.id.clone()).collect();
    let inputs = state.store.job_inputs(&ids).await?;
    let keys: Vec<String> = relays
        .iter()
        .zip(&inputs)
        .map(|(a, i)| {
            let text = i.as_ref().map_or("", |(t, _)| t.as_str());
            ternflow_core::keys::cache_key(&a.ack.result.model_id, text)
        })
        .collect();
    let entries = state.store.cache_get_many(&keys, state.now()).await?;
    for ((a, input), entry) in relays.iter().zip(&inputs).zip(entries) {
        let (Some(_), Some(e)) = (input, entry) else {
            continue;
        };
        let same = e.model_id == a.ack.result.model_id
            && e.vector.0.len() == a.ack.result.vector.0.len()
            && e.vector
                .0
                .iter()
                .zip(&a.ack.result.vector.0)
                .all(|(x, y)| x.to_bits() == y.to_bits());
        if same {
            out.insert(a.id.clone(), e.by);
        }
    }
    Ok(out)
}

/// Reads the sampled jobs' texts (their vectors are the ones just stored), and checks them off
/// the request's path.
async fn sample_later(state: &Ctx, writer: &Writer, sampled: Vec<(String, Vec<f32>)>) {
    let ids: Vec<String> = sampled.iter().map(|(id, _)| id.clone()).collect();
    let inputs = match state.store.job_inputs(&ids).await {
        Ok(i) => i,
        Err(e) => {
            tracing::warn!(error = %e, "reading sampled jobs");
            return;
        }
    };
    let items = sampled
        .into_iter()
        .zip(inputs)
        .filter_map(|((id, vector), input)| {
            Some(Item {
                written: Written::Job(id),
                text: input?.0,
                vector,
            })
        })
        .collect();
    verifier::check_later(state, writer, items);
}

/// Whether an ack's cache write is for this job's own key (`model:texthash`); counted and
/// logged when not.
fn write_key_ok(state: &Ctx, id: &str, c: &AckCacheWrite, model: &str, text_hash: &str) -> bool {
    let expected = format!("{model}:{text_hash}");
    if c.key == expected {
        return true;
    }
    state.metrics.add(|c| &c.cache_unfenced_puts, 1);
    tracing::warn!(job = %id, key = ?c.key, %expected, "ack write-through for another key refused");
    false
}

/// The cache write an ack carries. The job is done whatever happens here: a write that is
/// refused (a newer fence) or fails is counted and logged, never reported as a failed ack. The
/// fence is the lease's, from the store, not the request's.
async fn write_through(
    state: &Ctx,
    writer: &Writer,
    c: AckCacheWrite,
    result: JobResult,
    fence: u64,
    verified: bool,
) {
    let by = writer.provenance(state.now(), verified);
    if let Err(e) = cache::store_entry(
        state,
        &c.key,
        result.model_id,
        result.vector,
        fence,
        Fenced::ByLease,
        c.ttl_ms,
        by,
    )
    .await
    {
        match e {
            // Counted in the tenant's quota_refused; the ack stands without its cache copy.
            Error::QuotaExceeded { .. } => {
                tracing::debug!(key = %c.key, "ack write-through skipped: cache quota");
            }
            e => tracing::warn!(key = %c.key, error = %e, "ack write-through to the cache failed"),
        }
    }
}

/// Finishes, under their new leases, the claimed jobs whose text the cache already holds for
/// their model (result source `remote`), and flags them `resolved`: the worker then only warms
/// its local cache and sends no ack, so a cache hit costs no ack request and its vector crosses
/// the network once. The result keeps the cache entry's provenance, and joins its writer's
/// index, so a writer found lying later takes these results back too. Best effort: on a store
/// error the jobs stay leased and the worker acks them as before.
pub(crate) async fn resolve_cached(state: &Ctx, jobs: &mut [ClaimedJob], now: u64) {
    let (hits, inputs): (Vec<usize>, Vec<AckInput>) = jobs
        .iter()
        .enumerate()
        .filter_map(|(i, j)| {
            let e = j.cached.as_ref()?;
            (e.model_id == j.model_id && !e.vector.0.is_empty()).then(|| {
                let input = AckInput {
                    id: j.id.clone(),
                    token: j.lease.token.clone(),
                    result: JobResult {
                        model_id: e.model_id.clone(),
                        vector: e.vector.clone(),
                        source: ResultSource::Remote,
                        by: e.by.clone(),
                    },
                };
                (i, input)
            })
        })
        .unzip();
    if hits.is_empty() {
        return;
    }
    let writers: Vec<Option<String>> = inputs
        .iter()
        .map(|a| a.result.by.as_ref().map(|b| b.sub.clone()))
        .collect();
    let outcomes = match state.store.ack_many(inputs, now).await {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(error = %e, "resolving cached jobs at claim");
            return;
        }
    };
    let mut done_ids = Vec::new();
    let mut by_writer: HashMap<String, Vec<Written>> = HashMap::new();
    for ((&i, outcome), w) in hits.iter().zip(outcomes).zip(writers) {
        if let AckOutcome::Done { .. } = outcome {
            let j = &mut jobs[i];
            j.resolved = true;
            state.metrics.job_acked(&j.id, ResultSource::Remote, now);
            done_ids.push(j.id.clone());
            if let Some(sub) = w {
                by_writer
                    .entry(sub)
                    .or_default()
                    .push(Written::Job(j.id.clone()));
            }
        }
    }
    for (sub, items) in by_writer {
        if let Err(e) = state.store.note_written(&sub, items).await {
            tracing::warn!(error = %e, "recording provenance of resolved jobs");
        }
    }
    let done = done_ids.len() as u64;
    state.metrics.add(|c| &c.jobs_acked, done);
    state.usage.add(|c| &c.jobs_acked, done);
    state.metrics.add(|c| &c.jobs_resolved_at_claim, done);
    state.metrics.record_acks(now, done);
    publish_finished(state, done_ids, Vec::new()).await;
}

/// Where a result of a model the server cannot run stands in k-of-n agreement.
enum Agreement {
    /// `k` identities sent this vector: the result is final; `dissenters` sent another one.
    Reached {
        /// Identities that proposed a different vector for the job.
        dissenters: Vec<String>,
    },
    /// Not final: the answer for this ack (`Pending`: the job was given back for another
    /// identity; `LeaseLost`: the caller does not hold it).
    Not(AckItemOutcome),
}

/// The digest a proposal is compared by: SHA-256 of the vector's little-endian bits.
fn vector_digest(v: &[f32]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for x in v {
        h.update(x.to_le_bytes());
    }
    h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Records `item` as `writer`'s proposal for its job (only while it holds the lease) and says
/// whether `k` identities now agree; when they do not, the job goes back to the queue (a nack
/// `awaiting_agreement` with the usual backoff, so a job no other identity takes is
/// dead-lettered after the server's attempts, with that reason).
async fn agree(state: &Ctx, writer: &Writer, item: &AckItem, k: u32) -> Result<Agreement> {
    let now = state.now();
    let (id, token) = (&item.id, &item.ack.token);
    if state
        .store
        .heartbeat(
            id,
            token,
            state.config.lease_ms,
            state.config.max_lease_hold_ms,
            now,
        )
        .await?
        .is_none()
    {
        return Ok(Agreement::Not(AckItemOutcome::LeaseLost));
    }
    let digest = vector_digest(&item.ack.result.vector.0);
    let all = state.store.propose(id, &writer.sub, &digest).await?;
    let same = all.iter().filter(|(_, d)| *d == digest).count();
    if same >= k as usize {
        let dissenters = all
            .into_iter()
            .filter(|(_, d)| *d != digest)
            .map(|(s, _)| s)
            .collect();
        return Ok(Agreement::Reached { dissenters });
    }
    let attempt = state.store.status(id).await?.map_or(1, |s| s.attempt);
    let error = ternflow_core::protocol::JobError {
        code: ErrorCode::AwaitingAgreement.as_str().to_owned(),
        message: format!("{same} of the {k} identities that must agree sent this vector"),
        retryable: true,
    };
    let retry_at = now + state.config.backoff_ms(attempt);
    let nacked = state
        .store
        .nack(id, token, error, retry_at, state.config.max_attempts, now)
        .await?;
    Ok(Agreement::Not(match nacked {
        Some(r) => {
            state.metrics.add(|c| &c.results_pending_agreement, 1);
            if r == ternflow_core::protocol::NackResponse::Dead {
                state
                    .metrics
                    .dead_lettered(ErrorCode::AwaitingAgreement.as_str(), 1);
                publish_finished(state, Vec::new(), vec![id.clone()]).await;
            }
            AckItemOutcome::Pending
        }
        None => AckItemOutcome::LeaseLost,
    }))
}

/// A job's result is final by agreement: its proposals are forgotten, and every identity that
/// proposed another vector is quarantined.
async fn settle_agreement(state: &Ctx, id: &str, dissenters: Vec<String>) {
    if let Err(e) = state.store.clear_proposals(id).await {
        tracing::warn!(error = %e, job = %id, "clearing proposals");
    }
    for sub in dissenters {
        let reason =
            format!("j:{id}: its vector differs from the one the agreeing identities sent");
        verifier::condemn(state, &std::sync::Arc::from(sub.as_str()), reason).await;
    }
}
