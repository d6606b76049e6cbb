//! The server side in memory ([`MemServer`]): a queue with leases, a fenced cache and locks,
//! with switches a test flips to inject failures and counters it reads.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

use super::FakeClock;
use crate::error::{Error, Result};
use crate::keys::{cache_key, job_id};
use crate::ports::{Clock, JobSource, Locks, PutOutcome, RemoteCache};
use crate::protocol::{
    AckRequest, CacheEntry, CachePut, ClaimedJob, JobError, JobResult, Lease, LockGrant,
    NackRequest, NackResponse, ResultSource,
};

/// The server side in memory: queue with leases, fenced cache, locks. Cloning shares it, so two
/// workers can run against one "server".
#[derive(Debug, Clone)]
pub struct MemServer {
    inner: Rc<RefCell<ServerState>>,
    clock: FakeClock,
    /// When set, every call fails with [`Error::Unreachable`].
    pub down: Rc<Cell<bool>>,
    /// `GET`s of the remote cache served.
    pub cache_gets: Rc<Cell<u32>>,
    /// `(n, key, entry)`: right after answering the `n`-th cache `GET`, another worker finishes
    /// `key`: its entry appears and its lock is released (a holder that finishes between a
    /// waiter's cache check and its next lock attempt).
    pub finish_after_get: Rc<RefCell<Option<(u32, String, CacheEntry)>>>,
    /// A claim's answer takes this long to arrive after its jobs were leased (a long poll whose
    /// response is still on the way).
    pub claim_reply_ms: Rc<Cell<u64>>,
    /// Batch ack requests served.
    pub ack_batches: Rc<Cell<u32>>,
    /// The next this many batch ack requests fail with a 503 (before anything is applied).
    pub fail_ack_batches: Rc<Cell<u32>>,
    /// Acks applied per job id (a job acked twice shows 2).
    pub ack_counts: Rc<RefCell<BTreeMap<String, u32>>>,
    /// The timing of every ack received.
    pub ack_timings: Rc<RefCell<Vec<AckTiming>>>,
    /// Ack requests received, one per job (single or in a batch; repeats included).
    pub acks_received: Rc<Cell<u32>>,
    /// Heartbeat requests served: one-lease requests, and batch requests.
    pub heartbeat_calls: Rc<Cell<u32>>,
    /// Batch heartbeat requests served.
    pub heartbeat_batches: Rc<Cell<u32>>,
    /// Nack requests served one job at a time.
    pub nack_calls: Rc<Cell<u32>>,
    /// Batch nack requests served.
    pub nack_batches: Rc<Cell<u32>>,
    /// Finish a claimed job whose text is in the cache at claim time (as `ternflow serve`
    /// does): the claim marks it done, flagged `resolved`, and counts it in `ack_counts`.
    pub resolve_cached: Rc<Cell<bool>>,
}

/// `(job id, the traceparent the ack was sent with ("" in a batch), its timing)`.
pub type AckTiming = (String, String, Option<crate::protocol::JobTiming>);

#[derive(Debug, Default)]
struct ServerState {
    ready: VecDeque<String>,
    jobs: BTreeMap<String, MemJob>,
    fence: u64,
    cache: BTreeMap<String, CacheEntry>,
    locks: BTreeMap<String, LockGrant>,
    dead: Vec<(String, JobError)>,
    done: BTreeMap<String, JobResult>,
    lease_ms: u64,
    max_attempts: u32,
    tokens: u64,
}

#[derive(Debug, Clone)]
struct MemJob {
    text: String,
    model_id: String,
    attempt: u32,
    lease: Option<Lease>,
}

impl MemServer {
    /// A server with `lease_ms` leases and `max_attempts` deliveries before dead-lettering.
    pub fn new(clock: FakeClock, lease_ms: u64, max_attempts: u32) -> Self {
        MemServer {
            inner: Rc::new(RefCell::new(ServerState {
                lease_ms,
                max_attempts,
                ..ServerState::default()
            })),
            clock,
            down: Rc::default(),
            cache_gets: Rc::default(),
            finish_after_get: Rc::default(),
            claim_reply_ms: Rc::default(),
            ack_batches: Rc::default(),
            fail_ack_batches: Rc::default(),
            ack_counts: Rc::default(),
            ack_timings: Rc::default(),
            acks_received: Rc::default(),
            heartbeat_calls: Rc::default(),
            heartbeat_batches: Rc::default(),
            nack_calls: Rc::default(),
            nack_batches: Rc::default(),
            resolve_cached: Rc::default(),
        }
    }

