//! Standings, recomputation, quarantine and undo (see the [module docs](super)).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ternflow_core::protocol::{InvalidateEvent, JobState, ServerEvent};
use tokio::sync::Notify;

use super::Writer;
use crate::error::{Error, Result};
use crate::store::{Quarantine, Standing, Written};
use crate::tenants::Ctx;

/// How long a standing read from the store is reused by this server (ms): a quarantine decided
/// on another server reaches this one within it.
const STANDING_TTL_MS: u64 = 1_000;
/// Standings cached before the table is started afresh.
const MAX_CACHED: usize = 100_000;
/// Jobs (statuses read together) and cache keys (one `cache_get_many`) per step of an undo.
const UNDO_CHUNK: usize = 256;
/// Cache keys per `invalidate` event.
const KEYS_PER_EVENT: usize = 256;
/// The undo runs again this long after a quarantine (ms), for writes that were already past
/// the quarantine check when it began (on this server or another).
const SECOND_PASS_MS: u64 = 5_000;

/// Standings this server read, by (tenant, sub), with when it read them.
type Standings = HashMap<(Arc<str>, Arc<str>), (Standing, u64)>;

/// Per-server verification state: cached standings and the checks still running.
#[derive(Debug, Default)]
pub struct Verifier {
    standings: Mutex<Standings>,
    running: AtomicUsize,
    idle: Notify,
}

/// One result to recompute: what was written, from which text, under which model.
#[derive(Debug, Clone)]
pub struct Item {
    /// The job or cache entry.
    pub written: Written,
    /// The text it embeds.
    pub text: String,
    /// The vector the writer sent.
    pub vector: Vec<f32>,
}

impl Verifier {
    /// Waits until no background check is running (tests and benchmarks).
    pub async fn settle(&self) {
        loop {
            let idle = self.idle.notified();
            if self.running.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }

    fn cached(&self, tenant: &Arc<str>, sub: &Arc<str>, now: u64) -> Option<Standing> {
        let m = self.standings.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&(tenant.clone(), sub.clone()))
            .filter(|(_, at)| now.saturating_sub(*at) < STANDING_TTL_MS)
            .map(|(s, _)| s.clone())
    }

    fn remember(&self, tenant: &Arc<str>, sub: &Arc<str>, s: Standing, now: u64) {
        let mut m = self.standings.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= MAX_CACHED {
            m.clear();
        }
        m.insert((tenant.clone(), sub.clone()), (s, now));
    }

    fn forget(&self, tenant: &Arc<str>, sub: &Arc<str>) {
        let mut m = self.standings.lock().unwrap_or_else(|p| p.into_inner());
        m.remove(&(tenant.clone(), sub.clone()));
    }
}

/// The writer's standing (reused for [`STANDING_TTL_MS`]).
///
/// # Errors
/// The store's.
pub(crate) async fn standing(state: &Ctx, sub: &Arc<str>) -> Result<Standing> {
    let now = state.now();
    if let Some(s) = state.verifier.cached(&state.tenant, sub, now) {
        return Ok(s);
    }
    let s = state.store.standing(sub).await?;
    state.verifier.remember(&state.tenant, sub, s.clone(), now);
    Ok(s)
}

/// Refuses a quarantined writer.
///
/// # Errors
/// 403 `quarantined`; the store's.
pub(crate) async fn admit(state: &Ctx, sub: &Arc<str>) -> Result<()> {
    match standing(state, sub).await?.quarantine {
        None => Ok(()),
        Some(q) => {
            state.metrics.add(|c| &c.quarantined_refusals, 1);
            Err(Error::Quarantined(format!(
                "this worker identity is quarantined since {}: {}",
                q.at, q.reason
            )))
        }
    }
}

/// Whether `writer`'s results are checked before they are stored (it is on probation).
///
/// # Errors
/// The store's.
pub(crate) async fn on_probation(state: &Ctx, writer: &Writer) -> Result<bool> {
    let p = policy(state);
    Ok(p.enabled && standing(state, &writer.sub).await?.verified < p.probation)
}

/// The verification policy of the state's tenant.
pub(crate) fn policy(state: &Ctx) -> super::Policy {
    state.config.verify_policy(&state.tenant)
}

/// The dimension of `model`'s vectors when the server runs it.
pub(crate) fn model_dim(state: &Ctx, model: &str) -> Option<usize> {
    state
        .embed
        .as_ref()
        .filter(|b| b.model_id() == model && b.dim() > 0)
        .map(|b| b.dim())
}

/// Whether the server can recompute `model`'s vectors.
pub(crate) fn can_verify(state: &Ctx, model: &str) -> bool {
    policy(state).enabled && runs(state, model)
}

