//! [`LockStore`] on Redis: per-key leases with a fence (`lock_acquire.lua`, `lock_renew.lua`,
//! `lock_release.lua`), their expiry compared against the server's clock.

use async_trait::async_trait;
use ternflow_core::protocol::LockGrant;

use super::{parse, RedisStore, GC_SLACK_MS};
use crate::error::{Error, Result};
use crate::store::{new_token, LockOutcome, LockStore};
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
