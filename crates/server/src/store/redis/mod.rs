//! The Redis store: many `ternflow-server` processes share one queue, cache and lock space, on
//! one Redis (`redis://…`, with replicas or not) or a Redis Cluster (`redis-cluster://…`), through
//! the same code.
//!
//! # Layout (all keys under a prefix `P`, default `tf`, a tenant's `tf:t:NAME`)
//! Every key is `{P}:…`: the prefix in braces is the key's **hash tag**, so all the keys of one
//! store (one tenant) are in one cluster slot, and every script and pipeline touches one slot.
//! The reason: each queue operation spans several structures (a claim moves ids between `ready`,
//! `delayed`, `leased` and `dlq`, draws fences and edits job hashes), and one slot keeps each one
//! a single atomic script. The cost: one tenant's traffic is served by one master; a cluster
//! spreads *tenants* over masters, not one tenant's jobs (docs/redis-cluster.md).
//!
//! | key | type | holds |
//! |---|---|---|
//! | `{P}:job:{id}` | hash | text, model_id, priority, meta, trace, state, attempt, seq, lease (token, fence, expires_at, worker, leased_at), available_at, result, error, dead_at, done_token |
//! | `{P}:hist:{id}` | list | the last `MAX_HISTORY` failed attempts (JSON), oldest first |
//! | `{P}:ready` | zset | claimable ids, score = −priority·2⁴⁰ + seq (priority, then FIFO) |
//! | `{P}:delayed` | zset | delayed and backing-off ids, score = available_at |
//! | `{P}:leased` | zset | leased ids, score = lease expiry |
//! | `{P}:dlq` | zset | dead ids, score = dead_at |
//! | `{P}:finished` | zset | finished ids, score = the order they finished (`{P}:finseq`; paged by score: `ResultScan`) |
//! | `{P}:done` | zset | finished ids as earlier versions indexed them, all scored 0 (paged by id; this version reads it and takes ids off it, never adds) |
//! | `{P}:seq`, `{P}:fence`, `{P}:evseq`, `{P}:finseq` | string | counters (`INCR`; fences and event ids never below the clock × 1000) |
//! | `{P}:events` | stream | `e` = `{"id", "event", "data"}` (see `events`) |
//! | `{P}:cache:{key}` | hash | model_id, vector, fence, expires_at, by |
//! | `{P}:cachelen` | hash | cache key → its bytes against the cache-bytes quota |
//! | `{P}:cachesz` | zset | cache keys, score = expires_at (the sweep takes expired ones off the sum) |
//! | `{P}:cachebytes` | string | the sum of `{P}:cachelen` (`INCRBY`) |
//! | `{P}:lock:{key}` | hash | token, fence, expires_at |
//! | `{P}:standing:{sub}`, `{P}:wj:{sub}`, `{P}:wc:{sub}` (and earlier versions' `{P}:wrote:{sub}`), `{P}:prop:{id}`, `{P}:quarantined` | | the integrity records (`integrity`) |
//! | `{P}:budget:{name}` | string | a budget the fleet shares (`budget`) |
//! | `{P}:usage` | hash | the tenant's usage counters, every server's together (`usage`) |
//!
//! Every state change is one Lua script, so it is atomic: the `.lua` files beside this one
//! (`head.lua` is prepended to each). Each declares in `KEYS[]` every key its caller can name;
//! only `claim.lua` and `cache_sweep.lua` name keys of ids they find in a sorted set, from the
//! prefix (same tag, same slot; a test keeps it to those two). Nothing scans the keyspace.
//!
//! **Why not a Stream with a consumer group for the queue:** consumer groups track leases by
//! *Redis'* idle time (`XAUTOCLAIM min-idle-time`) and have no per-delivery token or fence; the
//! protocol needs both and needs expiry decided by the server's injected clock (so the same
//! conformance suite, with a fake clock, runs against every store). `ZPOPMIN` over `ready`,
//! `ZRANGEBYSCORE` over `leased` (the visibility timeout) and `delayed` give the same semantics
//! with those properties. Locks are hashes rather than `SET NX PX` for the same reason (the
//! expiry is compared in Lua against the server's clock); Redis' own `PEXPIRE` (TTL + 60 s) only
//! garbage-collects them.
//!
//! **Durability:** a confirmed enqueue, ack, nack or redrive is one `WAIT` saw on
//! [`Durability::replicas`] replicas (default 1 on a cluster, 0 on one server; `conn`). Claims,
//! heartbeats, locks and cache writes are not waited for: losing one in a failover is safe
//! because fences never go backwards (`head.lua`'s `draw_fences`). Servers sharing a Redis must
//! have roughly synchronised clocks (NTP): lease, lock and cache expiry and the fence floor
//! compare their clocks. For no loss on a Redis crash run it with `appendonly yes` and
//! `appendfsync always` (the tests do).
//!
//! Beside this file: `conn` (one server or a cluster, and `WAIT`), `events` (the event stream's
//! reader), `scan` (`ResultScan` over `{P}:done`, then `{P}:finished`), `integrity` (`IntegrityStore`: standings
//! and writers), `budget` (`BudgetStore`: the budgets the fleet shares) and `usage` (`UsageStore`).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use redis::Script;
use ternflow_core::protocol::{
    Attempt, CacheEntry, ClaimedJob, DlqEntry, Enqueued, JobError, JobResult, JobSpec, JobState,
    JobStatus, Lease, LockGrant, NackResponse, QueueDepth, ServerEvent, Vector,
};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

