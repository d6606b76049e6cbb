//! The worker's tunables, with defaults suited to a browser worker.

use serde::{Deserialize, Serialize};

use crate::retry::Backoff;

/// Pipeline settings. Every field has a default; the JS API passes a partial object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Config {
    /// Worker name (claims, metrics, attempt history). Empty (the default): the adapter picks a
    /// random one (`w-` and 8 hex digits), so workers never share a metrics snapshot.
    pub worker_id: String,
    /// Most jobs being worked on at once: claims never ask for more than the free slots. A job
    /// whose ack is queued or on its way frees its slot (the next claim overlaps those acks);
    /// leases held in all stay at most twice this.
    pub concurrency: u32,
    /// Longest text accepted, in UTF-8 bytes; longer ones are dead-lettered as `text_too_long`.
    pub max_text_bytes: usize,
    /// Local cache TTL, ms (jittered by `ttl_jitter`).
    pub local_ttl_ms: u64,
    /// Remote cache TTL asked of the server, ms.
    pub remote_ttl_ms: u64,
    /// ± fraction applied to TTLs.
    pub ttl_jitter: f64,
    /// Single-flight lock TTL, ms (renewed while held).
    pub lock_ttl_ms: u64,
    /// How long to wait for a lock held elsewhere, re-checking the caches between tries.
    pub lock_wait: Backoff,
    /// Retries of transient failures inside the worker before the job is nacked.
    pub retry: Backoff,
    /// Long-poll wait of a claim, ms.
    pub claim_wait_ms: u64,
    /// Longest idle wait for an SSE wake-up before claiming anyway, ms.
    pub watchdog_ms: u64,
    /// Consecutive engine failures that open the engine breaker.
    pub engine_breaker_failures: u32,
    /// Consecutive backend failures that open the backend breaker.
    pub backend_breaker_failures: u32,
    /// How long an open breaker refuses calls before a half-open trial, ms.
    pub breaker_open_ms: u64,
    /// Sustained backend calls per second.
    pub backend_rate_per_s: f64,
    /// Backend burst.
    pub backend_burst: u32,
    /// Seed for jitter and trace ids (0 = from the clock).
    pub seed: u64,
    /// How long a finished job's ack waits for others to share its request (queue loop only), ms.
    /// It never waits once every job in flight has finished. The default outlasts one engine
    /// message (32 texts, ~50 ms on the reference machine), so the results of two messages share
    /// a request: 62 jobs per ack instead of 32, CPU per job outside the engine 0.55 -> 0.41 ms
    /// (docs/worker.md, "Acks that wait for the next engine message").
    pub ack_linger_ms: u64,
    /// Most acks in one request.
    pub ack_batch_max: u32,
    /// Whether queue jobs write their vectors into the local cache (IndexedDB in a browser).
    /// Reads are unaffected: a queue job still finds a text this browser stored. See
    /// docs/worker.md, "Queue results in the local cache".
    pub queue_local_writes: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            worker_id: String::new(),
            concurrency: 128,
            max_text_bytes: 16 * 1024,
            local_ttl_ms: 7 * 24 * 3_600_000,
            remote_ttl_ms: 24 * 3_600_000,
            ttl_jitter: 0.1,
            lock_ttl_ms: 10_000,
            lock_wait: Backoff {
                base_ms: 20,
                max_ms: 1_000,
                max_attempts: 10,
            },
            retry: Backoff::default(),
            claim_wait_ms: 1_000,
            watchdog_ms: 5_000,
            engine_breaker_failures: 3,
            backend_breaker_failures: 5,
            breaker_open_ms: 10_000,
            backend_rate_per_s: 50.0,
            backend_burst: 20,
            seed: 0,
            ack_linger_ms: 60,
            ack_batch_max: 128,
            queue_local_writes: false,
        }
    }
}
