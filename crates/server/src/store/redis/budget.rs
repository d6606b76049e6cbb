//! [`BudgetStore`] on Redis: the budgets every server of a fleet spends from (`budget.lua`, a
//! GCRA over Redis's clock, so the servers' clocks do not matter).
//!
//! | key | type | holds |
//! |---|---|---|
//! | `{P}:budget:{name}` | string | the budget's theoretical arrival time (Unix µs); expires when the budget is full again |
//!
//! Why a script of our own: the server's own buckets are `governor`'s, which keeps its state in
//! the process, and Redis has no rate limiter built in (`redis-cell` is a module, which a managed
//! Redis may not load). What is needed here is small: several budgets paid all or none, in the
//! tenant's cluster slot, on Redis's clock. The algorithm is governor's, in twenty lines of Lua.

use async_trait::async_trait;

use super::RedisStore;
use crate::error::{Error, Result};
use crate::store::{Budget, BudgetStore, Spend};

#[async_trait]
impl BudgetStore for RedisStore {
    async fn spend(&self, budgets: &[Budget], cost: u32) -> Result<Option<Spend>> {
        if budgets.is_empty() {
            return Ok(Some(Spend::Spent));
        }
        let (kind, i, ms): (u8, usize, u64) = self
            .invoke(&self.scripts.budget, |inv| {
                for b in budgets {
                    inv.key(self.key("budget", &b.name));
                }
                inv.arg(cost.max(1));
                for b in budgets {
                    inv.arg(b.per_min.max(1));
                }
            })
            .await?;
        let budget = i.saturating_sub(1);
        match kind {
            0 => Ok(Some(Spend::Spent)),
            1 => Ok(Some(Spend::Wait {
                budget,
                retry_after_ms: ms,
            })),
            2 => Ok(Some(Spend::Never { budget })),
            k => Err(Error::Store(format!("redis: budget.lua answered {k}"))),
        }
    }
}
