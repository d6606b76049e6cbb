//! One claimed job, from lease to ack: heartbeats keep the lease (and the text's lock) alive while
//! the pipeline runs; transient failures are retried here with backoff and jitter; what still
//! fails is nacked (the server re-delivers it later, or dead-letters it after its attempt limit);
//! permanent failures are nacked as not retryable, straight to the dead-letter queue.

use std::cell::RefCell;

use futures_util::future::{select, Either};
use futures_util::pin_mut;

use crate::error::{Error, Result};
use crate::keys::cache_key;
use crate::metrics::names;
use crate::pipeline::{HeldLock, Pipeline, Ports, RemoteHint, Resolved, SingleFlight};
use crate::ports::{Clock, JobSource, Locks};
use crate::protocol::{
    AckCacheWrite, AckRequest, ClaimedJob, JobResult, NackRequest, NackResponse, ResultSource,
};
use crate::queue::lease_board::LeaseBoard;
use crate::trace::TraceParent;

/// How a job ended for this worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobOutcome {
    /// Acked with a vector from this source.
    Done(ResultSource),
    /// Nacked for a later re-delivery (or the nack could not be sent and the lease will expire).
    Retry(String),
    /// Dead-lettered by the server, with the reason.
    Dead(String),
    /// The lease was lost; whoever holds the job now finishes it.
    LeaseLost,
}

impl<P: Ports> Pipeline<P> {
    /// Runs one claimed job to its end. Never fails: every ending is an outcome, and every
    /// failure reaches the server (a nack) or expires the lease so the server re-delivers.
    /// Its lease is kept alive by its own heartbeats.
    pub async fn run_job(&self, job: &ClaimedJob) -> JobOutcome {
        self.run_job_with(job, None).await
    }

    /// As [`Pipeline::run_job`]; with a `board`, the queue loop's batched heartbeat keeps the
    /// lease alive and says when it is lost, and this job only renews a lock it holds.
    pub(crate) async fn run_job_with(
        &self,
        job: &ClaimedJob,
        board: Option<&LeaseBoard>,
    ) -> JobOutcome {
        // The delivery's own span (the claim opened it): every request of the job is its child,
        // and so are the steps reported with the ack.
        let trace = TraceParent::parse(&job.traceparent)
            .unwrap_or_else(|| TraceParent::new_root(&self.rng))
            .header();
        self.steps.begin(&trace, self.adapters.clock.now_us());
        let outcome = self.run_traced(job, &trace, board).await;
        self.steps.end(&trace);
        outcome
    }

    async fn run_traced(
        &self,
        job: &ClaimedJob,
        trace: &str,
        board: Option<&LeaseBoard>,
    ) -> JobOutcome {
        let held = RefCell::new(None);
        let work = self.work(job, trace, &held);
        let beat = async {
            match board {
                None => self.heartbeat(job, trace, &held).await,
                Some(b) => {
                    let lost = b.lost(&job.id);
                    let renew = self.renew_lock(trace, &held);
                    pin_mut!(lost, renew);
                    select(lost, renew).await;
                }
            }
        };
        pin_mut!(work, beat);
        match select(work, beat).await {
            Either::Left((outcome, _)) => outcome,
            Either::Right(((), _)) => {
                self.metrics.inc(names::LEASES_LOST);
                JobOutcome::LeaseLost
            }
        }
    }

    /// A job the server finished at claim from the remote cache (`resolved`): its vector goes
    /// into the local cache where queue results are kept ([`Pipeline::keeps_locally`]), and that
    /// is all (no lease to keep, no ack to send).
    pub(crate) async fn keep_resolved(&self, job: &ClaimedJob) {
        self.metrics.inc(names::JOBS_DONE);
        if let Some(e) = &job.cached {
            self.metrics.inc(names::REMOTE_HITS);
            let guard = SingleFlight::Lease {
                fence: job.lease.fence,
            };
            if self.keeps_locally(guard) {
                self.local_put(&cache_key(&job.model_id, &job.text), &e.vector.0)
                    .await;
            }
        }
    }

    async fn work(
        &self,
        job: &ClaimedJob,
        trace: &str,
        held: &RefCell<Option<HeldLock>>,
    ) -> JobOutcome {
        let mut tries = 0;
        // The vector of an earlier try whose ack failed: a retry sends it again instead of
        // resolving the text anew (queue results need not be in the local cache).
        let mut resolved = None;
        loop {
            tries += 1;
            match self.resolve_and_ack(job, trace, held, &mut resolved).await {
                Ok(source) => {
                    self.metrics.inc(names::JOBS_DONE);
                    return JobOutcome::Done(source);
                }
                Err(Error::LeaseLost(_)) => {
                    self.metrics.inc(names::LEASES_LOST);
                    return JobOutcome::LeaseLost;
                }
                Err(e) if e.is_retryable() && self.cfg.retry.allows(tries) => {
                    self.metrics.inc(names::RETRIES);
                    let d = self
                        .cfg
                        .retry
                        .delay_ms(tries - 1, e.retry_after_ms(), &self.rng);
                    self.adapters.clock.sleep(d).await;
                }
                Err(e) => return self.give_back(job, &e, trace).await,
            }
        }
    }

