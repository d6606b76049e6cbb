//! What one open tenant is using: its worker table, its counters since it was opened on this
//! server, and an estimate of its queue and cache for the queue-depth and cache-bytes quotas.
//!
//! The counters are added to the tenant's store ([`TenantUsage::flush`], every
//! [`USAGE_FLUSH_EVERY`] and when the tenant is closed), which keeps the totals over the
//! tenant's life and every server's together: what its admin's `GET /v1/stats` reads
//! ([`TenantUsage::totals`]). `/metrics` shows this server's own since it opened the tenant
//! (a Prometheus counter per instance; a query sums the instances).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::Result;
use crate::store::UsageStore;
use crate::workers::WorkerTable;

/// How often each open tenant's counters are added to its store.
pub(crate) const USAGE_FLUSH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

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
    /// Each counter's value (in [`TenantCounters::list`] order) when it was last added to the
    /// store; held across a flush, so two never add the same counts.
    flushed: tokio::sync::Mutex<Vec<u64>>,
}

impl TenantUsage {
    /// This server's counters by name, since it opened the tenant (the operator's dashboard).
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

    /// Adds what was counted here since the last flush to the tenant's totals in `store`.
    ///
    /// # Errors
    /// The store's (nothing is lost: the next flush adds it; a flush the store applied but whose
    /// answer was lost is added again, so the totals can err high, never low).
    pub async fn flush(&self, store: &dyn UsageStore) -> Result<()> {
        let mut flushed = self.flushed.lock().await;
        let now = self.counters.list();
        flushed.resize(now.len(), 0);
        let deltas: Vec<(String, u64)> = now
            .iter()
            .zip(flushed.iter())
            .filter(|((_, _, v), f)| v > f)
            .map(|((name, _, v), f)| ((*name).to_owned(), v - f))
            .collect();
        if deltas.is_empty() {
            return Ok(());
        }
        store.add_usage(&deltas).await?;
        *flushed = now.into_iter().map(|(_, _, v)| v).collect();
        Ok(())
    }

    /// The tenant's totals: the store's (every server's flushes) and what this server counted
    /// since its last flush.
    ///
    /// # Errors
    /// The store's.
    pub async fn totals(&self, store: &dyn UsageStore) -> Result<BTreeMap<String, u64>> {
        let flushed = self.flushed.lock().await;
        let mut totals = store.usage().await?;
        for (i, (name, _, v)) in self.counters.list().into_iter().enumerate() {
            let unflushed = v - flushed.get(i).copied().unwrap_or(0);
            *totals.entry(name.to_owned()).or_default() += unflushed;
        }
        Ok(totals)
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
