//! What one open tenant is using: its worker table, its counters since it was opened, and an
//! estimate of its queue and cache for the queue-depth and cache-bytes quotas.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::workers::WorkerTable;

/// How long a sampled queue depth is trusted for the quota check (ms).
const DEPTH_FRESH_MS: u64 = 1_000;

macro_rules! tenant_counters {
    ($($name:ident: $help:literal,)*) => {
        /// A tenant's counters since it was opened on this server.
        #[derive(Debug, Default)]
        pub struct TenantCounters {
            $(#[doc = $help] pub $name: AtomicU64,)*
        }

        impl TenantCounters {
            /// `(name, help, value)` for every counter.
            pub fn list(&self) -> Vec<(&'static str, &'static str, u64)> {
                vec![$((stringify!($name), $help, self.$name.load(Ordering::Relaxed)),)*]
            }
        }
    };
}

tenant_counters! {
    jobs_enqueued: "Jobs the tenant enqueued (new ones).",
    jobs_acked: "Jobs of the tenant finished with a result.",
    embed_texts: "Texts the tenant's workers embedded on the server (POST /v1/embed).",
    embed_tokens: "Embed budget units (tokens, estimated) the tenant spent.",
    quota_refused: "Requests refused for one of the tenant's quotas.",
}

/// See the [module docs](self).
#[derive(Debug, Default)]
pub struct TenantUsage {
    /// The tenant's workers ([`WorkerTable`]).
    pub workers: WorkerTable,
    /// Its counters.
    pub counters: TenantCounters,
    /// (when sampled, jobs pending then, jobs enqueued here since).
    depth: Mutex<(u64, u64, u64)>,
    /// (when sampled, live cache bytes then, bytes stored here since).
    cache: Mutex<(u64, u64, u64)>,
}

impl TenantUsage {
    /// The counters by name (`GET /v1/stats` of the tenant's admin).
    pub fn counter_map(&self) -> BTreeMap<String, u64> {
        self.counters
            .list()
            .into_iter()
            .map(|(k, _, v)| (k.to_owned(), v))
            .collect()
    }

    /// Jobs pending (ready, delayed, leased) as of a sample younger than a second, plus what
    /// was enqueued here since; `None` when the sample is older (the caller reads the store
    /// and calls [`TenantUsage::sampled`]).
    pub fn pending_estimate(&self, now_ms: u64) -> Option<u64> {
        let d = self.depth.lock().unwrap_or_else(|p| p.into_inner());
        (d.0 != 0 && now_ms < d.0.saturating_add(DEPTH_FRESH_MS)).then_some(d.1 + d.2)
    }

    /// Records a fresh depth sample.
    pub fn sampled(&self, now_ms: u64, pending: u64) {
        *self.depth.lock().unwrap_or_else(|p| p.into_inner()) = (now_ms.max(1), pending, 0);
    }

    /// Counts `n` jobs enqueued since the last sample.
    pub fn enqueued(&self, n: u64) {
        self.depth.lock().unwrap_or_else(|p| p.into_inner()).2 += n;
        self.counters.jobs_enqueued.fetch_add(n, Ordering::Relaxed);
    }

    /// Bytes of live cache entries as of the last sample (the sweeper's, every 30 s) plus
    /// what was stored here since (replacements count again, expiries only at the next
    /// sample: an estimate that errs high); `None` before the first sample.
    pub fn cache_bytes_estimate(&self) -> Option<u64> {
        let c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        (c.0 != 0).then_some(c.1 + c.2)
    }

    /// Records a fresh sample of the live cache bytes.
    pub fn cache_sampled(&self, now_ms: u64, bytes: u64) {
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = (now_ms.max(1), bytes, 0);
    }

    /// Counts `n` cache bytes stored since the last sample.
    pub fn cache_stored(&self, n: u64) {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).2 += n;
    }

    /// Adds `n` to one counter.
    pub fn add(&self, f: impl FnOnce(&TenantCounters) -> &AtomicU64, n: u64) {
        f(&self.counters).fetch_add(n, Ordering::Relaxed);
    }
}
