//! The in-memory store: the whole state in memory, nothing on disk (tests, benchmarks, and a
//! reference for the other stores' semantics). Same behaviour as [`super::sqlite::SqliteStore`]
//! and [`super::redis::RedisStore`]: all three pass the [conformance suite](super::conformance).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use ternflow_core::keys;
use ternflow_core::protocol::{
    Attempt, CacheEntry, ClaimedJob, DlqEntry, Enqueued, JobError, JobResult, JobSpec, JobState,
    JobStatus, Lease, LockGrant, NackResponse, QueueDepth, ServerEvent,
};
use ternflow_core::ErrorCode;
use tokio::sync::broadcast;

use super::local_events::LocalEvents;
use super::{
    cap_error, new_token, push_history, AckOutcome, CacheStore, Claimed, EventBus, Fenced,
    IntegrityStore, JobRecord, LockOutcome, LockStore, NumberedEvent, PutOutcome, Quarantine,
    QueueStore, Standing, Written,
};
use crate::error::Result;

#[derive(Debug, Clone)]
struct Job {
    id: String,
    text: String,
    model_id: String,
    priority: i32,
    meta: Option<serde_json::Value>,
    trace_id: String,
    seq: u64,
    attempt: u32,
    history: Vec<Attempt>,
    state: St,
}

#[derive(Debug, Clone)]
enum St {
    Ready,
    Delayed {
        at: u64,
    },
    Leased {
        token: String,
        fence: u64,
        expires_at: u64,
        worker: String,
        leased_at: u64,
    },
    Done {
        result: JobResult,
        token: String,
        done_at: u64,
    },
    Dead {
        error: JobError,
        dead_at: u64,
    },
}

#[derive(Debug, Default)]
struct Inner {
    jobs: HashMap<String, Job>,
    ready: BTreeSet<(i64, u64, String)>,
    delayed: BTreeSet<(u64, u64, String)>,
    leased: BTreeSet<(u64, String)>,
    dead: BTreeSet<(u64, u64, String)>,
    done: BTreeSet<(u64, String)>,
    done_retention_ms: Option<u64>,
    cache: HashMap<String, CacheEntry>,
    locks: HashMap<String, LockGrant>,
    seq: u64,
    fence: u64,
    standing: HashMap<String, Standing>,
    written: HashMap<String, BTreeSet<Written>>,
    proposals: HashMap<String, std::collections::BTreeMap<String, String>>,
    usage: std::collections::BTreeMap<String, u64>,
}

impl Inner {
    fn unindex(&mut self, j: &Job) {
        match &j.state {
            St::Ready => {
                self.ready
                    .remove(&(-(j.priority as i64), j.seq, j.id.clone()));
            }
            St::Delayed { at } => {
                self.delayed.remove(&(*at, j.seq, j.id.clone()));
            }
            St::Leased { expires_at, .. } => {
                self.leased.remove(&(*expires_at, j.id.clone()));
            }
            St::Dead { dead_at, .. } => {
                self.dead.remove(&(*dead_at, j.seq, j.id.clone()));
            }
            St::Done { done_at, .. } => {
                self.done.remove(&(*done_at, j.id.clone()));
            }
        }
    }

    fn index(&mut self, j: &Job) {
        match &j.state {
            St::Ready => {
                self.ready
                    .insert((-(j.priority as i64), j.seq, j.id.clone()));
            }
            St::Delayed { at } => {
                self.delayed.insert((*at, j.seq, j.id.clone()));
            }
            St::Leased { expires_at, .. } => {
                self.leased.insert((*expires_at, j.id.clone()));
            }
            St::Dead { dead_at, .. } => {
                self.dead.insert((*dead_at, j.seq, j.id.clone()));
            }
            St::Done { done_at, .. } => {
                self.done.insert((*done_at, j.id.clone()));
            }
        }
    }

    /// Forgets finished jobs older than the retention (their ids may be enqueued again).
    fn sweep_done(&mut self, now: u64) {
        let Some(keep) = self.done_retention_ms else {
            return;
        };
        while let Some((at, id)) = self.done.first().cloned() {
            if at.saturating_add(keep) > now {
                break;
            }
            self.done.pop_first();
            self.jobs.remove(&id);
            self.forget_written(&Written::Job(id));
        }
    }

