//! Server limits and queue policy. Every number here has a default that suits a single node; the
//! CLI (`ternflow serve`) exposes the ones worth changing.

use ternflow_core::retry::{jittered_ttl_ms, Backoff};
use ternflow_core::rng::Rng;

/// A jitter source seeded from the OS (the core's generator is per-thread, not shared).
fn fresh_rng() -> Rng {
    Rng::new(rand::random())
}

/// The default longest cache TTL ([`Config::cache_ttl_max_ms`]): 30 days.
pub const CACHE_TTL_MAX_MS: u64 = 30 * 24 * 3_600_000;

/// Queue, cache, lock and HTTP limits.
#[derive(Debug, Clone)]
pub struct Config {
    /// Lease length handed out by claim and heartbeat (ms).
    pub lease_ms: u64,
    /// Longest one delivery may hold its job, heartbeats included (ms): past it the lease is not
    /// extended, expires, and the job is delivered again (a worker cannot hold a job hostage).
    pub max_lease_hold_ms: u64,
    /// Deliveries before a job is dead-lettered.
    pub max_attempts: u32,
    /// Releases of a job that do not count as an attempt (a stopping worker's hand-back); past
    /// them a release is an attempt, so a worker cannot keep a job by releasing and re-claiming it.
    pub free_releases: u32,
    /// First retry delay after a nack (ms); doubles per attempt.
    pub backoff_base_ms: u64,
    /// Longest retry delay (ms).
    pub backoff_max_ms: u64,
    /// Cache TTL when a `PUT` names none (ms).
    pub cache_ttl_ms: u64,
    /// Longest cache TTL (ms). The Redis store keeps a writer's provenance rows for cache
    /// entries [`CACHE_TTL_MAX_MS`] (with jitter and slack): a longer TTL here would let those
    /// rows go before the entries they name.
    pub cache_ttl_max_ms: u64,
    /// Jitter added to cache TTLs, as a fraction of the TTL (0.1 = up to +10 %).
    pub cache_ttl_jitter: f64,
    /// Lock TTL when an acquire names none (ms).
    pub lock_ttl_ms: u64,
    /// Longest lock TTL (ms).
    pub lock_ttl_max_ms: u64,
    /// Largest request body (bytes); larger bodies get 413.
    pub max_body_bytes: usize,
    /// Longest text in a job or an embed request (bytes); longer gets 413 `text_too_long`.
    pub max_text_bytes: usize,
    /// Most jobs in one enqueue request.
    pub max_enqueue_batch: usize,
    /// Most jobs one claim may ask for.
    pub max_claim: u32,
    /// Longest claim long-poll (ms).
    pub max_wait_ms: u64,
    /// Most texts in one embed request.
    pub max_embed_texts: usize,
    /// Most texts the embed batcher runs through the engine at once.
    pub embed_batch: usize,
    /// Embed requests waiting for the batcher before new ones get 429.
    pub embed_queue: usize,
    /// The engine thread's nice value (Linux; 0..=19): above 0 the engine's batch work yields
    /// a contended CPU to the queue's requests, whose latency is what workers wait on, and
    /// still takes every idle cycle.
    pub engine_nice: i32,
    /// Events kept for `Last-Event-ID` resume.
    pub event_ring: usize,
    /// SSE keep-alive comment interval (ms).
    pub keepalive_ms: u64,
    /// Allowed CORS origins (exact match).
    pub cors_origins: Vec<String>,
    /// Also allow `http://localhost:*` and `http://127.0.0.1:*` (browser tests on random ports).
    pub cors_allow_localhost: bool,
    /// A connection must send a request's whole header within this long (ms), counted from its
    /// first byte, or from the end of the previous response on a kept-alive connection (so this
    /// is also the keep-alive idle timeout); then it is closed.
    pub header_timeout_ms: u64,
    /// A request body must arrive within this long (ms), or the request gets 408.
    pub body_timeout_ms: u64,
    /// Most open connections; further ones are closed at once (keep it under `ulimit -n`).
    pub max_connections: usize,
    /// Most SSE streams open at once per token; more get 429.
    pub max_streams_per_token: usize,
    /// Sustained requests per second per token (a token bucket); more get 429 with Retry-After.
    pub rate_per_token: u32,
    /// Burst of the per-token bucket.
    pub rate_burst: u32,
    /// After shutdown begins, connections still open this long (ms) are closed.
    pub shutdown_deadline_ms: u64,
    /// How often the dashboard's history takes a stats sample (ms).
    pub stats_sample_ms: u64,
    /// Stats samples kept for the dashboard (900 at 1 s: the last 15 minutes).
    pub stats_samples: usize,
    /// How the server checks workers' results (`crate::integrity`).
    pub verify: crate::integrity::Policy,
    /// Per-tenant overrides of [`Config::verify`].
    pub verify_tenants: std::collections::HashMap<String, crate::integrity::PolicyOverride>,
    /// Most tenants open at once (their stores; least recently used closed first). By
    /// default [`default_max_open_tenants`]: an eighth of the process's file-descriptor limit.
    pub max_open_tenants: usize,
    /// A tenant unused this long (ms) is closed (reopened by its next request).
    pub tenant_idle_ms: u64,
    /// Most long-polling claims one token has waiting at once; more get 429.
    pub max_polls_per_token: usize,
    /// Most single-flight locks one token holds at once on this server; more get 429
    /// (`crate::lock_holds`).
    pub max_locks_per_token: usize,
    /// Longest one token holds one lock on this server (ms), renewals and re-takes included;
    /// then the key is other workers' for as long (`crate::lock_holds`).
    pub max_lock_hold_ms: u64,
    /// Most open connections from one IP address; more are closed at once.
    pub max_connections_per_ip: usize,
    /// `POST /v1/embed` budget of one signed token per minute (token estimate,
    /// [`ternflow_core::http_handler::embed_units`]); the tenant's own budget is [`Config::quotas`].
    pub embed_tokens_per_min: u32,
    /// Every signed tenant's quotas.
    pub quotas: crate::quota::Quotas,
    /// Per-tenant overrides of [`Config::quotas`].
    pub tenant_quotas: std::collections::HashMap<String, crate::quota::QuotaOverride>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            lease_ms: 30_000,
            max_lease_hold_ms: 600_000,
            max_attempts: 5,
            free_releases: 3,
            backoff_base_ms: 1_000,
            backoff_max_ms: 60_000,
            cache_ttl_ms: 24 * 3_600_000,
            cache_ttl_max_ms: CACHE_TTL_MAX_MS,
            cache_ttl_jitter: 0.1,
            lock_ttl_ms: 30_000,
            lock_ttl_max_ms: 300_000,
            max_body_bytes: 2 * 1024 * 1024,
            max_text_bytes: 16 * 1024,
            max_enqueue_batch: 1_000,
            max_claim: 256,
            max_wait_ms: 30_000,
            max_embed_texts: 256,
            embed_batch: 32,
            embed_queue: 64,
            engine_nice: 10,
            event_ring: 1_024,
            keepalive_ms: 15_000,
            cors_origins: Vec::new(),
            cors_allow_localhost: false,
            header_timeout_ms: 10_000,
            body_timeout_ms: 30_000,
            max_connections: 1_024,
            max_streams_per_token: 64,
            rate_per_token: 10_000,
            rate_burst: 20_000,
            shutdown_deadline_ms: 10_000,
            stats_sample_ms: 1_000,
            stats_samples: 900,
            verify: crate::integrity::Policy::default(),
            verify_tenants: std::collections::HashMap::new(),
            max_open_tenants: default_max_open_tenants(),
            tenant_idle_ms: 300_000,
            max_polls_per_token: 8,
            max_locks_per_token: 1_024,
            max_lock_hold_ms: 600_000,
            max_connections_per_ip: 512,
            embed_tokens_per_min: 20_000,
            quotas: crate::quota::Quotas::default(),
            tenant_quotas: std::collections::HashMap::new(),
        }
    }
}