    async fn resolve_and_ack(
        &self,
        job: &ClaimedJob,
        trace: &str,
        held: &RefCell<Option<HeldLock>>,
        resolved: &mut Option<Resolved>,
    ) -> Result<ResultSource> {
        // The lease is the single-flight guard of every queue job, whatever its id: one worker
        // holds the job at a time, and the lease's fence (drawn from the lock fences' counter)
        // orders its cache write, which rides on the ack. Two jobs with different ids and the
        // same text, claimed before either finishes, may both embed it (wasted work, never a
        // wrong cache: the newer fence wins); once one is done the claim of the other finds the
        // text in the cache. A per-text lock here cost three requests per job (lock, PUT, unlock:
        // 28 % of the bare engine, `bench/worker.mjs`).
        let guard = SingleFlight::Lease {
            fence: job.lease.fence,
        };
        let hint = match (&job.cached, job.cache_checked) {
            (Some(e), _) => RemoteHint::Present(e.clone()),
            (None, true) => RemoteHint::Absent,
            (None, false) => RemoteHint::Unknown,
        };
        let r = match resolved.clone() {
            Some(r) => r,
            None => {
                let r = self
                    .resolve_with(&job.text, Some(&job.model_id), trace, held, guard, hint)
                    .await?;
                *resolved = Some(r.clone());
                r
            }
        };
        // The remote write-through rides on the ack, fenced by the lease.
        let cache = (r.source != ResultSource::Remote).then(|| AckCacheWrite {
            key: cache_key(&job.model_id, &job.text),
            fence: job.lease.fence,
            ttl_ms: Some(self.cfg.remote_ttl_ms),
        });
        let timing = self
            .steps
            .timing(trace, &job.traceparent, self.adapters.clock.now_us());
        let ack = AckRequest {
            cache,
            timing,
            token: job.lease.token.clone(),
            worker: Some(self.cfg.worker_id.clone()),
            result: JobResult {
                model_id: r.model_id,
                vector: r.vector.into(),
                source: r.source,
                by: None,
            },
        };
        self.send_ack(&job.id, ack, trace).await?;
        Ok(r.source)
    }

    /// Sends an ack: through the batch queue while the queue loop runs (it flushes them), else
    /// on its own.
    async fn send_ack(&self, id: &str, ack: AckRequest, trace: &str) -> Result<()> {
        if !self.acks.is_driven() {
            return self.adapters.source.ack(id, &ack, trace).await;
        }
        self.acks.push(id, ack).await.unwrap_or(Err(Error::Stopped))
    }

    /// Nacks `job` with `err`: retryable errors come back later, permanent ones go to the DLQ.
    async fn give_back(&self, job: &ClaimedJob, err: &Error, trace: &str) -> JobOutcome {
        let nack = NackRequest {
            token: job.lease.token.clone(),
            error: err.to_job_error(),
        };
        let sent = if self.nacks.is_driven() {
            self.nacks
                .push(&job.id, nack)
                .await
                .unwrap_or(Err(Error::Stopped))
        } else {
            self.adapters.source.nack(&job.id, &nack, trace).await
        };
        match sent {
            Ok(NackResponse::Dead) => {
                self.metrics.inc(names::JOBS_DEAD);
                JobOutcome::Dead(err.code().to_owned())
            }
            Ok(NackResponse::Retry { .. }) => {
                self.metrics.inc(names::JOBS_NACKED);
                JobOutcome::Retry(err.code().to_owned())
            }
            // The server embedded the text itself: the job is done, by the backend.
            Ok(NackResponse::Done) => {
                self.metrics.inc(names::JOBS_NACKED);
                JobOutcome::Done(ResultSource::Backend)
            }
            Err(Error::LeaseLost(_)) => {
                self.metrics.inc(names::LEASES_LOST);
                JobOutcome::LeaseLost
            }
            Err(_) => {
                // The server is unreachable: the lease expires and the job is re-delivered.
                self.metrics.inc(names::NACK_FAILURES);
                JobOutcome::Retry(err.code().to_owned())
            }
        }
    }

    /// Keeps a held lock alive (the lease is the board's); never returns.
    async fn renew_lock(&self, trace: &str, held: &RefCell<Option<HeldLock>>) {
        loop {
            self.adapters
                .clock
                .sleep((self.cfg.lock_ttl_ms / 3).max(20))
                .await;
            let lock = held.borrow().clone();
            if let Some(h) = lock {
                if let Ok(g) = self
                    .adapters
                    .locks
                    .renew(&h.key, &h.grant.token, self.cfg.lock_ttl_ms, trace)
                    .await
                {
                    if let Some(cur) = held.borrow_mut().as_mut() {
                        cur.grant = g;
                    }
                }
            }
        }
    }

    /// Keeps the lease and any held lock alive; returns only when the lease is lost.
    async fn heartbeat(&self, job: &ClaimedJob, trace: &str, held: &RefCell<Option<HeldLock>>) {
        let mut expires_at = job.lease.expires_at;
        loop {
            let now = self.adapters.clock.now_ms();
            let lease_left = expires_at.saturating_sub(now);
            let interval = (lease_left / 3)
                .min(self.cfg.lock_ttl_ms / 3)
                .clamp(20, 30_000);
            self.adapters.clock.sleep(interval).await;
            match self
                .adapters
                .source
                .heartbeat(&job.id, &job.lease.token, trace)
                .await
            {
                Ok(lease) => {
                    self.metrics.inc(names::HEARTBEATS);
                    expires_at = lease.expires_at;
                }
                Err(Error::LeaseLost(_)) => return,
                Err(_) if self.adapters.clock.now_ms() >= expires_at => return,
                Err(_) => {} // transient: try again while the lease may still be ours
            }
            let lock = held.borrow().clone();
            if let Some(h) = lock {
                if let Ok(g) = self
                    .adapters
                    .locks
                    .renew(&h.key, &h.grant.token, self.cfg.lock_ttl_ms, trace)
                    .await
                {
                    if let Some(cur) = held.borrow_mut().as_mut() {
                        cur.grant = g;
                    }
                }
            }
        }
    }
}