pub use self::conn::{is_redis_url, Durability, CLUSTER_SCHEME};
use self::conn::{Client, Conn};
use self::events::EVENTS_KEPT;

use super::{
    cap_error, new_token, AckInput, AckOutcome, CacheStore, Claimed, EventBus, Fenced, JobRecord,
    LockOutcome, LockStore, NumberedEvent, PutOutcome, QueueStore,
};
use crate::error::{Error, Result};

mod budget;
mod conn;
mod events;
mod integrity;
mod scan;
mod usage;

/// Redis keeps a cache entry or lock this long past its logical expiry before deleting it.
const GC_SLACK_MS: u64 = 60_000;

const LUA_HEAD: &str = include_str!("head.lua");

const ENQUEUE: &str = include_str!("enqueue.lua");

const CLAIM: &str = include_str!("claim.lua");

const HEARTBEAT: &str = include_str!("heartbeat.lua");

const HEARTBEAT_MANY: &str = include_str!("heartbeat_many.lua");

const ACK: &str = include_str!("ack.lua");

const ACK_MANY: &str = include_str!("ack_many.lua");

const NACK: &str = include_str!("nack.lua");

const RELEASE: &str = include_str!("release.lua");

const REDRIVE: &str = include_str!("redrive.lua");

const CACHE_PUT: &str = include_str!("cache_put.lua");

const CACHE_DELETE: &str = include_str!("cache_delete.lua");

const CACHE_SWEEP: &str = include_str!("cache_sweep.lua");

const REQUEUE_DONE: &str = include_str!("requeue_done.lua");

const QUARANTINE: &str = include_str!("quarantine.lua");

const LOCK_ACQUIRE: &str = include_str!("lock_acquire.lua");

const LOCK_RENEW: &str = include_str!("lock_renew.lua");

const LOCK_RELEASE: &str = include_str!("lock_release.lua");

const PUBLISH: &str = include_str!("publish.lua");

const NOTE_WRITTEN: &str = include_str!("note_written.lua");
/// Takes a cost from budgets a fleet shares (`budget`).
const BUDGET: &str = include_str!("budget.lua");

struct Scripts {
    enqueue: Script,
    claim: Script,
    heartbeat: Script,
    heartbeat_many: Script,
    ack: Script,
    ack_many: Script,
    nack: Script,
    release: Script,
    redrive: Script,
    cache_put: Script,
    cache_delete: Script,
    cache_sweep: Script,
    requeue_done: Script,
    quarantine: Script,
    lock_acquire: Script,
    lock_renew: Script,
    lock_release: Script,
    publish: Script,
    note_written: Script,
    budget: Script,
}

impl Scripts {
    fn new() -> Self {
        let s = |body: &str| {
            Script::new(&format!(
                "local max_history = {}\n{LUA_HEAD}{body}",
                super::MAX_HISTORY
            ))
        };
        Scripts {
            enqueue: s(ENQUEUE),
            claim: s(CLAIM),
            heartbeat: s(HEARTBEAT),
            heartbeat_many: s(HEARTBEAT_MANY),
            ack: s(ACK),
            ack_many: s(ACK_MANY),
            nack: s(NACK),
            release: s(RELEASE),
            redrive: s(REDRIVE),
            cache_put: s(CACHE_PUT),
            cache_delete: s(CACHE_DELETE),
            cache_sweep: s(CACHE_SWEEP),
            requeue_done: s(REQUEUE_DONE),
            quarantine: s(QUARANTINE),
            lock_acquire: s(LOCK_ACQUIRE),
            lock_renew: s(LOCK_RENEW),
            lock_release: s(LOCK_RELEASE),
            publish: s(PUBLISH),
            note_written: s(NOTE_WRITTEN),
            budget: s(BUDGET),
        }
    }
}

