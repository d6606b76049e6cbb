//! The connection to Redis: one server (`redis://…`) or a Redis Cluster (`redis-cluster://…`),
//! behind one type so the store has one code path; and `WAIT`, what makes a write confirmed.
//!
//! A cluster is reached through the `redis` crate's cluster client (it reads the slot map,
//! follows `MOVED`/`ASK`, and re-reads the map after a failover); nothing here routes slots by
//! hand. Every command the store sends names its keys (scripts through `KEYS[]`), and every key
//! of one store shares one hash tag, so each command goes to the one master owning that tag.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::store_err;
use crate::error::{Error, Result};

/// The scheme of a cluster URL: `redis-cluster://HOST:PORT,HOST:PORT,…` (seed nodes; the rest
/// of the cluster is discovered from them). A password goes in the first seed
/// (`redis-cluster://:secret@h1:7000,h2:7001`) and applies to every node.
pub const CLUSTER_SCHEME: &str = "redis-cluster://";

/// How long one command may take before the store reports the store unavailable. A failover
/// (a replica promoted after `cluster-node-timeout`) shows as errors for about that long; the
/// callers retry.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `url` names a Redis store this module can open (`redis://`, `rediss://` or
/// `redis-cluster://`).
pub fn is_redis_url(url: &str) -> bool {
    ["redis://", "rediss://", CLUSTER_SCHEME]
        .iter()
        .any(|s| url.starts_with(s))
}

/// Where the store connects: a client for one server or for a cluster.
#[derive(Clone)]
pub(super) enum Client {
    Single(redis::Client),
    /// The client and its seed nodes (a second client with other timeouts is built from them).
    Cluster(Box<ClusterClient>, Vec<String>),
}

impl Client {
    /// Parses `redis://…`, `rediss://…` or `redis-cluster://h:p,h:p,…`.
    pub(super) fn open(url: &str) -> Result<Self> {
        let Some(seeds) = url.strip_prefix(CLUSTER_SCHEME) else {
            return redis::Client::open(url)
                .map(Client::Single)
                .map_err(store_err);
        };
        let (auth, hosts) = match seeds.rsplit_once('@') {
            Some((auth, hosts)) => (Some(auth), hosts),
            None => (None, seeds),
        };
        let hosts: Vec<&str> = hosts
            .trim_end_matches('/')
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .collect();
        if hosts.is_empty() {
            return Err(Error::Store(format!(
                "redis: {url:?} names no seed node ({CLUSTER_SCHEME}HOST:PORT,HOST:PORT,…)"
            )));
        }
        let nodes: Vec<String> = hosts
            .iter()
            .map(|h| match auth {
                Some(a) => format!("redis://{a}@{h}"),
                None => format!("redis://{h}"),
            })
            .collect();
        cluster_client(&nodes, RESPONSE_TIMEOUT)
            .map(|c| Client::Cluster(Box::new(c), nodes))
            .map_err(store_err)
    }

    /// The shared, multiplexed connection every store operation goes through.
    pub(super) async fn connect(&self) -> Result<Conn> {
        match self {
            Client::Single(c) => c
                .get_connection_manager_with_config(
                    ConnectionManagerConfig::new().set_response_timeout(Some(RESPONSE_TIMEOUT)),
                )
                .await
                .map(Conn::Single),
            Client::Cluster(c, _) => Healing::open((**c).clone())
                .await
                .map(|h| Conn::Cluster(Arc::new(h))),
        }
        .map_err(store_err)
    }

    /// A connection of its own for blocking reads (`XREAD BLOCK`), which would hold up every
    /// other command on a multiplexed connection. `block` is the longest the reads block.
    pub(super) async fn connect_blocking(&self, block: Duration) -> redis::RedisResult<Conn> {
        let timeout = block + RESPONSE_TIMEOUT;
        match self {
            Client::Single(c) => c
                .get_connection_manager_with_config(
                    ConnectionManagerConfig::new().set_response_timeout(Some(timeout)),
                )
                .await
                .map(Conn::Single),
            Client::Cluster(_, nodes) => Healing::open(cluster_client(nodes, timeout)?)
                .await
                .map(|h| Conn::Cluster(Arc::new(h))),
        }
    }
}

/// A cluster client of the seed `nodes` whose commands time out after `response_timeout`
/// (retried a few times across a failover, up to about a second apart).
fn cluster_client(
    nodes: &[String],
    response_timeout: Duration,
) -> redis::RedisResult<ClusterClient> {
    ClusterClient::builder(nodes.to_vec())
        .response_timeout(response_timeout)
        .connection_timeout(Duration::from_secs(2))
        .retries(6)
        .min_retry_wait(50)
        .max_retry_wait(1_000)
        .build()
}

/// One server's connection manager (reconnects by itself) or a cluster connection (follows the
/// slot map, and is replaced when it stops working: [`Healing`]). Cheap to clone: clones share
/// the connection.
#[derive(Clone)]
pub(super) enum Conn {
    Single(ConnectionManager),
    Cluster(Arc<Healing>),
}

/// Consecutive connection-level failures (timeouts, dropped or refused connections) after which
/// a cluster connection is replaced by a fresh one.
const FAILURES_BEFORE_RECONNECT: u32 = 3;
/// The least time between two replacements.
const RECONNECT_EVERY: Duration = Duration::from_secs(2);

