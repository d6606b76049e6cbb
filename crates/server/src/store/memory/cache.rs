//! [`CacheStore`] in memory: the shared cache's entries, fenced writes and the bytes counted
//! against the quota.

use async_trait::async_trait;
use ternflow_core::protocol::CacheEntry;

use super::MemoryStore;
use crate::error::Result;
use crate::store::{CacheStore, Fenced, PutOutcome, Written};

#[async_trait]
impl CacheStore for MemoryStore {
    async fn cache_get(&self, key: &str, now: u64) -> Result<Option<CacheEntry>> {
        let g = self.lock();
        Ok(g.cache.get(key).filter(|e| e.expires_at > now).cloned())
    }

    async fn cache_put(
        &self,
        key: &str,
        entry: CacheEntry,
        by: Fenced,
        now: u64,
    ) -> Result<PutOutcome> {
        let mut g = self.lock();
        if by == Fenced::ByLock
            && !g
                .locks
                .get(key)
                .is_some_and(|l| l.expires_at > now && l.fence == entry.fence)
        {
            return Ok(PutOutcome::Unfenced);
        }
        let live = g.cache.get(key).filter(|e| e.expires_at > now).cloned();
        if let Some(cur) = &live {
            if cur.fence > entry.fence {
                return Ok(PutOutcome::Stale(cur.clone()));
            }
        }
        g.cache.insert(key.to_owned(), entry);
        Ok(PutOutcome::Stored {
            replaced: live.is_some(),
        })
    }

    async fn cache_delete(&self, key: &str) -> Result<bool> {
        let mut g = self.lock();
        let gone = g.cache.remove(key).is_some();
        if gone {
            g.forget_written(&Written::Cache(key.to_owned()));
        }
        Ok(gone)
    }

    async fn cache_bytes(&self, now: u64) -> Result<u64> {
        Ok(self
            .lock()
            .cache
            .iter()
            .filter(|(_, e)| e.expires_at > now)
            .map(|(k, e)| crate::quota::entry_bytes(k, e.vector.0.len()))
            .sum())
    }

    async fn sweep(&self, now: u64, limit: usize) -> Result<u64> {
        let mut g = self.lock();
        let expired_entries: Vec<String> = g
            .cache
            .iter()
            .filter(|(_, e)| e.expires_at <= now)
            .map(|(k, _)| k.clone())
            .take(limit)
            .collect();
        let expired_locks: Vec<String> = g
            .locks
            .iter()
            .filter(|(_, l)| l.expires_at <= now)
            .map(|(k, _)| k.clone())
            .take(limit)
            .collect();
        let n = (expired_entries.len() + expired_locks.len()) as u64;
        for k in expired_entries {
            g.cache.remove(&k);
            g.forget_written(&Written::Cache(k));
        }
        for k in expired_locks {
            g.locks.remove(&k);
        }
        Ok(n)
    }
}