/// The Redis store. See the [module docs](self).
pub struct RedisStore {
    con: Conn,
    /// The key prefix as a hash tag (`{tf:t:acme}`): every key of the store is in its slot.
    prefix: String,
    scripts: Scripts,
    durability: Durability,
    events: broadcast::Sender<NumberedEvent>,
    /// The id of the last event forwarded to `events` (or the newest when connecting).
    last_event: Arc<AtomicU64>,
    subscriber: JoinHandle<()>,
    done_retention_ms: Option<u64>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        self.subscriber.abort();
    }
}

fn store_err(e: redis::RedisError) -> Error {
    Error::Store(format!("redis: {e}"))
}

fn parse<T: std::str::FromStr>(s: &str, what: &str) -> Result<T> {
    s.parse()
        .map_err(|_| Error::Store(format!("redis: bad {what} {s:?}")))
}

fn parse_json<T: serde::de::DeserializeOwned>(s: &str, what: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|e| Error::Store(format!("redis: bad {what}: {e}")))
}

impl RedisStore {
    /// Connects to `url` — one server (`redis://host:port/db`, `rediss://…`) or a cluster
    /// (`redis-cluster://HOST:PORT,HOST:PORT,…`, seed nodes) — and starts following the event
    /// stream. `prefix` namespaces every key (several deployments, tenants or tests share one
    /// Redis); it becomes the keys' hash tag. Writes are confirmed with
    /// [`Durability::default_for`] the URL; see [`RedisStore::with_durability`].
    ///
    /// # Errors
    /// [`Error::Store`] when the URL is invalid or Redis cannot be reached.
    pub async fn connect(url: &str, prefix: &str) -> Result<Self> {
        let client = Client::open(url)?;
        let mut con = client.connect().await?;
        let prefix = format!("{{{prefix}}}");
        let (events, _) = broadcast::channel(4_096);
        let stream = format!("{prefix}:events");
        let evseq = format!("{prefix}:evseq");
        // Read before the reader starts: every event appended after it reaches the channel.
        let start = events::head(&mut con, &stream, &evseq)
            .await
            .map_err(store_err)?;
        let last_event = Arc::new(AtomicU64::new(start.last_id));
        let subscriber =
            events::spawn_reader(client, stream, start, events.clone(), last_event.clone());
        Ok(RedisStore {
            con,
            prefix,
            scripts: Scripts::new(),
            durability: Durability::default_for(url),
            events,
            last_event,
            subscriber,
            done_retention_ms: None,
        })
    }

    /// How many replicas must hold an enqueue, ack, nack or redrive before it is confirmed
    /// (`WAIT`); see docs/redis-cluster.md for what each choice loses in which failure.
    pub fn with_durability(mut self, d: Durability) -> Self {
        self.durability = d;
        self
    }

    /// Lets Redis delete finished jobs `ms` after their ack (`PEXPIRE`, Redis' own clock); a
    /// forgotten id may be enqueued again. Default: keep them forever.
    pub fn with_done_retention(mut self, ms: u64) -> Self {
        self.done_retention_ms = Some(ms.max(1));
        self
    }

    /// Runs `script` with the key prefix as its first argument, then what `args` adds (writes
    /// that must be confirmed go through [`invoke_confirmed`](Self::invoke_confirmed)).
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        args: impl FnOnce(&mut redis::ScriptInvocation<'_>),
    ) -> Result<T> {
        let inv = self.prepared(script, args);
        let mut con = self.con.clone();
        inv.invoke_async(&mut con).await.map_err(store_err)
    }

