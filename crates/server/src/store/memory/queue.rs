//! [`QueueStore`] in memory: enqueue, claim, heartbeat, ack, nack, release, the dead-letter
//! queue and the status reads, over [`Inner`](super::Inner)'s indexes.

use async_trait::async_trait;
use ternflow_core::keys;
use ternflow_core::protocol::{
    ClaimedJob, DlqEntry, Enqueued, JobError, JobResult, JobSpec, JobStatus, Lease, NackResponse,
    QueueDepth,
};

use super::{push_attempt, status_of, Job, MemoryStore, St};
use crate::error::Result;
use crate::store::{
    cap_error, new_token, released_error, AckOutcome, Claimed, JobRecord, QueueStore, Released,
};

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
                releases: 0,
                history: Vec::new(),
                state,
            });
        }
        Ok(out)
    }

    async fn claim(
        &self,
        worker: &str,
        sub: Option<&str>,
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
                sub: sub.map(str::to_owned),
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
        hold_ms: u64,
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
                leased_at,
                ..
            } if t == token && leased_at.saturating_add(hold_ms) > now => {
                *expires_at = (now + lease_ms).min(leased_at.saturating_add(hold_ms));
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
        if !matches!(&j.state, St::Leased { token: t, .. } if t == token) {
            return Ok(None);
        }
        let error = cap_error(error);
        push_attempt(&mut j, error.clone(), now);
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

    async fn release(
        &self,
        id: &str,
        token: &str,
        free: u32,
        max_attempts: u32,
        now: u64,
    ) -> Result<Released> {
        let mut g = self.lock();
        let Some(mut j) = g.jobs.get(id).cloned() else {
            return Ok(Released::NotHeld);
        };
        if !matches!(&j.state, St::Leased { token: t, .. } if t == token) {
            return Ok(Released::NotHeld);
        }
        if j.releases >= free {
            return Ok(
                match g.end_delivery(j, released_error(free), max_attempts, now) {
                    Some(true) => Released::Dead,
                    _ => Released::Counted,
                },
            );
        }
        j.releases += 1;
        j.attempt = j.attempt.saturating_sub(1);
        j.seq = g.next_seq();
        j.state = St::Ready;
        g.put_job(j);
        Ok(Released::Free)
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
        j.releases = 0;
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
