//! [`IntegrityStore`] on Redis.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P:standing:{sub}` | hash | `verified` (count), `q_at`, `q_reason` while quarantined |
//! | `P:quarantined` | zset | quarantined subs, score = since |
//! | `P:wj:{sub}`, `P:wc:{sub}` | zset | what the sub wrote, scored by when: `j:{job id}` (kept for the done-retention), `c:{cache key}` (for the longest cache TTL); trimmed as it writes (`note_written.lua`) |
//! | `P:wrote:{sub}` | set | what the sub wrote, as earlier versions kept it (read; no longer written; its rows move into `wj`/`wc`, 1 000 with each of the sub's writes) |
//! | `P:prop:{job id}` | hash | k-of-n agreement: sub → digest of its proposed vector |

use async_trait::async_trait;

use super::{parse, store_err, RedisStore, GC_SLACK_MS};
use crate::config::CACHE_TTL_MAX_MS;
use crate::error::Result;
use crate::store::{IntegrityStore, Quarantine, Standing, Written};

/// How long a writer's rows for cache entries are kept: the longest cache TTL, its jitter (up
/// to a tenth more) and the slack Redis keeps an entry past its expiry, so no row goes while the
/// entry it names can still be read.
const CACHE_ROWS_KEEP_MS: u64 = CACHE_TTL_MAX_MS + CACHE_TTL_MAX_MS / 10 + 1 + GC_SLACK_MS;

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
        let _: i64 = self
            .invoke(&self.scripts.note_written, |i| {
                i.key(self.key("wj", sub))
                    .key(self.key("wc", sub))
                    .key(self.key("wrote", sub))
                    .arg(
                        self.done_retention_ms
                            .map(|ms| ms.saturating_add(GC_SLACK_MS).to_string())
                            .unwrap_or_default(),
                    )
                    .arg(CACHE_ROWS_KEEP_MS);
                for w in &items {
                    i.arg(w.encode());
                }
            })
            .await?;
        Ok(())
    }

    async fn written_by(&self, sub: &str) -> Result<Vec<Written>> {
        let mut con = self.con.clone();
        let (old, jobs, cache): (Vec<String>, Vec<String>, Vec<String>) = redis::pipe()
            .smembers(self.key("wrote", sub))
            .zrange(self.key("wj", sub), 0, -1)
            .zrange(self.key("wc", sub), 0, -1)
            .query_async(&mut con)
            .await
            .map_err(store_err)?;
        let mut members: Vec<String> = old.into_iter().chain(jobs).chain(cache).collect();
        members.sort();
        members.dedup();
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