impl Config {
    /// The verification policy of `tenant`: the server's, with the tenant's override applied.
    pub fn verify_policy(&self, tenant: &str) -> crate::integrity::Policy {
        match self.verify_tenants.get(tenant) {
            Some(o) => self.verify.with(o),
            None => self.verify.clone(),
        }
    }

    /// The quotas of `tenant`: the server's, with the tenant's override applied.
    pub fn quotas_of(&self, tenant: &str) -> crate::quota::Quotas {
        match self.tenant_quotas.get(tenant) {
            Some(o) => self.quotas.with(o),
            None => self.quotas,
        }
    }

    /// Retry delay after the `attempt`-th delivery failed: `base · 2^(attempt-1)` capped at
    /// `backoff_max_ms`, with equal jitter (uniform in `[d/2, d]`) so retries of a burst spread
    /// ([`Backoff::equal_jitter_ms`], the same mechanism the worker uses).
    pub fn backoff_ms(&self, attempt: u32) -> u64 {
        let b = Backoff {
            base_ms: self.backoff_base_ms,
            max_ms: self.backoff_max_ms,
            max_attempts: self.max_attempts,
        };
        b.equal_jitter_ms(attempt.saturating_sub(1), &fresh_rng())
    }

    /// A cache TTL: the request's (or the default), clamped, ± `cache_ttl_jitter`
    /// ([`jittered_ttl_ms`], as the worker's local TTLs).
    pub fn cache_ttl(&self, requested: Option<u64>) -> u64 {
        let ttl = requested
            .unwrap_or(self.cache_ttl_ms)
            .clamp(1, self.cache_ttl_max_ms);
        jittered_ttl_ms(ttl, self.cache_ttl_jitter, &fresh_rng()).max(1)
    }