    fn up(&self) -> Result<()> {
        if self.down.get() {
            Err(Error::Unreachable("connection refused".into()))
        } else {
            Ok(())
        }
    }

    /// Enqueues a text; returns its id (duplicates collapse).
    pub fn enqueue(&self, model_id: &str, text: &str) -> String {
        self.enqueue_as(&job_id(model_id, text), model_id, text)
    }

    /// Enqueues a text under a producer-chosen job id; returns it (an id already known is left
    /// as it is).
    pub fn enqueue_as(&self, id: &str, model_id: &str, text: &str) -> String {
        let id = id.to_owned();
        let mut s = self.inner.borrow_mut();
        if !s.jobs.contains_key(&id) {
            s.jobs.insert(
                id.clone(),
                MemJob {
                    text: text.to_owned(),
                    model_id: model_id.to_owned(),
                    attempt: 0,
                    lease: None,
                },
            );
            s.ready.push_back(id.clone());
        }
        id
    }

    /// The result of a finished job.
    pub fn result(&self, id: &str) -> Option<JobResult> {
        self.inner.borrow().done.get(id).cloned()
    }

    /// Dead letters: (job id, error).
    pub fn dead(&self) -> Vec<(String, JobError)> {
        self.inner.borrow().dead.clone()
    }

    /// Jobs waiting to be claimed.
    pub fn ready_len(&self) -> usize {
        self.inner.borrow().ready.len()
    }

    /// How many times job `id` has been delivered (released deliveries do not count).
    pub fn attempt(&self, id: &str) -> u32 {
        self.inner.borrow().jobs.get(id).map_or(0, |j| j.attempt)
    }

    /// The remote cache entry under `key`.
    pub fn cache_entry(&self, key: &str) -> Option<CacheEntry> {
        self.inner.borrow().cache.get(key).cloned()
    }

    /// Stores a cache entry directly (as another worker would).
    pub fn put_cache(&self, key: &str, e: CacheEntry) {
        self.inner.borrow_mut().cache.insert(key.to_owned(), e);
    }

    /// Takes the lock on `key` for someone else; returns the grant.
    pub fn hold_lock(&self, key: &str, ttl_ms: u64) -> LockGrant {
        let now = self.clock.now_ms();
        let mut s = self.inner.borrow_mut();
        s.fence += 1;
        let g = LockGrant {
            token: "other".into(),
            fence: s.fence,
            expires_at: now + ttl_ms,
        };
        s.locks.insert(key.to_owned(), g.clone());
        g
    }

    /// Gives job `id`'s lease to someone else (the worker's token becomes stale).
    pub fn steal_lease(&self, id: &str) {
        let mut s = self.inner.borrow_mut();
        s.fence += 1;
        let fence = s.fence;
        if let Some(j) = s.jobs.get_mut(id) {
            j.lease = Some(Lease {
                token: "thief".into(),
                fence,
                expires_at: u64::MAX,
            });
        }
    }

