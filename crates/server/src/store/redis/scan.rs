//! [`ResultScan`] on Redis: pages over `P:done`, the index of finished ids the ack scripts keep
//! (a sorted set, every score 0, so ids come in byte order and a page resumes after the last id
//! it gave: `ZRANGE … BYLEX`), then one pipelined `HMGET state text result` per page. Nothing
//! scans the keyspace (`SCAN` is per node in a cluster, and visits every key). Ids whose job hash
//! is gone (the done-retention expiry) or is no longer done are taken off the index as met.

use async_trait::async_trait;

use super::{parse_json, store_err, RedisStore};
use crate::error::Result;
use crate::store::{DoneJob, DonePage, ResultScan};

#[async_trait]
impl ResultScan for RedisStore {
    async fn scan_done(&self, cursor: &str, limit: usize) -> Result<DonePage> {
        let mut con = self.con.clone();
        let limit = limit.clamp(1, 10_000);
        let index = self.k("done");
        let from = if cursor.is_empty() {
            "-".to_owned()
        } else {
            format!("({cursor}")
        };
        let ids: Vec<String> = redis::cmd("ZRANGE")
            .arg(&index)
            .arg(from)
            .arg("+")
            .arg("BYLEX")
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut con)
            .await
            .map_err(store_err)?;
        if ids.is_empty() {
            return Ok(DonePage {
                jobs: Vec::new(),
                next: None,
            });
        }
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.cmd("HMGET")
                .arg(self.key("job", id))
                .arg(&["state", "text", "result"]);
        }
        let rows: Vec<Vec<Option<String>>> = pipe.query_async(&mut con).await.map_err(store_err)?;
        let mut jobs = Vec::new();
        let mut gone = Vec::new();
        for (id, row) in ids.iter().zip(rows) {
            match <[Option<String>; 3]>::try_from(row).unwrap_or_default() {
                [Some(state), Some(text), Some(result)] if state == "done" => jobs.push(DoneJob {
                    id: id.clone(),
                    text,
                    result: parse_json(&result, "result")?,
                }),
                _ => gone.push(id),
            }
        }
        if !gone.is_empty() {
            // A job requeued meanwhile is taken off by its requeue; one forgotten is gone.
            let _: u64 = redis::cmd("ZREM")
                .arg(&index)
                .arg(&gone)
                .query_async(&mut con)
                .await
                .map_err(store_err)?;
        }
        Ok(DonePage {
            jobs,
            next: (ids.len() == limit).then(|| ids[ids.len() - 1].clone()),
        })
    }
}
