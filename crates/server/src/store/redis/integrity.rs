//! [`IntegrityStore`] on Redis.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P:standing:{sub}` | hash | `verified` (count), `q_at`, `q_reason` while quarantined |
//! | `P:quarantined` | zset | quarantined subs, score = since |
//! | `P:wrote:{sub}` | set | what the sub wrote: `j:{job id}`, `c:{cache key}` |
//! | `P:prop:{job id}` | hash | k-of-n agreement: sub → digest of its proposed vector |

use async_trait::async_trait;

use super::{parse, store_err, RedisStore};
use crate::error::Result;
use crate::store::{IntegrityStore, Quarantine, Standing, Written};

#[async_trait]
impl IntegrityStore for RedisStore {
    async fn standing(&self, sub: &str) -> Result<Standing> {
        let mut con = self.con.clone();
        let (v, at, reason): (Option<String>, Option<String>, Option<String>) = redis::cmd("HMGET")
            .arg(self.key("standing", sub))
            .arg(&["verified", "q_at", "q_reason"])
            .query_async(&mut con)
            .await
            .map_err(store_err)?;
        Ok(Standing {
            verified: v
                .as_deref()
                .map(|v| parse(v, "verified"))
                .transpose()?
                .unwrap_or(0),
            quarantine: at
                .as_deref()
                .map(|at| parse(at, "q_at"))
                .transpose()?
                .map(|at| Quarantine {
                    at,
                    reason: reason.unwrap_or_default(),
                }),
        })
    }

    async fn add_verified(&self, sub: &str, n: u64) -> Result<u64> {
        let mut con = self.con.clone();
        redis::cmd("HINCRBY")
            .arg(self.key("standing", sub))
            .arg("verified")
            .arg(n)
            .query_async(&mut con)
            .await
            .map_err(store_err)
    }

    async fn quarantine(&self, sub: &str, q: Quarantine) -> Result<bool> {
        let n: i64 = self
            .invoke(&self.scripts.quarantine, |i| {
                i.key(self.key("standing", sub))
                    .key(self.k("quarantined"))
                    .arg(sub)
                    .arg(q.at)
                    .arg(&q.reason);
            })
            .await?;
        Ok(n == 1)
    }

    async fn lift_quarantine(&self, sub: &str) -> Result<bool> {
        let mut con = self.con.clone();
        let k = self.key("standing", sub);
        let (n, _, _): (u64, u64, u64) = redis::pipe()
            .hdel(&k, &["q_at", "q_reason"])
            .hset(&k, "verified", 0)
            .zrem(self.k("quarantined"), sub)
            .query_async(&mut con)
            .await
            .map_err(store_err)?;
        Ok(n > 0)
    }

    async fn quarantined(&self, limit: usize) -> Result<Vec<(String, Quarantine)>> {
        let mut con = self.con.clone();
        let subs: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.k("quarantined"))
            .arg(0)
            .arg(limit.max(1) as i64 - 1)
            .query_async(&mut con)
            .await
            .map_err(store_err)?;
        let mut out = Vec::with_capacity(subs.len());
        for sub in subs {
            if let Some(q) = self.standing(&sub).await?.quarantine {
                out.push((sub, q));
            }
        }
        Ok(out)
    }

    async fn note_written(&self, sub: &str, items: Vec<Written>) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let mut con = self.con.clone();
        let members: Vec<String> = items.iter().map(Written::encode).collect();
        let _: u64 = redis::cmd("SADD")
            .arg(self.key("wrote", sub))
            .arg(members)
            .query_async(&mut con)
            .await
            .map_err(store_err)?;
        Ok(())
    }

    async fn written_by(&self, sub: &str) -> Result<Vec<Written>> {
        let mut con = self.con.clone();
        let mut members: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.key("wrote", sub))
            .query_async(&mut con)
            .await
            .map_err(store_err)?;
        members.sort();
        Ok(members.iter().filter_map(|m| Written::decode(m)).collect())
    }

    async fn job_inputs(&self, ids: &[String]) -> Result<Vec<Option<(String, String)>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("HMGET")
                .arg(self.key("job", id))
                .arg(&["text", "model_id"]);
        }
        let mut con = self.con.clone();
        let rows: Vec<(Option<String>, Option<String>)> =
            pipe.query_async(&mut con).await.map_err(store_err)?;
        Ok(rows
            .into_iter()
            .map(|(t, m)| Some((t?, m.unwrap_or_default())))
            .collect())
    }

    async fn propose(&self, id: &str, sub: &str, digest: &str) -> Result<Vec<(String, String)>> {
        let mut con = self.con.clone();
        let k = self.key("prop", id);
        let (mut all,): (Vec<(String, String)>,) = redis::pipe()
            .hset(&k, sub, digest)
            .ignore()
            .hgetall(&k)
            .query_async(&mut con)
            .await
            .map_err(store_err)?;
        all.sort();
        Ok(all)
    }

    async fn clear_proposals(&self, id: &str) -> Result<()> {
        let mut con = self.con.clone();
        let _: u64 = redis::cmd("DEL")
            .arg(self.key("prop", id))
            .query_async(&mut con)
            .await
            .map_err(store_err)?;
        Ok(())
    }

    async fn requeue_done(&self, ids: &[String], _now: u64) -> Result<Vec<String>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.invoke(&self.scripts.requeue_done, |i| {
            i.key(self.k("ready"))
                .key(self.k("seq"))
                .key(self.k("done"))
                .key(self.k("finished"));
            for id in ids {
                i.key(self.key("job", id)).key(self.key("hist", id)).arg(id);
            }
        })
        .await
    }
}
