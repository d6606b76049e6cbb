//! [`QueueStore`] on Redis: enqueue, claim, heartbeat, ack, nack, release, the dead-letter queue
//! and the status reads, each state change one script (`enqueue.lua`, `claim.lua`, …).

use std::collections::HashMap;

use async_trait::async_trait;
use ternflow_core::protocol::{
    Attempt, ClaimedJob, DlqEntry, Enqueued, JobError, JobResult, JobSpec, JobState, JobStatus,
    Lease, NackResponse, QueueDepth,
};

use super::{parse, parse_json, store_err, RedisStore};
use crate::error::{Error, Result};
use crate::store::{
    cap_error, new_token, released_error, AckInput, AckOutcome, Claimed, JobRecord, QueueStore,
    Released,
};
impl RedisStore {
    async fn job_hash(&self, id: &str) -> Result<(HashMap<String, String>, Vec<Attempt>)> {
        let mut con = self.con.clone();
        let (h, hist): (HashMap<String, String>, Vec<String>) = redis::pipe()
            .hgetall(self.key("job", id))
            .lrange(self.key("hist", id), 0, -1)
            .query_async(&mut con)
            .await
            .map_err(store_err)?;
        let hist = hist
            .iter()
            .map(|s| parse_json(s, "attempt"))
            .collect::<Result<_>>()?;
        Ok((h, hist))
    }
}

fn field<'a>(h: &'a HashMap<String, String>, name: &str) -> &'a str {
    h.get(name).map_or("", String::as_str)
}

fn meta_of(s: &str) -> Result<Option<serde_json::Value>> {
    if s.is_empty() {
        Ok(None)
    } else {
        parse_json(s, "meta").map(Some)
    }
}

