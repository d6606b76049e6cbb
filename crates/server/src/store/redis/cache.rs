//! [`CacheStore`] on Redis: the shared cache's entries (`{P}:cache:{key}` hashes), fenced writes
//! (`cache_put.lua`) and the bytes counted against the tenant's quota.

use async_trait::async_trait;
use ternflow_core::protocol::{CacheEntry, Provenance, Vector};

use super::{parse, store_err, RedisStore, GC_SLACK_MS};
use crate::error::{Error, Result};
use crate::store::{CacheStore, Fenced, PutOutcome};
/// A writer's provenance as a cache hash keeps it (`by`, JSON; absent or `""` for none).
fn provenance(by: Option<&str>) -> Option<Provenance> {
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