    fn expire_leases(s: &mut ServerState, now: u64) {
        let expired: Vec<String> = s
            .jobs
            .iter()
            .filter(|(id, j)| {
                j.lease.as_ref().is_some_and(|l| l.expires_at <= now) && !s.done.contains_key(*id)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            if let Some(j) = s.jobs.get_mut(&id) {
                j.lease = None;
            }
            s.ready.push_back(id);
        }
    }

    /// A fenced write: refused when the stored entry has a newer fence.
    fn cache_write(s: &mut ServerState, key: &str, entry: CacheEntry) -> PutOutcome {
        if let Some(e) = s.cache.get(key) {
            if e.fence > entry.fence {
                return PutOutcome::Conflict(e.clone());
            }
        }
        s.cache.insert(key.to_owned(), entry);
        PutOutcome::Stored
    }

    fn lease_check(s: &ServerState, id: &str, token: &str) -> Result<()> {
        match s.jobs.get(id).and_then(|j| j.lease.as_ref()) {
            Some(l) if l.token == token => Ok(()),
            _ => Err(Error::LeaseLost(id.to_owned())),
        }
    }

    /// Leases up to `max` ready jobs (the claim's server side).
    fn lease_ready(&self, max: u32) -> Vec<ClaimedJob> {
        let now = self.clock.now_ms();
        let mut s = self.inner.borrow_mut();
        Self::expire_leases(&mut s, now);
        let mut out = Vec::new();
        while out.len() < max as usize {
            let Some(id) = s.ready.pop_front() else { break };
            s.fence += 1;
            s.tokens += 1;
            let lease = Lease {
                token: format!("t{}", s.tokens),
                fence: s.fence,
                expires_at: now + s.lease_ms,
            };
            let j = s.jobs.get_mut(&id).expect("ready job exists");
            j.attempt += 1;
            j.lease = Some(lease.clone());
            let (text, model_id, attempt) = (j.text.clone(), j.model_id.clone(), j.attempt);
            let cached = s.cache.get(&cache_key(&model_id, &text)).cloned();
            let resolved = self.resolve_cached.get()
                && cached
                    .as_ref()
                    .is_some_and(|e| e.model_id == model_id && e.expires_at > now);
            if let (true, Some(e)) = (resolved, &cached) {
                let result = JobResult {
                    model_id: e.model_id.clone(),
                    vector: e.vector.clone(),
                    source: ResultSource::Remote,
                    by: None,
                };
                s.done.insert(id.clone(), result);
                *self.ack_counts.borrow_mut().entry(id.clone()).or_insert(0) += 1;
            }
            out.push(ClaimedJob {
                id: id.clone(),
                text,
                model_id,
                attempt,
                // One trace for every job, a span per delivery (as the server's claim opens one).
                traceparent: format!(
                    "00-4bf92f3577b34da6a3ce929d0e0e4736-{:016x}-01",
                    lease.fence
                ),
                lease,
                meta: None,
                cache_checked: true,
                cached,
                resolved,
            });
        }
        out
    }
}

impl MemServer {
    /// Extends a lease now (the heartbeat's rule: the holder's token, not yet expired).
    fn extend(&self, job_id: &str, token: &str) -> Result<Lease> {
        let now = self.clock.now_ms();
        let mut s = self.inner.borrow_mut();
        Self::lease_check(&s, job_id, token)?;
        let lease_ms = s.lease_ms;
        let l = s
            .jobs
            .get_mut(job_id)
            .and_then(|j| j.lease.as_mut())
            .expect("checked");
        if l.expires_at <= now {
            return Err(Error::LeaseLost(job_id.to_owned()));
        }
        l.expires_at = now + lease_ms;
        Ok(l.clone())
    }
}

impl JobSource for MemServer {
    async fn claim(&self, max: u32, _wait_ms: u64) -> Result<Vec<ClaimedJob>> {
        self.up()?;
        let out = self.lease_ready(max);
        let reply = self.claim_reply_ms.get();
        if reply > 0 {
            self.clock.sleep(reply).await;
        }
        Ok(out)
    }

    async fn heartbeat(&self, job_id: &str, token: &str, _trace: &str) -> Result<Lease> {
        self.up()?;
        self.heartbeat_calls.set(self.heartbeat_calls.get() + 1);
        self.extend(job_id, token)
    }

    async fn heartbeat_many(&self, leases: &[(String, String)]) -> Result<Vec<Result<Lease>>> {
        self.up()?;
        self.heartbeat_batches.set(self.heartbeat_batches.get() + 1);
        Ok(leases
            .iter()
            .map(|(id, token)| self.extend(id, token))
            .collect())
    }

    async fn ack_many(&self, acks: &[(String, AckRequest)]) -> Result<Vec<Result<()>>> {
        self.up()?;
        self.ack_batches.set(self.ack_batches.get() + 1);
        if self.fail_ack_batches.get() > 0 {
            self.fail_ack_batches.set(self.fail_ack_batches.get() - 1);
            return Err(Error::Http {
                status: 503,
                code: "store_unavailable".into(),
                message: "injected".into(),
                retry_after_ms: Some(10),
            });
        }
        let mut out = Vec::with_capacity(acks.len());
        for (id, ack) in acks {
            out.push(self.ack(id, ack, "").await);
        }
        Ok(out)
    }

    async fn ack(&self, job_id: &str, ack: &AckRequest, trace: &str) -> Result<()> {
        self.up()?;
        self.acks_received.set(self.acks_received.get() + 1);
        self.ack_timings.borrow_mut().push((
            job_id.to_owned(),
            trace.to_owned(),
            ack.timing.clone(),
        ));
        let now = self.clock.now_ms();
        let mut s = self.inner.borrow_mut();
        Self::lease_check(&s, job_id, &ack.token)?;
        let first = !s.done.contains_key(job_id);
        if first {
            *self
                .ack_counts
                .borrow_mut()
                .entry(job_id.to_owned())
                .or_insert(0) += 1;
        }
        s.done.insert(job_id.to_owned(), ack.result.clone());
        if let Some(c) = &ack.cache {
            let entry = CacheEntry {
                model_id: ack.result.model_id.clone(),
                vector: ack.result.vector.clone(),
                fence: c.fence,
                expires_at: now + c.ttl_ms.unwrap_or(60_000),
                by: None,
            };
            let _ = Self::cache_write(&mut s, &c.key, entry);
        }
        Ok(())
    }