/// A cluster connection that is replaced by a fresh one (the slot map read anew from the seed
/// nodes) after [`FAILURES_BEFORE_RECONNECT`] connection-level failures in a row. Why: after a
/// master's `kill -9` and failover, the `redis` crate's cluster connection usually re-reads the
/// slot map and carries on — but once in a chaos run one server's connection never did (every
/// command to the failed-over slot timed out for minutes, while the other server, on the same
/// cluster, had recovered within seconds). A fresh connection from the same client recovers it.
pub(super) struct Healing {
    client: ClusterClient,
    current: std::sync::Mutex<ClusterConnection>,
    failures: AtomicU32,
    last_reconnect: std::sync::Mutex<Option<Instant>>,
    reconnecting: tokio::sync::Mutex<()>,
}

impl Healing {
    async fn open(client: ClusterClient) -> redis::RedisResult<Self> {
        let conn = client.get_async_connection().await?;
        Ok(Healing {
            client,
            current: std::sync::Mutex::new(conn),
            failures: AtomicU32::new(0),
            last_reconnect: std::sync::Mutex::new(None),
            reconnecting: tokio::sync::Mutex::new(()),
        })
    }

    /// The connection to send through now.
    fn conn(&self) -> ClusterConnection {
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Counts a command's outcome; replaces the connection after enough failures in a row.
    async fn note<T>(&self, outcome: &redis::RedisResult<T>) {
        let failed = outcome.as_ref().err().is_some_and(|e| {
            e.is_timeout()
                || e.is_io_error()
                || e.is_connection_dropped()
                || e.is_connection_refusal()
        });
        if !failed {
            self.failures.store(0, Ordering::Relaxed);
            return;
        }
        if self.failures.fetch_add(1, Ordering::Relaxed) + 1 < FAILURES_BEFORE_RECONNECT {
            return;
        }
        // One replacement at a time; the others carry on with the current connection.
        let Ok(_one) = self.reconnecting.try_lock() else {
            return;
        };
        {
            let last = self
                .last_reconnect
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if last.is_some_and(|t| t.elapsed() < RECONNECT_EVERY) {
                return;
            }
        }
        *self
            .last_reconnect
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
        if let Ok(fresh) = self.client.get_async_connection().await {
            tracing::warn!("redis cluster: the connection failed {FAILURES_BEFORE_RECONNECT} times in a row; replaced by a fresh one");
            *self
                .current
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
            self.failures.store(0, Ordering::Relaxed);
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(h) => Box::pin(async move {
                let r = h.conn().req_packed_command(cmd).await;
                h.note(&r).await;
                r
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(h) => Box::pin(async move {
                // The cluster client follows MOVED/ASK for single commands (and re-reads the
                // slot map), not for pipelines: after a failover a pipeline to the moved slot
                // would fail until something else refreshed the map. One command to the
                // pipeline's first key (a read) makes the client learn the new owner; then the
                // pipeline (reads, or idempotent writes) is sent once more.
                let mut c = h.conn();
                let first = c.req_packed_commands(pipeline, offset, count).await;
                if !redirected(&first) {
                    h.note(&first).await;
                    return first;
                }
                if let Some(key) = first_key(pipeline) {
                    let mut probe = redis::cmd("EXISTS");
                    probe.arg(key);
                    let _ = c.req_packed_command(&probe).await;
                }
                let again = c.req_packed_commands(pipeline, offset, count).await;
                h.note(&again).await;
                again
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(h) => h.conn().get_db(),
        }
    }
}

/// Whether a pipeline's reply (or one of its commands') is a MOVED or ASK redirection.
fn redirected(reply: &redis::RedisResult<Vec<Value>>) -> bool {
    use redis::ServerErrorKind::{Ask, Moved};
    match reply {
        Err(e) => e.redirect_node().is_some(),
        Ok(values) => values
            .iter()
            .any(|v| matches!(v, Value::ServerError(e) if matches!(e.kind(), Some(Moved | Ask)))),
    }
}

/// The first key of a pipeline's first command (its first argument after the name; after the
/// script and the key count for `EVALSHA` / `EVAL`).
fn first_key(pipeline: &Pipeline) -> Option<Vec<u8>> {
    let mut args = pipeline.cmd_iter().next()?.args_iter();
    let name = match args.next()? {
        redis::Arg::Simple(n) => n.to_ascii_uppercase(),
        _ => return None,
    };
    let at = if name == b"EVALSHA" || name == b"EVAL" {
        2
    } else {
        0
    };
    match args.nth(at)? {
        redis::Arg::Simple(k) => Some(k.to_vec()),
        _ => None,
    }
}

/// How many replicas must hold a write before the store confirms it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durability {
    /// `WAIT numreplicas`: 0 confirms once the master has it (and its AOF, with
    /// `appendfsync always`).
    pub replicas: u32,
    /// `WAIT timeout`: past it, the write is reported as not confirmed (it may still be there:
    /// every confirmed write is idempotent, so the caller retries it).
    pub timeout: Duration,
}

impl Durability {
    /// The default for a store URL: one replica on a cluster (a cluster is run for failover,
    /// and a write only its master has is lost when that master dies before replicating it),
    /// none on one server (usually run without replicas; `appendfsync always` is its
    /// durability).
    pub fn default_for(url: &str) -> Self {
        Durability {
            replicas: u32::from(url.starts_with(CLUSTER_SCHEME)),
            timeout: Duration::from_secs(1),
        }
    }
}

/// Whether a `WAIT` that answered `n` replicas confirms a write under `d`.
///
/// # Errors
/// [`Error::Store`] (answered as `store_unavailable`) when fewer replicas acknowledged in time:
/// the write is not confirmed.
pub(super) fn confirmed(n: u64, d: Durability) -> Result<()> {
    if n < u64::from(d.replicas) {
        return Err(Error::Store(format!(
            "redis: the write reached {n} of {} replicas within {} ms (not confirmed; \
             retrying it is safe)",
            d.replicas,
            d.timeout.as_millis()
        )));
    }
    Ok(())
}