#[async_trait]
impl QueueStore for RedisStore {
    async fn enqueue(&self, jobs: Vec<JobRecord>, now: u64) -> Result<Vec<Enqueued>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let flags: Vec<String> = self
            .invoke_confirmed(&self.scripts.enqueue, |inv| {
                inv.key(self.k("ready"))
                    .key(self.k("delayed"))
                    .key(self.k("seq"))
                    .arg(now);
                for j in &jobs {
                    inv.key(self.key("job", &j.id));
                    let meta = j.meta.as_ref().map(|m| m.to_string()).unwrap_or_default();
                    inv.arg(&j.id)
                        .arg(&j.text)
                        .arg(&j.model_id)
                        .arg(j.priority)
                        .arg(j.available_at)
                        .arg(meta)
                        .arg(&j.trace_id);
                }
            })
            .await?;
        Ok(jobs
            .into_iter()
            .zip(flags)
            .map(|(j, f)| Enqueued {
                id: j.id,
                new: f == "1",
            })
            .collect())
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
        let out: Vec<String> = self
            .invoke(&self.scripts.claim, |inv| {
                for k in ["ready", "delayed", "leased", "dlq", "seq", "fence"] {
                    inv.key(self.k(k));
                }
                inv.arg(now)
                    .arg(max)
                    .arg(lease_ms)
                    .arg(max_attempts)
                    .arg(worker)
                    .arg(sub.unwrap_or(""));
                for _ in 0..max {
                    inv.arg(new_token());
                }
            })
            .await?;
        let n_dead: usize = parse(out.first().map_or("0", String::as_str), "count")?;
        let n_exp: usize = parse(out.get(1).map_or("0", String::as_str), "count")?;
        let rest = out.get(2..).unwrap_or_default();
        let dead = rest.iter().take(n_dead).cloned().collect();
        let expired = rest.iter().skip(n_dead).take(n_exp).cloned().collect();
        let mut jobs = Vec::new();
        for c in rest[(n_dead + n_exp).min(rest.len())..].chunks_exact(9) {
            jobs.push(ClaimedJob {
                id: c[0].clone(),
                text: c[1].clone(),
                model_id: c[2].clone(),
                attempt: parse(&c[3], "attempt")?,
                traceparent: c[4].clone(),
                lease: Lease {
                    token: c[5].clone(),
                    fence: parse(&c[6], "fence")?,
                    expires_at: parse(&c[7], "expiry")?,
                },
                meta: meta_of(&c[8])?,
                cache_checked: false,
                cached: None,
                resolved: false,
            });
        }
        Ok(Claimed {
            jobs,
            dead,
            expired,
        })
    }

    async fn heartbeat(
        &self,
        id: &str,
        token: &str,
        lease_ms: u64,
        hold_ms: u64,
        now: u64,
    ) -> Result<Option<Lease>> {
        let out: Vec<String> = self
            .invoke(&self.scripts.heartbeat, |i| {
                i.key(self.key("job", id))
                    .key(self.k("leased"))
                    .arg(id)
                    .arg(token)
                    .arg(now)
                    .arg(lease_ms)
                    .arg(hold_ms);
            })
            .await?;
        if out.len() != 2 {
            return Ok(None);
        }
        Ok(Some(Lease {
            token: token.to_owned(),
            fence: parse(&out[0], "fence")?,
            expires_at: parse(&out[1], "expiry")?,
        }))
    }

    async fn heartbeat_many(
        &self,
        leases: Vec<(String, String)>,
        lease_ms: u64,
        hold_ms: u64,
        now: u64,
    ) -> Result<Vec<Option<Lease>>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let out: Vec<String> = self
            .invoke(&self.scripts.heartbeat_many, |i| {
                i.key(self.k("leased")).arg(now).arg(lease_ms).arg(hold_ms);
                for (id, token) in &leases {
                    i.key(self.key("job", id)).arg(id).arg(token);
                }
            })
            .await?;
        let mut found = Vec::with_capacity(leases.len());
        let mut rest = out.iter();
        let mut tokens = leases.into_iter();
        while let Some(n) = rest.next() {
            let n: usize = parse(n, "reply length")?;
            let fields: Vec<&String> = rest.by_ref().take(n).collect();
            let Some((_, token)) = tokens.next() else {
                break;
            };
            found.push(match fields.as_slice() {
                [fence, exp] => Some(Lease {
                    token,
                    fence: parse(fence, "fence")?,
                    expires_at: parse(exp, "expiry")?,
                }),
                _ => None,
            });
        }
        if tokens.next().is_some() || rest.next().is_some() {
            return Err(Error::Store("redis: bad heartbeat_many reply".to_owned()));
        }
        Ok(found)
    }

    async fn ack(&self, id: &str, token: &str, result: JobResult, _now: u64) -> Result<AckOutcome> {
        let model = result.model_id.clone();
        let result = serde_json::to_string(&result)
            .map_err(|e| Error::Store(format!("encode result: {e}")))?;
        let out: Vec<String> = self
            .invoke_confirmed(&self.scripts.ack, |i| {
                i.key(self.key("job", id))
                    .key(self.key("hist", id))
                    .key(self.k("leased"))
                    .key(self.k("finished"))
                    .key(self.k("finseq"))
                    .arg(id)
                    .arg(token)
                    .arg(result)
                    .arg(
                        self.done_retention_ms
                            .map(|ms| ms.to_string())
                            .unwrap_or_default(),
                    )
                    .arg(&model);
            })
            .await?;
        let fields: Vec<&String> = out.iter().collect();
        ack_outcome(&fields)
    }

    async fn ack_many(&self, acks: Vec<AckInput>, _now: u64) -> Result<Vec<AckOutcome>> {
        if acks.is_empty() {
            return Ok(Vec::new());
        }
        let mut results = Vec::with_capacity(acks.len());
        for a in &acks {
            results.push(
                serde_json::to_string(&a.result)
                    .map_err(|e| Error::Store(format!("encode result: {e}")))?,
            );
        }
        let out: Vec<String> = self
            .invoke_confirmed(&self.scripts.ack_many, |i| {
                i.key(self.k("leased"))
                    .key(self.k("finished"))
                    .key(self.k("finseq"))
                    .arg(
                        self.done_retention_ms
                            .map(|ms| ms.to_string())
                            .unwrap_or_default(),
                    );
                for (a, r) in acks.iter().zip(&results) {
                    i.key(self.key("job", &a.id))
                        .key(self.key("hist", &a.id))
                        .arg(&a.id)
                        .arg(&a.token)
                        .arg(r)
                        .arg(&a.result.model_id);
                }
            })
            .await?;
        let mut outcomes = Vec::with_capacity(acks.len());
        let mut rest = out.iter();
        while let Some(n) = rest.next() {
            let n: usize = parse(n, "reply length")?;
            let fields: Vec<&String> = rest.by_ref().take(n).collect();
            outcomes.push(ack_outcome(&fields)?);
        }
        if outcomes.len() != acks.len() {
            return Err(Error::Store("redis: bad ack_many reply".to_owned()));
        }
        Ok(outcomes)
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
        let error = cap_error(error);
        let errjson = serde_json::to_string(&error)
            .map_err(|e| Error::Store(format!("encode error: {e}")))?;
        let out: Vec<String> = self
            .invoke_confirmed(&self.scripts.nack, |i| {
                i.key(self.key("job", id))
                    .key(self.key("hist", id))
                    .key(self.k("leased"))
                    .key(self.k("dlq"))
                    .key(self.k("delayed"))
                    .arg(id)
                    .arg(token)
                    .arg(errjson)
                    .arg(if error.retryable { "1" } else { "0" })
                    .arg(retry_at)
                    .arg(max_attempts)
                    .arg(now);
            })
            .await?;
        Ok(match out.first().map(String::as_str) {
            Some("dead") => Some(NackResponse::Dead),
            Some("retry") => Some(NackResponse::Retry {
                available_at: parse(out.get(1).map_or("", String::as_str), "retry time")?,
            }),
            _ => None,
        })
    }

    async fn release(
        &self,
        id: &str,
        token: &str,
        free: u32,
        max_attempts: u32,
        now: u64,
    ) -> Result<Released> {
        let errjson = serde_json::to_string(&released_error(free))
            .map_err(|e| Error::Store(format!("encode error: {e}")))?;
        let out: String = self
            .invoke_confirmed(&self.scripts.release, |i| {
                i.key(self.key("job", id))
                    .key(self.key("hist", id))
                    .key(self.k("leased"))
                    .key(self.k("ready"))
                    .key(self.k("seq"))
                    .key(self.k("dlq"))
                    .arg(id)
                    .arg(token)
                    .arg(errjson)
                    .arg(free)
                    .arg(max_attempts)
                    .arg(now);
            })
            .await?;
        Ok(match out.as_str() {
            "free" => Released::Free,
            "counted" => Released::Counted,
            "dead" => Released::Dead,
            _ => Released::NotHeld,
        })
    }

    async fn status(&self, id: &str) -> Result<Option<JobStatus>> {
        let (h, history) = self.job_hash(id).await?;
        if h.is_empty() {
            return Ok(None);
        }
        let state = match field(&h, "state") {
            "ready" => JobState::Queued { available_at: 0 },
            "delayed" => JobState::Queued {
                available_at: parse(field(&h, "available_at"), "available_at")?,
            },
            "leased" => JobState::Leased {
                expires_at: parse(field(&h, "expires_at"), "expiry")?,
                worker: field(&h, "worker").to_owned(),
            },
            "done" => JobState::Done {
                result: parse_json(field(&h, "result"), "result")?,
                info: None,
            },
            "dead" => JobState::Dead {
                error: parse_json(field(&h, "error"), "error")?,
                history,
            },
            other => return Err(Error::Store(format!("redis: unknown job state {other:?}"))),
        };
        Ok(Some(JobStatus {
            id: id.to_owned(),
            attempt: parse(field(&h, "attempt"), "attempt")?,
            state,
        }))
    }

    async fn dlq(&self, limit: usize) -> Result<Vec<DlqEntry>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut con = self.con.clone();
        let ids: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.k("dlq"))
            .arg(0)
            .arg(limit as i64 - 1)
            .query_async(&mut con)
            .await
            .map_err(store_err)?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let (h, history) = self.job_hash(&id).await?;
            if field(&h, "state") != "dead" {
                continue;
            }
            out.push(DlqEntry {
                job: JobSpec {
                    id: id.clone(),
                    text: field(&h, "text").to_owned(),
                    model_id: field(&h, "model_id").to_owned(),
                    priority: parse(field(&h, "priority"), "priority")?,
                    meta: meta_of(field(&h, "meta"))?,
                },
                error: parse_json(field(&h, "error"), "error")?,
                history,
                dead_at: parse(field(&h, "dead_at"), "dead_at")?,
            });
        }
        Ok(out)
    }

    async fn redrive(&self, id: &str, _now: u64) -> Result<bool> {
        let n: i64 = self
            .invoke_confirmed(&self.scripts.redrive, |i| {
                i.key(self.key("job", id))
                    .key(self.k("dlq"))
                    .key(self.k("ready"))
                    .key(self.k("seq"))
                    .arg(id);
            })
            .await?;
        Ok(n == 1)
    }

    async fn probe_write(&self, now: u64) -> Result<()> {
        let mut con = self.con.clone();
        redis::cmd("SET")
            .arg(self.k("ready_probe"))
            .arg(now)
            .arg("PX")
            .arg(60_000)
            .query_async::<()>(&mut con)
            .await
            .map_err(store_err)
    }

    async fn depth(&self, now: u64) -> Result<QueueDepth> {
        let mut con = self.con.clone();
        let (ready, due, delayed, leased, dead): (u64, u64, u64, u64, u64) = redis::pipe()
            .zcard(self.k("ready"))
            .zcount(self.k("delayed"), "-inf", now)
            .zcard(self.k("delayed"))
            .zcard(self.k("leased"))
            .zcard(self.k("dlq"))
            .query_async(&mut con)
            .await
            .map_err(store_err)?;
        Ok(QueueDepth {
            ready: ready + due,
            delayed: delayed - due.min(delayed),
            leased,
            dead,
        })
    }
}

/// An ack script's reply (see `ack.lua`).
fn ack_outcome(fields: &[&String]) -> Result<AckOutcome> {
    Ok(match fields.first().map(|s| s.as_str()) {
        Some("1") if fields.len() == 3 => AckOutcome::Done {
            fence: parse(fields[1], "fence")?,
            text_hash: ternflow_core::keys::text_hash(fields[2]),
        },
        Some("m") if fields.len() == 2 => AckOutcome::WrongModel {
            expected: fields[1].clone(),
        },
        Some("2") => AckOutcome::Repeated,
        Some("-1") => AckOutcome::Missing,
        _ => AckOutcome::Stale,
    })
}