    async fn nack(&self, job_id: &str, nack: &NackRequest, _trace: &str) -> Result<NackResponse> {
        self.up()?;
        self.nack_calls.set(self.nack_calls.get() + 1);
        self.give_back(job_id, nack)
    }

    async fn nack_many(
        &self,
        nacks: &[(String, NackRequest)],
    ) -> Result<Vec<Result<NackResponse>>> {
        self.up()?;
        self.nack_batches.set(self.nack_batches.get() + 1);
        Ok(nacks
            .iter()
            .map(|(id, nack)| self.give_back(id, nack))
            .collect())
    }

    async fn release(&self, job_id: &str, token: &str, _trace: &str) -> Result<()> {
        self.up()?;
        let mut s = self.inner.borrow_mut();
        Self::lease_check(&s, job_id, token)?;
        let j = s.jobs.get_mut(job_id).expect("checked");
        j.lease = None;
        j.attempt = j.attempt.saturating_sub(1);
        s.ready.push_front(job_id.to_owned());
        Ok(())
    }
}

impl MemServer {
    /// A nack's rule: dead-lettered when permanent or out of attempts, else ready again.
    fn give_back(&self, job_id: &str, nack: &NackRequest) -> Result<NackResponse> {
        let now = self.clock.now_ms();
        let mut s = self.inner.borrow_mut();
        Self::lease_check(&s, job_id, &nack.token)?;
        let max = s.max_attempts;
        let j = s.jobs.get_mut(job_id).expect("checked");
        j.lease = None;
        if !nack.error.retryable || j.attempt >= max {
            s.dead.push((job_id.to_owned(), nack.error.clone()));
            Ok(NackResponse::Dead)
        } else {
            s.ready.push_back(job_id.to_owned());
            Ok(NackResponse::Retry { available_at: now })
        }
    }
}

impl RemoteCache for MemServer {
    async fn get(&self, key: &str, _trace: &str) -> Result<Option<CacheEntry>> {
        self.up()?;
        self.cache_gets.set(self.cache_gets.get() + 1);
        let answer = self.inner.borrow().cache.get(key).cloned();
        let due = matches!(&*self.finish_after_get.borrow(), Some((n, ..)) if *n == self.cache_gets.get());
        if due {
            if let Some((_, k, e)) = self.finish_after_get.borrow_mut().take() {
                let mut s = self.inner.borrow_mut();
                s.locks.remove(&k);
                s.cache.insert(k, e);
            }
        }
        Ok(answer)
    }
    async fn put(&self, key: &str, put: &CachePut, _trace: &str) -> Result<PutOutcome> {
        self.up()?;
        let now = self.clock.now_ms();
        let entry = CacheEntry {
            model_id: put.model_id.clone(),
            vector: put.vector.clone(),
            fence: put.fence,
            expires_at: now + put.ttl_ms.unwrap_or(60_000),
            by: None,
        };
        Ok(Self::cache_write(&mut self.inner.borrow_mut(), key, entry))
    }
}

impl Locks for MemServer {
    async fn acquire(&self, key: &str, ttl_ms: u64, _trace: &str) -> Result<Option<LockGrant>> {
        self.up()?;
        let now = self.clock.now_ms();
        let mut s = self.inner.borrow_mut();
        if s.locks.get(key).is_some_and(|g| g.expires_at > now) {
            return Ok(None);
        }
        s.fence += 1;
        s.tokens += 1;
        let g = LockGrant {
            token: format!("l{}", s.tokens),
            fence: s.fence,
            expires_at: now + ttl_ms,
        };
        s.locks.insert(key.to_owned(), g.clone());
        Ok(Some(g))
    }
    async fn renew(&self, key: &str, token: &str, ttl_ms: u64, _trace: &str) -> Result<LockGrant> {
        self.up()?;
        let now = self.clock.now_ms();
        let mut s = self.inner.borrow_mut();
        match s.locks.get_mut(key) {
            Some(g) if g.token == token && g.expires_at > now => {
                g.expires_at = now + ttl_ms;
                Ok(g.clone())
            }
            _ => Err(Error::LeaseLost(key.to_owned())),
        }
    }
    async fn release(&self, key: &str, token: &str, _trace: &str) -> Result<()> {
        self.up()?;
        let mut s = self.inner.borrow_mut();
        if s.locks.get(key).is_some_and(|g| g.token == token) {
            s.locks.remove(key);
        }
        Ok(())
    }
}
