//! [`ResultScan`] on Redis: pages over the indexes of finished ids the ack scripts keep, then one
//! pipelined `HMGET state text result` per page. Nothing scans the keyspace (`SCAN` is per node
//! in a cluster, and visits every key). Ids whose job hash is gone (the done-retention expiry) or
//! is no longer done are taken off their index as met.
//!
//! Two indexes, read one after the other: `P:done`, where earlier versions put every finished id
//! with score 0 (ids come in byte order and a page resumes after the last id it gave: `ZRANGE …
//! BYLEX`), then `P:finished`, where acks now put them scored by the order they finished (a page
//! resumes after the last score it gave: `ZRANGE … BYSCORE`). A sorted set whose scores differ
//! cannot be paged by id, so the old members stay in their own set instead of being mixed in.
//! The cursor says which: `l:{id}` in the old index, `s:{score}` in the new one.

use async_trait::async_trait;

use super::{parse, parse_json, store_err, RedisStore};
use crate::error::Result;
use crate::store::{DoneJob, DonePage, ResultScan};

/// Where a scan stands.
enum Cursor {
    /// In `P:done`, after this id ("" = from its start).
    Lex(String),
    /// In `P:finished`, after this score (`None` = from its start).
    Score(Option<u64>),
}

impl Cursor {
    fn parse(s: &str) -> Result<Self> {
        Ok(if let Some(id) = s.strip_prefix("l:") {
            Cursor::Lex(id.to_owned())
        } else if let Some(n) = s.strip_prefix("s:") {
            Cursor::Score(Some(parse(n, "scan cursor")?))
        } else {
            // "" starts a scan; anything else was an earlier version's id cursor.
            Cursor::Lex(s.to_owned())
        })
    }
}

#[async_trait]
impl ResultScan for RedisStore {
    async fn scan_done(&self, cursor: &str, limit: usize) -> Result<DonePage> {
        let mut con = self.con.clone();
        let limit = limit.clamp(1, 10_000);
        let mut at = Cursor::parse(cursor)?;
        // The ids of this page, their index, and the cursor after them.
        let (index, ids, next) = loop {
            match at {
                Cursor::Lex(after) => {
                    let index = self.k("done");
                    let from = if after.is_empty() {
                        "-".to_owned()
                    } else {
                        format!("({after}")
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
                        at = Cursor::Score(None);
                        continue;
                    }
                    let next = if ids.len() == limit {
                        format!("l:{}", ids[ids.len() - 1])
                    } else {
                        "s:0".to_owned()
                    };
                    break (index, ids, Some(next));
                }
                Cursor::Score(after) => {
                    let index = self.k("finished");
                    let from = after.map_or_else(|| "-inf".to_owned(), |s| format!("({s}"));
                    let rows: Vec<(String, u64)> = redis::cmd("ZRANGE")
                        .arg(&index)
                        .arg(from)
                        .arg("+inf")
                        .arg("BYSCORE")
                        .arg("LIMIT")
                        .arg(0)
                        .arg(limit)
                        .arg("WITHSCORES")
                        .query_async(&mut con)
                        .await
                        .map_err(store_err)?;
                    if rows.is_empty() {
                        return Ok(DonePage {
                            jobs: Vec::new(),
                            next: None,
                        });
                    }
                    let next =
                        (rows.len() == limit).then(|| format!("s:{}", rows[rows.len() - 1].1));
                    break (
                        index,
                        rows.into_iter().map(|(id, _)| id).collect::<Vec<_>>(),
                        next,
                    );
                }
            }
        };
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
        Ok(DonePage { jobs, next })
    }
}
