//! [`CacheStore`] on SQLite: fenced entries with a TTL, their writers, the byte count.

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};
use ternflow_core::protocol::{CacheEntry, Vector};

use super::integrity::forget_written;
use super::rows::{decode_vec, encode_vec};
use super::{db_err, json_err, SqliteStore};
use crate::error::Result;
use crate::store::{CacheStore, Fenced, PutOutcome, Written};

fn live_entry(conn: &Connection, key: &str, now: u64) -> Result<Option<CacheEntry>> {
    type Row = (String, Vec<u8>, i64, i64, Option<String>);
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT model_id, vector, fence, expires_at, by_json FROM cache \
             WHERE key = ?1 AND expires_at > ?2",
        )
        .and_then(|mut st| {
            st.query_row(params![key, now as i64], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .optional()
        })
        .map_err(db_err)?;
    row.map(|(model_id, v, fence, exp, by)| {
        Ok(CacheEntry {
            model_id,
            vector: Vector(decode_vec(&v)?),
            fence: fence as u64,
            expires_at: exp as u64,
            by: by.as_deref().and_then(|b| serde_json::from_str(b).ok()),
        })
    })
    .transpose()
}

#[async_trait]
impl CacheStore for SqliteStore {
    async fn cache_get(&self, key: &str, now: u64) -> Result<Option<CacheEntry>> {
        let key = key.to_owned();
        self.read(move |conn| live_entry(conn, &key, now)).await
    }

    async fn cache_get_many(&self, keys: &[String], now: u64) -> Result<Vec<Option<CacheEntry>>> {
        let keys = keys.to_vec();
        // One trip to the reader thread for the lot (each lookup one statement).
        self.read(move |conn| keys.iter().map(|k| live_entry(conn, k, now)).collect())
            .await
    }

    async fn cache_put(
        &self,
        key: &str,
        entry: CacheEntry,
        by: Fenced,
        now: u64,
    ) -> Result<PutOutcome> {
        let key = key.to_owned();
        let fenced = by;
        let by = entry
            .by
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(json_err)?;
        self.run(move |conn, _| {
            if fenced == Fenced::ByLock {
                let lock: Option<i64> = conn
                    .prepare_cached("SELECT fence FROM locks WHERE key = ?1 AND expires_at > ?2")
                    .and_then(|mut st| {
                        st.query_row(params![key, now as i64], |r| r.get(0))
                            .optional()
                    })
                    .map_err(db_err)?;
                if lock != Some(entry.fence as i64) {
                    return Ok(PutOutcome::Unfenced);
                }
            }
            let cur = live_entry(conn, &key, now)?;
            if let Some(cur) = &cur {
                if cur.fence > entry.fence {
                    return Ok(PutOutcome::Stale(cur.clone()));
                }
            }
            conn.prepare_cached(
                "INSERT INTO cache (key, model_id, vector, fence, expires_at, by_json) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(key) DO UPDATE SET \
                 model_id = excluded.model_id, vector = excluded.vector, \
                 fence = excluded.fence, expires_at = excluded.expires_at, \
                 by_json = excluded.by_json",
            )
            .and_then(|mut st| {
                st.execute(params![
                    key,
                    entry.model_id,
                    encode_vec(&entry.vector.0),
                    entry.fence as i64,
                    entry.expires_at as i64,
                    by
                ])
            })
            .map_err(db_err)?;
            Ok(PutOutcome::Stored {
                replaced: cur.is_some(),
            })
        })
        .await
    }

    async fn cache_delete(&self, key: &str) -> Result<bool> {
        let key = key.to_owned();
        self.run(move |conn, _| {
            let gone = conn
                .prepare_cached("DELETE FROM cache WHERE key = ?1")
                .and_then(|mut st| st.execute([&key]))
                .map_err(db_err)?
                == 1;
            if gone {
                forget_written(conn, [Written::Cache(key)])?;
            }
            Ok(gone)
        })
        .await
    }

    async fn cache_bytes(&self, now: u64) -> Result<u64> {
        self.read(move |conn| {
            conn.prepare_cached(
                "SELECT COALESCE(SUM(length(CAST(key AS BLOB)) + length(vector)), 0) \
                 FROM cache WHERE expires_at > ?1",
            )
            .and_then(|mut st| st.query_row([now as i64], |r| r.get::<_, i64>(0)))
            .map(|n| n.max(0) as u64)
            .map_err(db_err)
        })
        .await
    }

    async fn sweep(&self, now: u64, limit: usize) -> Result<u64> {
        self.run(move |conn, _| {
            let limit = limit.min(i64::MAX as usize) as i64;
            let swept: Vec<String> = conn
                .prepare_cached(
                    "DELETE FROM cache WHERE key IN (SELECT key FROM cache \
                     WHERE expires_at <= ?1 LIMIT ?2) RETURNING key",
                )
                .and_then(|mut st| {
                    st.query_map(params![now as i64, limit], |r| r.get(0))?
                        .collect()
                })
                .map_err(db_err)?;
            let n = swept.len() as u64;
            forget_written(conn, swept.into_iter().map(Written::Cache))?;
            let locks = conn
                .prepare_cached(
                    "DELETE FROM locks WHERE key IN (SELECT key FROM locks \
                     WHERE expires_at <= ?1 LIMIT ?2)",
                )
                .and_then(|mut st| st.execute(params![now as i64, limit]))
                .map_err(db_err)? as u64;
            Ok(n + locks)
        })
        .await
    }
}
