//! [`ResultScan`] on SQLite: done jobs in `rowid` order, read on the reader connection.

use async_trait::async_trait;

use super::{db_err, json_err, SqliteStore};
use crate::error::Result;
use crate::store::{DoneJob, DonePage, ResultScan};

#[async_trait]
impl ResultScan for SqliteStore {
    async fn scan_done(&self, cursor: &str, limit: usize) -> Result<DonePage> {
        let after: i64 = cursor.parse().unwrap_or(0);
        let limit = limit.clamp(1, 100_000);
        self.read(move |conn| {
            let rows: Vec<(i64, String, String, String)> = conn
                .prepare_cached(
                    "SELECT rowid, id, text, result FROM jobs \
                     WHERE state = 'done' AND rowid > ?1 ORDER BY rowid LIMIT ?2",
                )
                .and_then(|mut st| {
                    st.query_map([after, limit as i64], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                    })?
                    .collect()
                })
                .map_err(db_err)?;
            let next = (rows.len() == limit).then(|| rows[rows.len() - 1].0.to_string());
            let jobs = rows
                .into_iter()
                .map(|(_, id, text, result)| {
                    Ok(DoneJob {
                        id,
                        text,
                        result: serde_json::from_str(&result).map_err(json_err)?,
                    })
                })
                .collect::<Result<_>>()?;
            Ok(DonePage { jobs, next })
        })
        .await
    }
}
