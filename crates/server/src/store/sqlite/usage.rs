//! [`UsageStore`] on SQLite: the `usage` table (`schema.sql`).

use std::collections::BTreeMap;

use async_trait::async_trait;
use rusqlite::params;

use super::{db_err, SqliteStore};
use crate::error::Result;
use crate::store::UsageStore;

#[async_trait]
impl UsageStore for SqliteStore {
    async fn add_usage(&self, deltas: &[(String, u64)]) -> Result<()> {
        let deltas = deltas.to_vec();
        self.run(move |conn, _| {
            let mut st = conn
                .prepare_cached(
                    "INSERT INTO usage (name, n) VALUES (?1, ?2) ON CONFLICT(name) DO UPDATE \
                     SET n = n + excluded.n",
                )
                .map_err(db_err)?;
            for (name, n) in &deltas {
                st.execute(params![name, *n as i64]).map_err(db_err)?;
            }
            Ok(())
        })
        .await
    }

    async fn usage(&self) -> Result<BTreeMap<String, u64>> {
        self.read(|conn| {
            let mut st = conn
                .prepare_cached("SELECT name, n FROM usage")
                .map_err(db_err)?;
            let rows = st
                .query_map([], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
                })
                .map_err(db_err)?;
            rows.collect::<rusqlite::Result<_>>().map_err(db_err)
        })
        .await
    }
}