/// Whether the server runs `model` (it can recompute its vectors).
pub(crate) fn runs(state: &Ctx, model: &str) -> bool {
    state.embed.as_ref().is_some_and(|b| b.model_id() == model)
}

/// Draws whether one of a trusted writer's results is sampled for a check.
pub(crate) fn sampled(state: &Ctx) -> bool {
    let p = policy(state).sample;
    p > 0.0 && rand::random::<f64>() < p
}

/// Recomputes `items` (all of the server's model) and compares: `None` for each equal one, a
/// description of the first difference for each other one.
///
/// # Errors
/// 429 / 503 when the engine is busy or failed (nothing was decided).
pub(crate) async fn recompute(state: &Ctx, items: &[Item]) -> Result<Vec<Option<String>>> {
    let Some(b) = &state.embed else {
        return Ok(vec![None; items.len()]);
    };
    let texts: Vec<String> = items.iter().map(|i| i.text.clone()).collect();
    let want = b.embed_to_verify(texts).await?;
    let tol = policy(state).tolerance;
    Ok(items
        .iter()
        .zip(want)
        .map(|(item, want)| differs(&item.vector, &want, tol))
        .collect())
}

/// How `got` differs from `want` (`None`: equal, bit for bit when `tol` is 0).
pub fn differs(got: &[f32], want: &[f32], tol: f32) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} components, expected {}", got.len(), want.len()));
    }
    let (i, d) = got
        .iter()
        .zip(want)
        .map(|(a, b)| {
            if a.to_bits() == b.to_bits() {
                0.0
            } else {
                (a - b).abs().max(f32::MIN_POSITIVE)
            }
        })
        .enumerate()
        .fold((0, 0.0f32), |m, (i, d)| if d > m.1 { (i, d) } else { m });
    let cos: f32 = got.iter().zip(want).map(|(a, b)| a * b).sum();
    (d > tol).then(|| format!("component {i} differs by {d:e} (cosine {cos:.6})"))
}

/// Counts verified results of `writer`.
pub(crate) async fn credit(state: &Ctx, writer: &Writer, n: u64) {
    if n == 0 {
        return;
    }
    state.metrics.add(|c| &c.results_verified, n);
    match state.store.add_verified(&writer.sub, n).await {
        Ok(v) => {
            let mut s = standing(state, &writer.sub).await.unwrap_or_default();
            s.verified = v;
            state
                .verifier
                .remember(&state.tenant, &writer.sub, s, state.now());
        }
        Err(e) => tracing::warn!(error = %e, "counting verified results"),
    }
}

/// A result of `sub` did not verify: quarantines it and undoes everything it wrote.
pub(crate) async fn condemn(state: &Ctx, sub: &Arc<str>, reason: String) {
    let now = state.now();
    state.metrics.add(|c| &c.results_mismatched, 1);
    let q = Quarantine { at: now, reason };
    let first = match state.store.quarantine(sub, q.clone()).await {
        Ok(f) => f,
        Err(e) => {
            tracing::error!(error = %e, sub = %sub, "quarantine could not be recorded");
            return;
        }
    };
    state.verifier.remember(
        &state.tenant,
        sub,
        Standing {
            verified: 0,
            quarantine: Some(q.clone()),
        },
        now,
    );
    if first {
        state.metrics.add(|c| &c.quarantines, 1);
        state.series.alert(
            now,
            "quarantine",
            format!(
                "worker identity {sub} of tenant {} quarantined: {}",
                state.tenant, q.reason
            ),
        );
        tracing::warn!(target: "ternflow::audit", tenant = %state.tenant, sub = %sub,
            reason = %q.reason, "quarantined");
    }
    let (jobs, keys) = undo(state, sub).await;
    tracing::warn!(target: "ternflow::audit", tenant = %state.tenant, sub = %sub,
        requeued = jobs, cache_entries = keys, "undid a quarantined writer's work");
    // Writes already past the check when this began are undone by a second pass.
    let (state, sub) = (state.clone(), sub.clone());
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(SECOND_PASS_MS)).await;
        let (jobs, keys) = undo(&state, &sub).await;
        if jobs + keys > 0 {
            tracing::warn!(target: "ternflow::audit", tenant = %state.tenant, sub = %sub,
                requeued = jobs, cache_entries = keys, "second undo pass");
        }
    });
}

