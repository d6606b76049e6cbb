//! [`UsageStore`] on Redis: one hash, `{P}:usage` (counter name → total), that every server of
//! the fleet adds to with `HINCRBY` (one `MULTI` per flush, so a flush counts whole or not at
//! all).

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::{store_err, RedisStore};
use crate::error::Result;
use crate::store::UsageStore;

#[async_trait]
impl UsageStore for RedisStore {
    async fn add_usage(&self, deltas: &[(String, u64)]) -> Result<()> {
        if deltas.is_empty() {
            return Ok(());
        }
        let key = self.k("usage");
        let mut pipe = redis::pipe();
        pipe.atomic();
        for (name, n) in deltas {
            pipe.cmd("HINCRBY").arg(&key).arg(name).arg(*n).ignore();
        }
        let mut con = self.con.clone();
        pipe.query_async::<()>(&mut con).await.map_err(store_err)
    }

    async fn usage(&self) -> Result<BTreeMap<String, u64>> {
        let mut con = self.con.clone();
        redis::cmd("HGETALL")
            .arg(self.k("usage"))
            .query_async(&mut con)
            .await
            .map_err(store_err)
    }
}
