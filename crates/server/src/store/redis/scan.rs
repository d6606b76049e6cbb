//! [`ResultScan`] on Redis: `SCAN` over the job hashes (`P:job:*`), then one pipelined
//! `HMGET state text result` per page. There is no index of done jobs (the queue scripts keep
//! none), so a scan visits every job hash; `SCAN` may return a key twice, and the caller dedupes.

use async_trait::async_trait;

use super::{parse_json, store_err, RedisStore};
use crate::error::Result;
use crate::store::{DoneJob, DonePage, ResultScan};

#[async_trait]
impl ResultScan for RedisStore {
    async fn scan_done(&self, cursor: &str, limit: usize) -> Result<DonePage> {
        let mut con = self.con.clone();
        let start: u64 = cursor.parse().unwrap_or(0);
        let job_prefix = format!("{}:job:", self.prefix);
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(start)
            .arg("MATCH")
            .arg(format!("{job_prefix}*"))
            .arg("COUNT")
            .arg(limit.clamp(1, 10_000))
            .query_async(&mut con)
            .await
            .map_err(store_err)?;
        let mut pipe = redis::pipe();
        for k in &keys {
            pipe.cmd("HMGET").arg(k).arg(&["state", "text", "result"]);
        }
        let rows: Vec<Vec<Option<String>>> = if keys.is_empty() {
            Vec::new()
        } else {
            pipe.query_async(&mut con).await.map_err(store_err)?
        };
        let mut jobs = Vec::new();
        for (k, row) in keys.iter().zip(rows) {
            let [Some(state), Some(text), Some(result)] =
                <[Option<String>; 3]>::try_from(row).unwrap_or_default()
            else {
                continue;
            };
            if state != "done" {
                continue;
            }
            jobs.push(DoneJob {
                id: k[job_prefix.len()..].to_owned(),
                text,
                result: parse_json(&result, "result")?,
            });
        }
        Ok(DonePage {
            jobs,
            next: (next != 0).then(|| next.to_string()),
        })
    }
}