    /// A lock TTL: the request's (or the default), clamped to `1..=lock_ttl_max_ms`.
    pub fn lock_ttl(&self, requested: Option<u64>) -> u64 {
        requested
            .unwrap_or(self.lock_ttl_ms)
            .clamp(1, self.lock_ttl_max_ms)
    }
}

/// The soft limit on this process's open file descriptors (`RLIMIT_NOFILE`); `None` where
/// there is none or it cannot be read.
#[must_use]
pub fn fd_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given and nothing else.
        let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
        // rlim_t is u64 on Linux, not on every unix.
        #[allow(clippy::useless_conversion)]
        let cur = u64::from(r.rlim_cur);
        (rc == 0 && r.rlim_cur != libc::RLIM_INFINITY).then_some(cur)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Open tenants by default: an eighth of the file-descriptor limit, within 16..=4096. An open
/// SQLite tenant holds about 5.3 descriptors (docs/security.md), so its tenants use at most
/// two thirds of the limit and connections keep the rest (1 024 → 128 tenants, ~680 fds).
#[must_use]
pub fn default_max_open_tenants() -> usize {
    let n = fd_limit().map_or(4_096, |l| l / 8);
    usize::try_from(n.clamp(16, 4_096)).unwrap_or(4_096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_caps_and_jitters() {
        let c = Config::default();
        for _ in 0..100 {
            let d1 = c.backoff_ms(1);
            assert!((500..=1_000).contains(&d1), "{d1}");
            let d3 = c.backoff_ms(3);
            assert!((2_000..=4_000).contains(&d3), "{d3}");
            let d20 = c.backoff_ms(20);
            assert!((30_000..=60_000).contains(&d20), "{d20}");
        }
    }

    #[test]
    fn cache_ttl_has_bounded_jitter() {
        let c = Config::default();
        for _ in 0..100 {
            let t = c.cache_ttl(Some(10_000));
            assert!((9_000..=11_000).contains(&t), "{t}");
        }
        assert!(c.cache_ttl(Some(u64::MAX)) <= c.cache_ttl_max_ms * 11 / 10);
    }
}
