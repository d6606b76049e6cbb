//! The in-memory store: the whole state in memory, nothing on disk (tests, benchmarks, and a
//! reference for the other stores' semantics). Same behaviour as [`super::sqlite::SqliteStore`]
//! and [`super::redis::RedisStore`]: all three pass the [conformance suite](super::conformance).
//!
//! This file holds the state (`Inner`: the jobs and their indexes, the cache, the locks, the
//! records), the store, its events, result scan, budgets and usage; beside it one capability
//! each: `queue` ([`QueueStore`]), `cache` ([`CacheStore`]), `locks` ([`LockStore`]) and
//! `integrity` ([`IntegrityStore`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use ternflow_core::protocol::{
    Attempt, CacheEntry, JobError, JobResult, JobState, JobStatus, LockGrant, ServerEvent,
};
use ternflow_core::ErrorCode;
use tokio::sync::broadcast;

use super::local_events::LocalEvents;
use super::{push_history, Claimed, EventBus, NumberedEvent, Standing, Written};
use crate::error::Result;

mod cache;
mod integrity;
mod locks;
mod queue;

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
    /// Releases so far (the first few do not count the attempt).
    releases: u32,
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
        sub: Option<String>,
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

    fn expire_lease(&mut self, j: Job, max_attempts: u32, now: u64, out: &mut Claimed) {
        let error = JobError {
            code: ErrorCode::LeaseExpired.as_str().to_owned(),
            message: "the lease expired before an ack or nack".to_owned(),
            retryable: true,
        };
        let id = j.id.clone();
        match self.end_delivery(j, error, max_attempts, now) {
            Some(true) => out.dead.push(id),
            Some(false) => out.expired.push(id),
            None => {}
        }
    }

    /// Ends a leased job's delivery as an attempt that counts (an expired lease, a release past
    /// the free ones): the attempt joins its history with `error`, and it is dead-lettered on its
    /// `max_attempts`-th attempt, else ready again. `Some(true)` when dead; `None` when not leased.
    fn end_delivery(
        &mut self,
        mut j: Job,
        error: JobError,
        max_attempts: u32,
        now: u64,
    ) -> Option<bool> {
        push_attempt(&mut j, error.clone(), now)?;
        let dead = j.attempt >= max_attempts;
        if dead {
            j.state = St::Dead {
                error,
                dead_at: now,
            };
        } else {
            j.seq = self.next_seq();
            j.state = St::Ready;
        }
        self.put_job(j);
        Some(dead)
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

/// Adds to a leased job's history the entry of its delivery, ended at `now` with `error` (who
/// held it, its attempt, when it began); `None` when it is not leased.
fn push_attempt(j: &mut Job, error: JobError, now: u64) -> Option<()> {
    let St::Leased {
        worker,
        sub,
        leased_at,
        ..
    } = &j.state
    else {
        return None;
    };
    let attempt = Attempt {
        attempt: j.attempt,
        worker: worker.clone(),
        sub: sub.clone(),
        leased_at: *leased_at,
        ended_at: now,
        error,
    };
    push_history(&mut j.history, attempt);
    Some(())
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
