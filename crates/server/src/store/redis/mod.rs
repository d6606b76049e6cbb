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
//! Beside this file, one capability each: `queue` (`QueueStore`), `cache` (`CacheStore`),
//! `locks` (`LockStore`), `events` (`EventBus`: the event stream and its reader), `scan`
//! (`ResultScan` over `{P}:done`, then `{P}:finished`), `integrity` (`IntegrityStore`: standings
//! and writers), `budget` (`BudgetStore`: the budgets the fleet shares) and `usage`
//! (`UsageStore`); `conn` (one server or a cluster, and `WAIT`). This file holds the store, its
//! scripts and the invocation helpers they share.

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use redis::Script;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

pub use self::conn::{is_redis_url, Durability, CLUSTER_SCHEME};
use self::conn::{Client, Conn};

use super::NumberedEvent;
use crate::error::{Error, Result};

mod budget;
mod cache;
mod conn;
mod events;
mod integrity;
mod locks;
mod queue;
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