    /// `script`'s invocation: the key prefix as its first argument, then what `args` adds.
    fn prepared<'s>(
        &self,
        script: &'s Script,
        args: impl FnOnce(&mut redis::ScriptInvocation<'s>),
    ) -> redis::ScriptInvocation<'s> {
        let mut inv = script.prepare_invoke();
        inv.arg(&self.prefix);
        args(&mut inv);
        inv
    }

    /// [`invoke`](Self::invoke) for a write that is confirmed only once the store's
    /// [`Durability`] holds for it: the script and `WAIT` go as one pipeline, so the `WAIT` runs
    /// on the connection and the node that ran the script, right after it. (A `WAIT` sent on its
    /// own could be retried by the cluster client on the promoted replica after a failover, or
    /// go through a replaced connection, and count replicas of writes that did not include this
    /// one: seen as confirmed acks and enqueues lost in `tests/redis_failover.rs`.) A pipeline
    /// that fails is not confirmed; every confirmed write is idempotent, so the caller retries it.
    async fn invoke_confirmed<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        args: impl FnOnce(&mut redis::ScriptInvocation<'_>),
    ) -> Result<T> {
        let d = self.durability;
        if d.replicas == 0 {
            return self.invoke(script, args).await;
        }
        let inv = self.prepared(script, args);
        let mut pipe = redis::pipe();
        pipe.invoke_script(&inv)
            .cmd("WAIT")
            .arg(d.replicas)
            .arg(d.timeout.as_millis() as u64);
        let mut con = self.con.clone();
        let reply: redis::RedisResult<(T, u64)> = pipe.query_async(&mut con).await;
        let (out, n) = match reply {
            // A node that has not seen the script yet (a promoted replica): load it there, once.
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                inv.load_async(&mut con).await.map_err(store_err)?;
                pipe.query_async(&mut con).await.map_err(store_err)?
            }
            r => r.map_err(store_err)?,
        };
        conn::confirmed(n, d)?;
        Ok(out)
    }

    /// The key of one of the store's own structures (`{P}:ready`, `{P}:fence`, …).
    fn k(&self, kind: &str) -> String {
        format!("{}:{kind}", self.prefix)
    }

    /// The key of one job's, cache entry's or lock's structure (`{P}:job:{id}`, …).
    fn key(&self, kind: &str, id: &str) -> String {
        format!("{}:{kind}:{id}", self.prefix)
    }

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
                    .arg(worker);
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
        now: u64,
    ) -> Result<Option<Lease>> {
        let out: Vec<String> = self
            .invoke(&self.scripts.heartbeat, |i| {
                i.key(self.key("job", id))
                    .key(self.k("leased"))
                    .arg(id)
                    .arg(token)
                    .arg(now)
                    .arg(lease_ms);
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
        now: u64,
    ) -> Result<Vec<Option<Lease>>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let out: Vec<String> = self
            .invoke(&self.scripts.heartbeat_many, |i| {
                i.key(self.k("leased")).arg(now).arg(lease_ms);
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

    async fn release(&self, id: &str, token: &str, _now: u64) -> Result<bool> {
        let n: i64 = self
            .invoke(&self.scripts.release, |i| {
                i.key(self.key("job", id))
                    .key(self.k("leased"))
                    .key(self.k("ready"))
                    .key(self.k("seq"))
                    .arg(id)
                    .arg(token);
            })
            .await?;
        Ok(n == 1)
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

/// A writer's provenance as a cache hash keeps it (`by`, JSON; absent or `""` for none).
fn provenance(by: Option<&str>) -> Option<ternflow_core::protocol::Provenance> {
    by.filter(|b| !b.is_empty())
        .and_then(|b| serde_json::from_str(b).ok())
}

/// The fields of a cache entry's hash, in the order [`cache_entry`] reads them.
const CACHE_FIELDS: [&str; 5] = ["model_id", "vector", "fence", "expires_at", "by"];

/// A cache entry from its hash's [`CACHE_FIELDS`]; `None` when absent or expired.
fn cache_entry(h: Vec<Option<String>>, now: u64) -> Result<Option<CacheEntry>> {
    let [Some(model_id), Some(vector), Some(fence), Some(exp), by] =
        <[Option<String>; 5]>::try_from(h).unwrap_or_default()
    else {
        return Ok(None);
    };
    let expires_at: u64 = parse(&exp, "expiry")?;
    if expires_at <= now {
        return Ok(None);
    }
    Ok(Some(CacheEntry {
        model_id,
        vector: Vector(
            ternflow_core::codec::decode_vector(&vector)
                .map_err(|e| Error::Store(format!("redis: bad vector: {e}")))?,
        ),
        fence: parse(&fence, "fence")?,
        expires_at,
        by: provenance(by.as_deref()),
    }))
}

#[async_trait]
impl CacheStore for RedisStore {
    async fn cache_get(&self, key: &str, now: u64) -> Result<Option<CacheEntry>> {
        let mut con = self.con.clone();
        let h: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(self.key("cache", key))
            .arg(&CACHE_FIELDS)
            .query_async(&mut con)
            .await
            .map_err(store_err)?;
        cache_entry(h, now)
    }

    async fn cache_get_many(&self, keys: &[String], now: u64) -> Result<Vec<Option<CacheEntry>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        // One pipelined round trip for every key.
        let mut pipe = redis::pipe();
        for k in keys {
            pipe.cmd("HMGET")
                .arg(self.key("cache", k))
                .arg(&CACHE_FIELDS);
        }
        let mut con = self.con.clone();
        let rows: Vec<Vec<Option<String>>> = pipe.query_async(&mut con).await.map_err(store_err)?;
        rows.into_iter().map(|h| cache_entry(h, now)).collect()
    }

    async fn cache_put(
        &self,
        key: &str,
        entry: CacheEntry,
        by: Fenced,
        now: u64,
    ) -> Result<PutOutcome> {
        let px = entry.expires_at.saturating_sub(now) + GC_SLACK_MS;
        let writer = entry
            .by
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| Error::Store(format!("encode provenance: {e}")))?
            .unwrap_or_default();
        let out: Vec<String> = self
            .invoke(&self.scripts.cache_put, |i| {
                i.key(self.key("cache", key))
                    .key(self.key("lock", key))
                    .key(self.k("cachelen"))
                    .key(self.k("cachesz"))
                    .key(self.k("cachebytes"))
                    .arg(key)
                    .arg(&entry.model_id)
                    .arg(ternflow_core::codec::encode_vector(&entry.vector.0))
                    .arg(entry.fence)
                    .arg(entry.expires_at)
                    .arg(now)
                    .arg(px)
                    .arg(if by == Fenced::ByLock { "1" } else { "0" })
                    .arg(&writer)
                    .arg(crate::quota::entry_bytes(key, entry.vector.0.len()));
            })
            .await?;
        if out.first().map(String::as_str) == Some("u") {
            return Ok(PutOutcome::Unfenced);
        }
        if out.first().map(String::as_str) == Some("1") {
            return Ok(PutOutcome::Stored {
                replaced: out.get(1).map(String::as_str) == Some("1"),
            });
        }
        if out.len() != 6 {
            return Err(Error::Store("redis: bad cache_put reply".to_owned()));
        }
        Ok(PutOutcome::Stale(CacheEntry {
            model_id: out[1].clone(),
            vector: Vector(
                ternflow_core::codec::decode_vector(&out[2])
                    .map_err(|e| Error::Store(format!("redis: bad vector: {e}")))?,
            ),
            fence: parse(&out[3], "fence")?,
            expires_at: parse(&out[4], "expiry")?,
            by: provenance(Some(&out[5])),
        }))
    }

    async fn cache_delete(&self, key: &str) -> Result<bool> {
        let n: i64 = self
            .invoke(&self.scripts.cache_delete, |i| {
                i.key(self.key("cache", key))
                    .key(self.k("cachelen"))
                    .key(self.k("cachesz"))
                    .key(self.k("cachebytes"))
                    .arg(key);
            })
            .await?;
        Ok(n > 0)
    }

    async fn cache_bytes(&self, _now: u64) -> Result<u64> {
        // Entries past their expiry count until the sweep takes them off (within a sweep).
        let mut con = self.con.clone();
        let n: Option<i64> = redis::cmd("GET")
            .arg(self.k("cachebytes"))
            .query_async(&mut con)
            .await
            .map_err(store_err)?;
        Ok(n.unwrap_or(0).max(0) as u64)
    }

    async fn sweep(&self, now: u64, limit: usize) -> Result<u64> {
        // Cache entries and locks carry Redis TTLs (`PEXPIRE`, expiry + GC_SLACK_MS): Redis
        // removes them itself. What is left is the cache-bytes bookkeeping of expired entries,
        // which removes nothing and so counts nothing here.
        let _: i64 = self
            .invoke(&self.scripts.cache_sweep, |i| {
                i.key(self.k("cachesz"))
                    .key(self.k("cachelen"))
                    .key(self.k("cachebytes"))
                    .arg(now)
                    .arg(limit);
            })
            .await?;
        Ok(0)
    }
}

#[async_trait]
impl LockStore for RedisStore {
    async fn lock_acquire(&self, key: &str, ttl_ms: u64, now: u64) -> Result<LockOutcome> {
        let token = new_token();
        let out: Vec<String> = self
            .invoke(&self.scripts.lock_acquire, |i| {
                i.key(self.key("lock", key))
                    .key(self.k("fence"))
                    .arg(key)
                    .arg(&token)
                    .arg(now)
                    .arg(ttl_ms)
                    .arg(ttl_ms + GC_SLACK_MS);
            })
            .await?;
        match out.first().map(String::as_str) {
            Some("1") if out.len() == 3 => Ok(LockOutcome::Granted(LockGrant {
                token,
                fence: parse(&out[1], "fence")?,
                expires_at: parse(&out[2], "expiry")?,
            })),
            Some("0") if out.len() == 2 => Ok(LockOutcome::Held {
                expires_at: parse(&out[1], "expiry")?,
            }),
            _ => Err(Error::Store("redis: bad lock reply".to_owned())),
        }
    }

    async fn lock_renew(
        &self,
        key: &str,
        token: &str,
        ttl_ms: u64,
        now: u64,
    ) -> Result<Option<LockGrant>> {
        let out: Vec<String> = self
            .invoke(&self.scripts.lock_renew, |i| {
                i.key(self.key("lock", key))
                    .arg(key)
                    .arg(token)
                    .arg(now)
                    .arg(ttl_ms)
                    .arg(ttl_ms + GC_SLACK_MS);
            })
            .await?;
        if out.len() != 2 {
            return Ok(None);
        }
        Ok(Some(LockGrant {
            token: token.to_owned(),
            fence: parse(&out[0], "fence")?,
            expires_at: parse(&out[1], "expiry")?,
        }))
    }

    async fn lock_release(&self, key: &str, token: &str) -> Result<bool> {
        let n: i64 = self
            .invoke(&self.scripts.lock_release, |i| {
                i.key(self.key("lock", key)).arg(key).arg(token);
            })
            .await?;
        Ok(n == 1)
    }
}

#[async_trait]
impl EventBus for RedisStore {
    async fn publish(&self, event: ServerEvent) -> Result<u64> {
        // `{"event":…,"data":…}` — the script splices the id in after the opening brace.
        let body = serde_json::to_string(&event)
            .map_err(|e| Error::Store(format!("encode event: {e}")))?;
        let floor = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64 * 1_000)
            .unwrap_or(0);
        self.invoke(&self.scripts.publish, |i| {
            i.key(self.k("evseq"))
                .key(self.k("events"))
                .arg(body)
                .arg(floor)
                .arg(EVENTS_KEPT);
        })
        .await
    }

    fn subscribe(&self) -> broadcast::Receiver<NumberedEvent> {
        self.events.subscribe()
    }

    fn last_event_id(&self) -> u64 {
        self.last_event.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    /// Every script names its keys through `KEYS[]`, so a cluster routes it and checks them;
    /// only the two that find ids in a sorted set name those ids' keys from the prefix.
    #[test]
    fn scripts_name_their_keys_through_keys() {
        let scripts = [
            ("enqueue", super::ENQUEUE),
            ("claim", super::CLAIM),
            ("heartbeat", super::HEARTBEAT),
            ("heartbeat_many", super::HEARTBEAT_MANY),
            ("ack", super::ACK),
            ("ack_many", super::ACK_MANY),
            ("nack", super::NACK),
            ("release", super::RELEASE),
            ("redrive", super::REDRIVE),
            ("cache_put", super::CACHE_PUT),
            ("cache_delete", super::CACHE_DELETE),
            ("cache_sweep", super::CACHE_SWEEP),
            ("requeue_done", super::REQUEUE_DONE),
            ("quarantine", super::QUARANTINE),
            ("lock_acquire", super::LOCK_ACQUIRE),
            ("lock_renew", super::LOCK_RENEW),
            ("lock_release", super::LOCK_RELEASE),
            ("publish", super::PUBLISH),
            ("note_written", super::NOTE_WRITTEN),
            ("budget", super::BUDGET),
        ];
        for (name, body) in scripts {
            let from_prefix = body.contains("p..");
            assert_eq!(
                from_prefix,
                matches!(name, "claim" | "cache_sweep"),
                "{name}.lua: only claim and cache_sweep may build key names from the prefix"
            );
            assert!(body.contains("KEYS["), "{name}.lua declares no keys");
        }
        assert!(
            !super::LUA_HEAD.contains("p..'"),
            "head.lua's helpers take their keys"
        );
    }
}
