//! [`LockStore`] in memory: per-key leases with a fence.

use async_trait::async_trait;
use ternflow_core::protocol::LockGrant;

use super::MemoryStore;
use crate::error::Result;
use crate::store::{new_token, LockOutcome, LockStore};

#[async_trait]
impl LockStore for MemoryStore {
    async fn lock_acquire(&self, key: &str, ttl_ms: u64, now: u64) -> Result<LockOutcome> {
        let mut g = self.lock();
        if let Some(cur) = g.locks.get(key) {
            if cur.expires_at > now {
                return Ok(LockOutcome::Held {
                    expires_at: cur.expires_at,
                });
            }
        }
        let grant = LockGrant {
            token: new_token(),
            fence: g.next_fence(),
            expires_at: now + ttl_ms,
        };
        g.locks.insert(key.to_owned(), grant.clone());
        Ok(LockOutcome::Granted(grant))
    }

    async fn lock_renew(
        &self,
        key: &str,
        token: &str,
        ttl_ms: u64,
        now: u64,
    ) -> Result<Option<LockGrant>> {
        let mut g = self.lock();
        match g.locks.get_mut(key) {
            Some(cur) if cur.token == token && cur.expires_at > now => {
                cur.expires_at = now + ttl_ms;
                Ok(Some(cur.clone()))
            }
            _ => Ok(None),
        }
    }

    async fn lock_release(&self, key: &str, token: &str) -> Result<bool> {
        let mut g = self.lock();
        if g.locks.get(key).is_some_and(|l| l.token == token) {
            g.locks.remove(key);
            return Ok(true);
        }
        Ok(false)
    }
}