    /// Takes `item` out of every writer's provenance index (it is gone: nothing to undo).
    fn forget_written(&mut self, item: &Written) {
        self.written.retain(|_, items| {
            items.remove(item);
            !items.is_empty()
        });
    }

    /// Stores `j`, re-indexing it.
    fn put_job(&mut self, j: Job) {
        if let Some(old) = self.jobs.remove(&j.id) {
            self.unindex(&old);
        }
        self.index(&j);
        self.jobs.insert(j.id.clone(), j);
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn next_fence(&mut self) -> u64 {
        self.fence += 1;
        self.fence
    }

    fn expire_lease(&mut self, mut j: Job, max_attempts: u32, now: u64, out: &mut Claimed) {
        if let St::Leased {
            worker, leased_at, ..
        } = &j.state
        {
            let error = JobError {
                code: ErrorCode::LeaseExpired.as_str().to_owned(),
                message: "the lease expired before an ack or nack".to_owned(),
                retryable: true,
            };
            let attempt = Attempt {
                attempt: j.attempt,
                worker: worker.clone(),
                leased_at: *leased_at,
                ended_at: now,
                error: error.clone(),
            };
            push_history(&mut j.history, attempt);
            if j.attempt >= max_attempts {
                out.dead.push(j.id.clone());
                j.state = St::Dead {
                    error,
                    dead_at: now,
                };
            } else {
                out.expired.push(j.id.clone());
                j.seq = self.next_seq();
                j.state = St::Ready;
            }
            self.put_job(j);
        }
    }
}

/// The in-memory store. See the [module docs](self).
#[derive(Debug)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    events: LocalEvents,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::with_inner(Inner::default())
    }

    /// Forgets finished jobs `ms` after their ack (checked at each claim), so the store does not
    /// grow without bound; a forgotten id may be enqueued again. Default: keep them forever
    /// (duplicates of a done job collapse forever).
    pub fn with_done_retention(self, ms: u64) -> Self {
        self.lock().done_retention_ms = Some(ms);
        self
    }

    fn with_inner(inner: Inner) -> Self {
        MemoryStore {
            inner: Mutex::new(inner),
            events: LocalEvents::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-applied change visible to callers
        // that matters more than refusing all service, so recover the guard.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn status_of(j: &Job) -> JobStatus {
    let state = match &j.state {
        St::Ready => JobState::Queued { available_at: 0 },
        St::Delayed { at } => JobState::Queued { available_at: *at },
        St::Leased {
            expires_at, worker, ..
        } => JobState::Leased {
            expires_at: *expires_at,
            worker: worker.clone(),
        },
        St::Done { result, .. } => JobState::Done {
            result: result.clone(),
            info: None,
        },
        St::Dead { error, .. } => JobState::Dead {
            error: error.clone(),
            history: j.history.clone(),
        },
    };
    JobStatus {
        id: j.id.clone(),
        attempt: j.attempt,
        state,
    }
}

#[async_trait]
impl QueueStore for MemoryStore {
    async fn enqueue(&self, jobs: Vec<JobRecord>, now: u64) -> Result<Vec<Enqueued>> {
        let mut g = self.lock();
        let mut out = Vec::with_capacity(jobs.len());
        for r in jobs {
            if g.jobs.contains_key(&r.id) {
                out.push(Enqueued {
                    id: r.id,
                    new: false,
                });
                continue;
            }
            let seq = g.next_seq();
            let state = if r.available_at > now {
                St::Delayed { at: r.available_at }
            } else {
                St::Ready
            };
            out.push(Enqueued {
                id: r.id.clone(),
                new: true,
            });
            g.put_job(Job {
                id: r.id,
                text: r.text,
                model_id: r.model_id,
                priority: r.priority,
                meta: r.meta,
                trace_id: r.trace_id,
                seq,
                attempt: 0,
                history: Vec::new(),
                state,
            });
        }
        Ok(out)
    }

    async fn claim(
        &self,
        worker: &str,
        max: u32,
        lease_ms: u64,
        max_attempts: u32,
        now: u64,
    ) -> Result<Claimed> {
        let mut g = self.lock();
        let mut out = Claimed::default();
        g.sweep_done(now);
        // Due delayed jobs become ready.
        while let Some((at, _, id)) = g.delayed.first().cloned() {
            if at > now {
                break;
            }
            if let Some(mut j) = g.jobs.get(&id).cloned() {
                j.seq = g.next_seq();
                j.state = St::Ready;
                g.put_job(j);
            } else {
                g.delayed.pop_first();
            }
        }
        // Expired leases are re-queued or dead-lettered.
        while let Some((exp, id)) = g.leased.first().cloned() {
            if exp > now {
                break;
            }
            match g.jobs.get(&id).cloned() {
                Some(j) => g.expire_lease(j, max_attempts, now, &mut out),
                None => {
                    g.leased.pop_first();
                }
            }
        }
        while out.jobs.len() < max as usize {
            let Some((_, _, id)) = g.ready.first().cloned() else {
                break;
            };
            let Some(mut j) = g.jobs.get(&id).cloned() else {
                g.ready.pop_first();
                continue;
            };
            let fence = g.next_fence();
            let token = new_token();
            let expires_at = now + lease_ms;
            j.attempt += 1;
            j.state = St::Leased {
                token: token.clone(),
                fence,
                expires_at,
                worker: worker.to_owned(),
                leased_at: now,
            };
            out.jobs.push(ClaimedJob {
                id: j.id.clone(),
                text: j.text.clone(),
                model_id: j.model_id.clone(),
                attempt: j.attempt,
                traceparent: j.trace_id.clone(),
                lease: Lease {
                    token,
                    fence,
                    expires_at,
                },
                meta: j.meta.clone(),
                cache_checked: false,
                cached: None,
                resolved: false,
            });
            g.put_job(j);
        }
        Ok(out)
    }

    async fn heartbeat(
        &self,
        id: &str,
        token: &str,
        lease_ms: u64,
        now: u64,
    ) -> Result<Option<Lease>> {
        let mut g = self.lock();
        let Some(mut j) = g.jobs.get(id).cloned() else {
            return Ok(None);
        };
        let lease = match &mut j.state {
            St::Leased {
                token: t,
                fence,
                expires_at,
                ..
            } if t == token => {
                *expires_at = now + lease_ms;
                Lease {
                    token: t.clone(),
                    fence: *fence,
                    expires_at: *expires_at,
                }
            }
            _ => return Ok(None),
        };
        g.put_job(j);
        Ok(Some(lease))
    }

    async fn ack(&self, id: &str, token: &str, result: JobResult, now: u64) -> Result<AckOutcome> {
        let mut g = self.lock();
        let Some(mut j) = g.jobs.get(id).cloned() else {
            return Ok(AckOutcome::Missing);
        };
        let fence = match &j.state {
            St::Leased {
                token: t, fence, ..
            } if t == token => *fence,
            St::Done { token: t, .. } if t == token => return Ok(AckOutcome::Repeated),
            _ => return Ok(AckOutcome::Stale),
        };
        if !j.model_id.is_empty() && j.model_id != result.model_id {
            return Ok(AckOutcome::WrongModel {
                expected: j.model_id,
            });
        }
        let text_hash = keys::text_hash(&j.text);
        j.state = St::Done {
            result,
            token: token.to_owned(),
            done_at: now,
        };
        g.put_job(j);
        Ok(AckOutcome::Done { fence, text_hash })
    }

    async fn nack(
        &self,
        id: &str,
        token: &str,
        error: JobError,
        retry_at: u64,
        max_attempts: u32,
        now: u64,
    ) -> Result<Option<NackResponse>> {
        let mut g = self.lock();
        let Some(mut j) = g.jobs.get(id).cloned() else {
            return Ok(None);
        };
        let (worker, leased_at) = match &j.state {
            St::Leased {
                token: t,
                worker,
                leased_at,
                ..
            } if t == token => (worker.clone(), *leased_at),
            _ => return Ok(None),
        };
        let error = cap_error(error);
        let attempt = Attempt {
            attempt: j.attempt,
            worker,
            leased_at,
            ended_at: now,
            error: error.clone(),
        };
        push_history(&mut j.history, attempt);
        let resp = if !error.retryable || j.attempt >= max_attempts {
            j.state = St::Dead {
                error,
                dead_at: now,
            };
            NackResponse::Dead
        } else {
            j.state = St::Delayed { at: retry_at };
            NackResponse::Retry {
                available_at: retry_at,
            }
        };
        g.put_job(j);
        Ok(Some(resp))
    }

    async fn release(&self, id: &str, token: &str, _now: u64) -> Result<bool> {
        let mut g = self.lock();
        let Some(mut j) = g.jobs.get(id).cloned() else {
            return Ok(false);
        };
        match &j.state {
            St::Leased { token: t, .. } if t == token => {}
            _ => return Ok(false),
        }
        j.attempt = j.attempt.saturating_sub(1);
        j.seq = g.next_seq();
        j.state = St::Ready;
        g.put_job(j);
        Ok(true)
    }

    async fn status(&self, id: &str) -> Result<Option<JobStatus>> {
        Ok(self.lock().jobs.get(id).map(status_of))
    }

    async fn dlq(&self, limit: usize) -> Result<Vec<DlqEntry>> {
        let g = self.lock();
        Ok(g.dead
            .iter()
            .take(limit)
            .filter_map(|(_, _, id)| g.jobs.get(id))
            .filter_map(|j| match &j.state {
                St::Dead { error, dead_at } => Some(DlqEntry {
                    job: JobSpec {
                        id: j.id.clone(),
                        text: j.text.clone(),
                        model_id: j.model_id.clone(),
                        priority: j.priority,
                        meta: j.meta.clone(),
                    },
                    error: error.clone(),
                    history: j.history.clone(),
                    dead_at: *dead_at,
                }),
                _ => None,
            })
            .collect())
    }

    async fn redrive(&self, id: &str, _now: u64) -> Result<bool> {
        let mut g = self.lock();
        let Some(mut j) = g.jobs.get(id).cloned() else {
            return Ok(false);
        };
        if !matches!(j.state, St::Dead { .. }) {
            return Ok(false);
        }
        j.attempt = 0;
        j.seq = g.next_seq();
        j.state = St::Ready;
        g.put_job(j);
        Ok(true)
    }

    async fn probe_write(&self, _now: u64) -> Result<()> {
        Ok(())
    }

    async fn depth(&self, now: u64) -> Result<QueueDepth> {
        let g = self.lock();
        let due = g.delayed.iter().take_while(|(at, _, _)| *at <= now).count() as u64;
        Ok(QueueDepth {
            ready: g.ready.len() as u64 + due,
            delayed: g.delayed.len() as u64 - due,
            leased: g.leased.len() as u64,
            dead: g.dead.len() as u64,
        })
    }
}

#[async_trait]
impl CacheStore for MemoryStore {
    async fn cache_get(&self, key: &str, now: u64) -> Result<Option<CacheEntry>> {
        let g = self.lock();
        Ok(g.cache.get(key).filter(|e| e.expires_at > now).cloned())
    }

    async fn cache_put(
        &self,
        key: &str,
        entry: CacheEntry,
        by: Fenced,
        now: u64,
    ) -> Result<PutOutcome> {
        let mut g = self.lock();
        if by == Fenced::ByLock
            && !g
                .locks
                .get(key)
                .is_some_and(|l| l.expires_at > now && l.fence == entry.fence)
        {
            return Ok(PutOutcome::Unfenced);
        }
        let live = g.cache.get(key).filter(|e| e.expires_at > now).cloned();
        if let Some(cur) = &live {
            if cur.fence > entry.fence {
                return Ok(PutOutcome::Stale(cur.clone()));
            }
        }
        g.cache.insert(key.to_owned(), entry);
        Ok(PutOutcome::Stored {
            replaced: live.is_some(),
        })
    }

    async fn cache_delete(&self, key: &str) -> Result<bool> {
        let mut g = self.lock();
        let gone = g.cache.remove(key).is_some();
        if gone {
            g.forget_written(&Written::Cache(key.to_owned()));
        }
        Ok(gone)
    }

    async fn cache_bytes(&self, now: u64) -> Result<u64> {
        Ok(self
            .lock()
            .cache
            .iter()
            .filter(|(_, e)| e.expires_at > now)
            .map(|(k, e)| crate::quota::entry_bytes(k, e.vector.0.len()))
            .sum())
    }

    async fn sweep(&self, now: u64, limit: usize) -> Result<u64> {
        let mut g = self.lock();
        let expired_entries: Vec<String> = g
            .cache
            .iter()
            .filter(|(_, e)| e.expires_at <= now)
            .map(|(k, _)| k.clone())
            .take(limit)
            .collect();
        let expired_locks: Vec<String> = g
            .locks
            .iter()
            .filter(|(_, l)| l.expires_at <= now)
            .map(|(k, _)| k.clone())
            .take(limit)
            .collect();
        let n = (expired_entries.len() + expired_locks.len()) as u64;
        for k in expired_entries {
            g.cache.remove(&k);
            g.forget_written(&Written::Cache(k));
        }
        for k in expired_locks {
            g.locks.remove(&k);
        }
        Ok(n)
    }
}

#[async_trait]
impl LockStore for MemoryStore {
    async fn lock_acquire(&self, key: &str, ttl_ms: u64, now: u64) -> Result<LockOutcome> {
        let mut g = self.lock();
        if let Some(cur) = g.locks.get(key) {
            if cur.expires_at > now {
                return Ok(LockOutcome::Held {
                    expires_at: cur.expires_at,
                });
            }
        }
        let grant = LockGrant {
            token: new_token(),
            fence: g.next_fence(),
            expires_at: now + ttl_ms,
        };
        g.locks.insert(key.to_owned(), grant.clone());
        Ok(LockOutcome::Granted(grant))
    }

    async fn lock_renew(
        &self,
        key: &str,
        token: &str,
        ttl_ms: u64,
        now: u64,
    ) -> Result<Option<LockGrant>> {
        let mut g = self.lock();
        match g.locks.get_mut(key) {
            Some(cur) if cur.token == token && cur.expires_at > now => {
                cur.expires_at = now + ttl_ms;
                Ok(Some(cur.clone()))
            }
            _ => Ok(None),
        }
    }

    async fn lock_release(&self, key: &str, token: &str) -> Result<bool> {
        let mut g = self.lock();
        if g.locks.get(key).is_some_and(|l| l.token == token) {
            g.locks.remove(key);
            return Ok(true);
        }
        Ok(false)
    }
}

#[async_trait]
impl EventBus for MemoryStore {
    async fn publish(&self, event: ServerEvent) -> Result<u64> {
        Ok(self.events.publish(event))
    }

    fn subscribe(&self) -> broadcast::Receiver<NumberedEvent> {
        self.events.subscribe()
    }

    fn last_event_id(&self) -> u64 {
        self.events.last_id()
    }
}

#[async_trait]
impl super::ResultScan for MemoryStore {
    async fn scan_done(&self, cursor: &str, limit: usize) -> Result<super::DonePage> {
        // The cursor is the last (done_at, id) returned: the `done` index's order.
        let after = cursor
            .split_once(':')
            .and_then(|(t, id)| Some((t.parse::<u64>().ok()?, id.to_owned())));
        let g = self.lock();
        let range: Box<dyn Iterator<Item = &(u64, String)>> = match &after {
            Some(a) => Box::new(g.done.range((
                std::ops::Bound::Excluded(a.clone()),
                std::ops::Bound::Unbounded,
            ))),
            None => Box::new(g.done.iter()),
        };
        let (mut jobs, mut last, mut seen) = (Vec::new(), None, 0);
        for (at, id) in range.take(limit.max(1)) {
            seen += 1;
            last = Some(format!("{at}:{id}"));
            if let Some(Job {
                text,
                state: St::Done { result, .. },
                ..
            }) = g.jobs.get(id)
            {
                jobs.push(super::DoneJob {
                    id: id.clone(),
                    text: text.clone(),
                    result: result.clone(),
                });
            }
        }
        let next = if seen < limit.max(1) { None } else { last };
        Ok(super::DonePage { jobs, next })
    }
}

/// One process's store: the server's own buckets are its budgets.
impl super::BudgetStore for MemoryStore {}

#[async_trait]
impl super::UsageStore for MemoryStore {
    async fn add_usage(&self, deltas: &[(String, u64)]) -> Result<()> {
        let mut g = self.lock();
        for (name, n) in deltas {
            *g.usage.entry(name.clone()).or_default() += n;
        }
        Ok(())
    }

    async fn usage(&self) -> Result<std::collections::BTreeMap<String, u64>> {
        Ok(self.lock().usage.clone())
    }
}

#[async_trait]
impl IntegrityStore for MemoryStore {
    async fn standing(&self, sub: &str) -> Result<Standing> {
        Ok(self.lock().standing.get(sub).cloned().unwrap_or_default())
    }

    async fn add_verified(&self, sub: &str, n: u64) -> Result<u64> {
        let mut g = self.lock();
        let s = g.standing.entry(sub.to_owned()).or_default();
        s.verified += n;
        Ok(s.verified)
    }

    async fn quarantine(&self, sub: &str, q: Quarantine) -> Result<bool> {
        let mut g = self.lock();
        let s = g.standing.entry(sub.to_owned()).or_default();
        if s.quarantine.is_some() {
            return Ok(false);
        }
        s.quarantine = Some(q);
        Ok(true)
    }

    async fn lift_quarantine(&self, sub: &str) -> Result<bool> {
        let mut g = self.lock();
        match g.standing.get_mut(sub) {
            Some(s) if s.quarantine.is_some() => {
                *s = Standing::default();
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn quarantined(&self, limit: usize) -> Result<Vec<(String, Quarantine)>> {
        let g = self.lock();
        let mut v: Vec<(String, Quarantine)> = g
            .standing
            .iter()
            .filter_map(|(sub, s)| Some((sub.clone(), s.quarantine.clone()?)))
            .collect();
        v.sort_by(|a, b| (a.1.at, &a.0).cmp(&(b.1.at, &b.0)));
        v.truncate(limit);
        Ok(v)
    }

    async fn note_written(&self, sub: &str, items: Vec<Written>) -> Result<()> {
        self.lock()
            .written
            .entry(sub.to_owned())
            .or_default()
            .extend(items);
        Ok(())
    }

    async fn written_by(&self, sub: &str) -> Result<Vec<Written>> {
        let g = self.lock();
        let mut v: Vec<Written> = g
            .written
            .get(sub)
            .map(|w| w.iter().cloned().collect())
            .unwrap_or_default();
        // In the order the other stores give: by the encoded item.
        v.sort_by_cached_key(Written::encode);
        Ok(v)
    }

    async fn job_inputs(&self, ids: &[String]) -> Result<Vec<Option<(String, String)>>> {
        let g = self.lock();
        Ok(ids
            .iter()
            .map(|id| g.jobs.get(id).map(|j| (j.text.clone(), j.model_id.clone())))
            .collect())
    }

    async fn propose(&self, id: &str, sub: &str, digest: &str) -> Result<Vec<(String, String)>> {
        let mut g = self.lock();
        let p = g.proposals.entry(id.to_owned()).or_default();
        p.insert(sub.to_owned(), digest.to_owned());
        Ok(p.iter().map(|(s, d)| (s.clone(), d.clone())).collect())
    }

    async fn clear_proposals(&self, id: &str) -> Result<()> {
        self.lock().proposals.remove(id);
        Ok(())
    }

    async fn requeue_done(&self, ids: &[String], _now: u64) -> Result<Vec<String>> {
        let mut g = self.lock();
        let mut out = Vec::new();
        for id in ids {
            let Some(mut j) = g.jobs.get(id).cloned() else {
                continue;
            };
            if !matches!(j.state, St::Done { .. }) {
                continue;
            }
            j.seq = g.next_seq();
            j.state = St::Ready;
            g.put_job(j);
            out.push(id.clone());
        }
        Ok(out)
    }
}
