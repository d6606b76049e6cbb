//! [`IntegrityStore`] on SQLite: the `standing` and `written` tables (`schema.sql`).

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};

use super::{db_err, SqliteStore};
use crate::error::Result;
use crate::store::{IntegrityStore, Quarantine, Standing, Written};

/// Takes `items` (jobs forgotten, cache entries swept or deleted) out of every writer's
/// provenance index: the quarantine's undo has nothing left to do with them, and without this
/// the index would keep a row per result for as long as the tenant lives.
pub(super) fn forget_written(
    conn: &Connection,
    items: impl IntoIterator<Item = Written>,
) -> Result<()> {
    let mut st = conn
        .prepare_cached("DELETE FROM written WHERE item = ?1")
        .map_err(db_err)?;
    for i in items {
        st.execute([i.encode()]).map_err(db_err)?;
    }
    Ok(())
}

#[async_trait]
impl IntegrityStore for SqliteStore {
    async fn standing(&self, sub: &str) -> Result<Standing> {
        let sub = sub.to_owned();
        self.read(move |conn| {
            let row: Option<(i64, Option<i64>, Option<String>)> = conn
                .prepare_cached("SELECT verified, q_at, q_reason FROM standing WHERE sub = ?1")
                .and_then(|mut st| {
                    st.query_row([sub], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                        .optional()
                })
                .map_err(db_err)?;
            Ok(
                row.map_or_else(Standing::default, |(v, at, reason)| Standing {
                    verified: v as u64,
                    quarantine: at.map(|at| Quarantine {
                        at: at as u64,
                        reason: reason.unwrap_or_default(),
                    }),
                }),
            )
        })
        .await
    }

    async fn add_verified(&self, sub: &str, n: u64) -> Result<u64> {
        let sub = sub.to_owned();
        self.run(move |conn, _| {
            conn.prepare_cached(
                "INSERT INTO standing (sub, verified) VALUES (?1, ?2) ON CONFLICT(sub) DO \
                 UPDATE SET verified = verified + excluded.verified RETURNING verified",
            )
            .and_then(|mut st| st.query_row(params![sub, n as i64], |r| r.get::<_, i64>(0)))
            .map(|v| v as u64)
            .map_err(db_err)
        })
        .await
    }

    async fn quarantine(&self, sub: &str, q: Quarantine) -> Result<bool> {
        let sub = sub.to_owned();
        self.run(move |conn, _| {
            conn.prepare_cached("INSERT INTO standing (sub) VALUES (?1) ON CONFLICT DO NOTHING")
                .and_then(|mut st| st.execute([&sub]))
                .map_err(db_err)?;
            conn.prepare_cached(
                "UPDATE standing SET q_at = ?2, q_reason = ?3 WHERE sub = ?1 AND q_at IS NULL",
            )
            .and_then(|mut st| st.execute(params![sub, q.at as i64, q.reason]))
            .map(|n| n == 1)
            .map_err(db_err)
        })
        .await
    }

    async fn lift_quarantine(&self, sub: &str) -> Result<bool> {
        let sub = sub.to_owned();
        self.run(move |conn, _| {
            conn.prepare_cached(
                "UPDATE standing SET q_at = NULL, q_reason = NULL, verified = 0 \
                 WHERE sub = ?1 AND q_at IS NOT NULL",
            )
            .and_then(|mut st| st.execute([sub]))
            .map(|n| n == 1)
            .map_err(db_err)
        })
        .await
    }

    async fn quarantined(&self, limit: usize) -> Result<Vec<(String, Quarantine)>> {
        self.read(move |conn| {
            let mut st = conn
                .prepare_cached(
                    "SELECT sub, q_at, q_reason FROM standing WHERE q_at IS NOT NULL \
                     ORDER BY q_at, sub LIMIT ?1",
                )
                .map_err(db_err)?;
            let rows = st
                .query_map([limit as i64], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        Quarantine {
                            at: r.get::<_, i64>(1)? as u64,
                            reason: r.get::<_, Option<String>>(2)?.unwrap_or_default(),
                        },
                    ))
                })
                .map_err(db_err)?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(db_err)
        })
        .await
    }

    async fn note_written(&self, sub: &str, items: Vec<Written>) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let sub = sub.to_owned();
        self.run(move |conn, _| {
            let mut st = conn
                .prepare_cached(
                    "INSERT INTO written (sub, item) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
                )
                .map_err(db_err)?;
            for i in &items {
                st.execute(params![sub, i.encode()]).map_err(db_err)?;
            }
            Ok(())
        })
        .await
    }

    async fn written_by(&self, sub: &str) -> Result<Vec<Written>> {
        let sub = sub.to_owned();
        self.read(move |conn| {
            let mut st = conn
                .prepare_cached("SELECT item FROM written WHERE sub = ?1 ORDER BY item")
                .map_err(db_err)?;
            let rows = st
                .query_map([sub], |r| r.get::<_, String>(0))
                .map_err(db_err)?;
            let items = rows.collect::<rusqlite::Result<Vec<_>>>().map_err(db_err)?;
            Ok(items.iter().filter_map(|s| Written::decode(s)).collect())
        })
        .await
    }

    async fn job_inputs(&self, ids: &[String]) -> Result<Vec<Option<(String, String)>>> {
        let ids = ids.to_vec();
        self.read(move |conn| {
            let mut st = conn
                .prepare_cached("SELECT text, model_id FROM jobs WHERE id = ?1")
                .map_err(db_err)?;
            ids.iter()
                .map(|id| {
                    st.query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()
                        .map_err(db_err)
                })
                .collect()
        })
        .await
    }

    async fn propose(&self, id: &str, sub: &str, digest: &str) -> Result<Vec<(String, String)>> {
        let (id, sub, digest) = (id.to_owned(), sub.to_owned(), digest.to_owned());
        self.run(move |conn, _| {
            conn.prepare_cached(
                "INSERT INTO proposals (job, sub, digest) VALUES (?1, ?2, ?3) \
                 ON CONFLICT(job, sub) DO UPDATE SET digest = excluded.digest",
            )
            .and_then(|mut st| st.execute(params![id, sub, digest]))
            .map_err(db_err)?;
            let mut st = conn
                .prepare_cached("SELECT sub, digest FROM proposals WHERE job = ?1 ORDER BY sub")
                .map_err(db_err)?;
            let rows = st
                .query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(db_err)?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(db_err)
        })
        .await
    }

    async fn clear_proposals(&self, id: &str) -> Result<()> {
        let id = id.to_owned();
        self.run(move |conn, _| {
            conn.prepare_cached("DELETE FROM proposals WHERE job = ?1")
                .and_then(|mut st| st.execute([id]))
                .map(|_| ())
                .map_err(db_err)
        })
        .await
    }

    async fn requeue_done(&self, ids: &[String], _now: u64) -> Result<Vec<String>> {
        let ids = ids.to_vec();
        self.run(move |conn, c| {
            let mut st = conn
                .prepare_cached(
                    "UPDATE jobs SET state = 'ready', seq = ?2, result = NULL, token = NULL, \
                     ended_at = NULL WHERE id = ?1 AND state = 'done'",
                )
                .map_err(db_err)?;
            let mut out = Vec::new();
            for id in ids {
                if st
                    .execute(params![id, c.next_seq() as i64])
                    .map_err(db_err)?
                    == 1
                {
                    out.push(id);
                }
            }
            Ok(out)
        })
        .await
    }
}