/// Re-queues every finished job whose result `sub` wrote and deletes every cache entry it
/// wrote (telling browsers with an `invalidate` event); returns how many of each.
pub(crate) async fn undo(state: &Ctx, sub: &str) -> (usize, usize) {
    let written = match state.store.written_by(sub).await {
        Ok(w) => w,
        Err(e) => {
            tracing::error!(error = %e, sub = %sub, "reading a quarantined writer's provenance");
            return (0, 0);
        }
    };
    let now = state.now();
    let (mut job_ids, mut cache_keys) = (Vec::new(), Vec::new());
    for w in written {
        match w {
            Written::Job(id) => job_ids.push(id),
            Written::Cache(key) => cache_keys.push(key),
        }
    }
    let by_sub =
        |b: &Option<ternflow_core::protocol::Provenance>| b.as_ref().is_some_and(|b| b.sub == sub);
    // Only what still carries its name: an honest writer may have replaced an entry since.
    let mut jobs = Vec::new();
    for chunk in job_ids.chunks(UNDO_CHUNK) {
        let found = futures_util::future::join_all(chunk.iter().map(|id| state.store.status(id)));
        for (id, s) in chunk.iter().zip(found.await) {
            if let Ok(Some(s)) = s {
                if matches!(&s.state, JobState::Done { result, .. } if by_sub(&result.by)) {
                    jobs.push(id.clone());
                }
            }
        }
    }
    let mut keys = Vec::new();
    for chunk in cache_keys.chunks(UNDO_CHUNK) {
        let Ok(entries) = state.store.cache_get_many(chunk, now).await else {
            continue;
        };
        for (key, e) in chunk.iter().zip(entries) {
            if e.is_some_and(|e| by_sub(&e.by))
                && state.store.cache_delete(key).await.unwrap_or(false)
            {
                keys.push(key.clone());
            }
        }
    }
    let requeued = if jobs.is_empty() {
        Vec::new()
    } else {
        state
            .store
            .requeue_done(&jobs, now)
            .await
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "re-queueing a quarantined writer's jobs");
                Vec::new()
            })
    };
    state
        .metrics
        .add(|c| &c.undone_results, requeued.len() as u64);
    state
        .metrics
        .add(|c| &c.undone_cache_entries, keys.len() as u64);
    for chunk in keys.chunks(KEYS_PER_EVENT) {
        let ev = ServerEvent::Invalidate(InvalidateEvent {
            keys: chunk.to_vec(),
        });
        if let Err(e) = state.store.publish(ev).await {
            tracing::warn!(error = %e, "publish invalidate event");
        }
    }
    if !requeued.is_empty() {
        crate::queue::publish_depth(state).await;
        state.hub.wake_all();
    }
    (requeued.len(), keys.len())
}

/// Checks `items` of a trusted `writer` after they were stored, off the request's path.
pub(crate) fn check_later(state: &Ctx, writer: &Writer, items: Vec<Item>) {
    if items.is_empty() {
        return;
    }
    state.verifier.running.fetch_add(1, Ordering::SeqCst);
    let (state, writer) = (state.clone(), writer.clone());
    tokio::spawn(async move {
        check_stored(&state, &writer, &items).await;
        if state.verifier.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            state.verifier.idle.notify_waiters();
        }
    });
}

async fn check_stored(state: &Ctx, writer: &Writer, items: &[Item]) {
    // The engine may be busy with backend requests: a few tries, then the sample is dropped.
    for attempt in 0..5u32 {
        match recompute(state, items).await {
            Ok(diffs) => {
                let bad = items
                    .iter()
                    .zip(&diffs)
                    .find_map(|(i, d)| d.as_ref().map(|d| (i, d)));
                match bad {
                    Some((item, d)) => {
                        let reason = format!("{}: {d}", item.written.encode());
                        condemn(state, &writer.sub, reason).await;
                    }
                    None => credit(state, writer, items.len() as u64).await,
                }
                return;
            }
            Err(e) if e.is_retryable() => {
                tokio::time::sleep(std::time::Duration::from_millis(50 << attempt)).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "sampled verification failed");
                return;
            }
        }
    }
    tracing::warn!("sampled verification dropped: the engine stayed busy");
}

/// Lifts `sub`'s quarantine (admin); `false` when it was not quarantined.
///
/// # Errors
/// The store's.
pub(crate) async fn lift(state: &Ctx, sub: &str) -> Result<bool> {
    let lifted = state.store.lift_quarantine(sub).await?;
    state.verifier.forget(&state.tenant, &Arc::from(sub));
    if lifted {
        state.metrics.add(|c| &c.quarantines_lifted, 1);
        tracing::warn!(target: "ternflow::audit", tenant = %state.tenant, sub = %sub,
            "quarantine lifted");
    }
    Ok(lifted)
}
