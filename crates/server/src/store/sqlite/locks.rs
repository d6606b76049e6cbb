//! [`LockStore`] on SQLite: single-flight locks with fences and a TTL.

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};
use ternflow_core::protocol::LockGrant;

use super::{db_err, SqliteStore};
use crate::error::Result;
use crate::store::{new_token, LockOutcome, LockStore};

#[async_trait]
impl LockStore for SqliteStore {
    async fn lock_acquire(&self, key: &str, ttl_ms: u64, now: u64) -> Result<LockOutcome> {
        let key = key.to_owned();
        self.run(move |conn, c| {
            let held: Option<i64> = conn
                .prepare_cached("SELECT expires_at FROM locks WHERE key = ?1 AND expires_at > ?2")
                .and_then(|mut st| {
                    st.query_row(params![key, now as i64], |r| r.get(0))
                        .optional()
                })
                .map_err(db_err)?;
            if let Some(exp) = held {
                return Ok(LockOutcome::Held {
                    expires_at: exp as u64,
                });
            }
            let grant = LockGrant {
                token: new_token(),
                fence: c.next_fence(),
                expires_at: now + ttl_ms,
            };
            conn.prepare_cached(
                "INSERT INTO locks (key, token, fence, expires_at) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT(key) DO UPDATE SET token = excluded.token, fence = excluded.fence, \
                 expires_at = excluded.expires_at",
            )
            .and_then(|mut st| {
                st.execute(params![
                    key,
                    grant.token,
                    grant.fence as i64,
                    grant.expires_at as i64
                ])
            })
            .map_err(db_err)?;
            Ok(LockOutcome::Granted(grant))
        })
        .await
    }

    async fn lock_renew(
        &self,
        key: &str,
        token: &str,
        ttl_ms: u64,
        now: u64,
    ) -> Result<Option<LockGrant>> {
        let (key, token) = (key.to_owned(), token.to_owned());
        self.run(move |conn, _| {
            let expires_at = now + ttl_ms;
            let fence: Option<i64> = conn
                .prepare_cached(
                    "UPDATE locks SET expires_at = ?3 WHERE key = ?1 AND token = ?2 \
                     AND expires_at > ?4 RETURNING fence",
                )
                .and_then(|mut st| {
                    st.query_row(params![key, token, expires_at as i64, now as i64], |r| {
                        r.get(0)
                    })
                    .optional()
                })
                .map_err(db_err)?;
            Ok(fence.map(|f| LockGrant {
                token,
                fence: f as u64,
                expires_at,
            }))
        })
        .await
    }

    async fn lock_release(&self, key: &str, token: &str) -> Result<bool> {
        let (key, token) = (key.to_owned(), token.to_owned());
        self.run(move |conn, _| {
            conn.prepare_cached("DELETE FROM locks WHERE key = ?1 AND token = ?2")
                .and_then(|mut st| st.execute(params![key, token]))
                .map(|n| n == 1)
                .map_err(db_err)
        })
        .await
    }
}
