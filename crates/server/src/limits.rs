//! Per-token limits: a request rate (token bucket, `governor`), open SSE streams, waiting long
//! polls, a signed token's own claim rate, and the embed budgets (per token and per tenant,
//! cost-based: a request's cost taken at once). Applied after authentication, keyed by the
//! token's digest (or the tenant's name), so unknown tokens (401) never add keys.
//!
//! What a token may *spend* — its claims a minute, its and its tenant's embed units a minute —
//! is a budget of the tenant's store ([`BudgetStore`]): on a fleet sharing one Redis it holds
//! across every server (a token sent to ten servers gets one budget, not ten); on a store of one
//! server's own, the server's own `governor` buckets are the budgets. While Redis cannot be
//! reached a request that spends is refused (503 `store_unavailable`, as the worker routes'
//! quarantine gate does): a budget does not fail open. What a token may *hold* on a server —
//! its request rate, streams and long polls — protects that server's CPU and connections, and
//! stays per server.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::identity::Identity as Caller;
use crate::store::{Budget, BudgetStore, Spend};

/// The name of a budget of the caller's token.
fn token_budget(kind: &str, caller: &Caller) -> String {
    format!("{kind}:tok:{}", hex::encode(caller.key))
}

/// The 429 `quota_exceeded` of an embed budget that refused a request of `cost` units: whose it
/// was (`this token's`, `the tenant's`) and why (`Spent` never reaches here; it reads as
/// `Never`).
fn embed_refusal(who: &str, cost: u32, spend: Spend) -> Error {
    match spend {
        Spend::Wait { retry_after_ms, .. } => Error::QuotaExceeded {
            message: format!("{who} embed budget is spent for now ({cost} units asked)"),
            retry_after_s: retry_after_ms.div_ceil(1000).max(1),
        },
        Spend::Spent | Spend::Never { .. } => Error::QuotaExceeded {
            message: format!(
                "this request costs {cost} embed units, more than {who} whole budget a minute; \
                 send fewer or shorter texts"
            ),
            retry_after_s: 60,
        },
    }
}

/// Claim buckets kept before they are started afresh.
const MAX_CLAIM_BUCKETS: usize = 100_000;

/// See the [module docs](self).
pub(crate) struct Limits {
    rate: DefaultKeyedRateLimiter<[u8; 32]>,
    max_streams: usize,
    streams: Mutex<HashMap<[u8; 32], usize>>,
    /// Per-token claim buckets of tokens that carry `claims_per_min` (each its own quota).
    claims: Mutex<HashMap<[u8; 32], DefaultDirectRateLimiter>>,
    max_polls: usize,
    polls: Mutex<HashMap<[u8; 32], usize>>,
    /// Per-token embed budget (signed tokens).
    embed_token: DefaultKeyedRateLimiter<[u8; 32]>,
    /// Per-tenant embed budgets, each with its tenant's own quota.
    embed_tenant: Mutex<HashMap<std::sync::Arc<str>, DefaultDirectRateLimiter>>,
    /// A signed token's embed units a minute (`embed_tokens_per_min`).
    embed_token_per_min: u32,
}

impl std::fmt::Debug for Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limits")
            .field("max_streams", &self.max_streams)
            .finish_non_exhaustive()
    }
}

impl Limits {
    pub(crate) fn new(cfg: &Config) -> Self {
        let per_s = NonZeroU32::new(cfg.rate_per_token.max(1)).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(cfg.rate_burst.max(1)).unwrap_or(NonZeroU32::MIN);
        Limits {
            rate: RateLimiter::keyed(Quota::per_second(per_s).allow_burst(burst)),
            max_streams: cfg.max_streams_per_token,
            streams: Mutex::new(HashMap::new()),
            claims: Mutex::new(HashMap::new()),
            max_polls: cfg.max_polls_per_token.max(1),
            polls: Mutex::new(HashMap::new()),
            embed_token: RateLimiter::keyed(Quota::per_minute(
                NonZeroU32::new(cfg.embed_tokens_per_min).unwrap_or(NonZeroU32::MIN),
            )),
            embed_tenant: Mutex::new(HashMap::new()),
            embed_token_per_min: cfg.embed_tokens_per_min.max(1),
        }
    }

    /// Counts a long-polling claim for the caller until the guard drops.
    ///
    /// # Errors
    /// 429 when the token already has `max_polls_per_token` waiting.
    pub(crate) fn open_poll(self: &Arc<Self>, caller: &Caller) -> Result<PollGuard> {
        let mut p = self.polls.lock().unwrap_or_else(|p| p.into_inner());
        let n = p.entry(caller.key).or_insert(0);
        if *n >= self.max_polls {
            return Err(Error::TooManyRequests {
                message: format!(
                    "this token already has {} claims waiting (long polls); claim with \
                     wait_ms 0 or wait for one to return",
                    self.max_polls
                ),
                retry_after_s: 1,
            });
        }
        *n += 1;
        Ok(PollGuard {
            limits: self.clone(),
            key: caller.key,
        })
    }

    /// Takes `cost` from the caller's embed budget and its tenant's (`tenant_per_min`), both or
    /// neither, from the tenant's `store` when its budgets are shared (see the module docs). The
    /// `default` tenant's static tokens are the operator's own and have no embed budget.
    ///
    /// # Errors
    /// 429 `quota_exceeded` with `Retry-After` when either budget cannot pay `cost` now (or
    /// ever: a request costing more than a whole minute's budget is refused and says so); the
    /// store's, when it cannot be read.
    pub(crate) async fn spend_embed(
        &self,
        store: &dyn BudgetStore,
        caller: &Caller,
        tenant_per_min: u32,
        cost: u32,
    ) -> Result<()> {
        if &*caller.tenant == crate::identity::DEFAULT_TENANT {
            return Ok(());
        }
        let cost = cost.max(1);
        let budgets = [
            Budget {
                name: token_budget("embed", caller),
                per_min: self.embed_token_per_min,
            },
            Budget {
                name: "embed:tenant".to_owned(),
                per_min: tenant_per_min.max(1),
            },
        ];
        match store.spend(&budgets, cost).await? {
            Some(Spend::Spent) => Ok(()),
            Some(refused) => {
                let who = match refused {
                    Spend::Wait { budget: 0, .. } | Spend::Never { budget: 0 } => "this token's",
                    _ => "the tenant's",
                };
                Err(embed_refusal(who, cost, refused))
            }
            None => self.spend_embed_here(caller, tenant_per_min, cost),
        }
    }

    /// [`spend_embed`](Self::spend_embed) on this server's own buckets.
    fn spend_embed_here(&self, caller: &Caller, tenant_per_min: u32, cost: u32) -> Result<()> {
        let n = NonZeroU32::new(cost.max(1)).unwrap_or(NonZeroU32::MIN);
        let refused = |who: &str,
                       r: std::result::Result<
            std::result::Result<(), governor::NotUntil<_>>,
            governor::InsufficientCapacity,
        >| match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => Err(embed_refusal(
                who,
                cost,
                Spend::Wait {
                    budget: 0,
                    retry_after_ms: not_until
                        .wait_time_from(DefaultClock::default().now())
                        .as_millis() as u64,
                },
            )),
            Err(_) => Err(embed_refusal(who, cost, Spend::Never { budget: 0 })),
        };
        // The token's own budget first: a request it refuses costs the tenant (and so the
        // tenant's other tokens) nothing. One the tenant then refuses has spent the token's
        // (governor's buckets cannot give back).
        refused("this token's", self.embed_token.check_key_n(&caller.key, n))?;
        let mut m = self.embed_tenant.lock().unwrap_or_else(|p| p.into_inner());
        let per_min = NonZeroU32::new(tenant_per_min).unwrap_or(NonZeroU32::MIN);
        let bucket = m
            .entry(caller.tenant.clone())
            .or_insert_with(|| RateLimiter::direct(Quota::per_minute(per_min)));
        refused("the tenant's", bucket.check_n(n))
    }

    /// Takes one request from the caller's bucket.
    ///
    /// # Errors
    /// 429 with `Retry-After` (whole seconds, at least 1) when the bucket is empty.
    pub(crate) fn check_rate(&self, caller: &Caller) -> Result<()> {
        match self.rate.check_key(&caller.key) {
            Ok(()) => Ok(()),
            Err(not_until) => {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                Err(Error::TooManyRequests {
                    message: "this token is over its request rate".to_owned(),
                    retry_after_s: wait.as_secs_f64().ceil().max(1.0) as u64,
                })
            }
        }
    }

    /// Counts an SSE stream for the caller until the guard drops.
    ///
    /// # Errors
    /// 429 when the token already has `max_streams_per_token` open.
    pub(crate) fn open_stream(self: &Arc<Self>, caller: &Caller) -> Result<StreamGuard> {
        let mut s = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        let n = s.entry(caller.key).or_insert(0);
        if *n >= self.max_streams {
            return Err(Error::TooManyRequests {
                message: format!(
                    "this token already has {} event streams open",
                    self.max_streams
                ),
                retry_after_s: 5,
            });
        }
        *n += 1;
        Ok(StreamGuard {
            limits: self.clone(),
            key: caller.key,
        })
    }

    /// Takes one claim from the caller's own claim budget, when its token sets one
    /// (`claims_per_min`), from the tenant's `store` when its budgets are shared.
    ///
    /// # Errors
    /// 429 with `Retry-After` beyond `claims_per_min`; the store's, when it cannot be read.
    pub(crate) async fn check_claim(&self, store: &dyn BudgetStore, caller: &Caller) -> Result<()> {
        let Some(per_min) = caller.claims_per_min.and_then(NonZeroU32::new) else {
            return Ok(());
        };
        let budget = [Budget {
            name: token_budget("claim", caller),
            per_min: per_min.get(),
        }];
        let refused = |retry_after_s: u64| Error::TooManyRequests {
            message: format!("this token may claim {per_min} times a minute"),
            retry_after_s,
        };
        match store.spend(&budget, 1).await? {
            Some(Spend::Spent) => return Ok(()),
            Some(Spend::Wait { retry_after_ms, .. }) => {
                return Err(refused(retry_after_ms.div_ceil(1000).max(1)))
            }
            Some(Spend::Never { .. }) => return Err(refused(60)),
            None => {}
        }
        let mut m = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        let bucket = m
            .entry(caller.key)
            .or_insert_with(|| RateLimiter::direct(Quota::per_minute(per_min)));
        bucket.check().map_err(|not_until| {
            refused(
                not_until
                    .wait_time_from(DefaultClock::default().now())
                    .as_secs_f64()
                    .ceil()
                    .max(1.0) as u64,
            )
        })
    }

    /// Forgets buckets that are full again (called by the sweeper), so the tables stay small.
    pub(crate) fn tidy(&self) {
        self.rate.retain_recent();
        self.rate.shrink_to_fit();
        self.embed_token.retain_recent();
        self.embed_token.shrink_to_fit();
        // Signed tokens live minutes: past the bound, start the buckets afresh (a full bucket
        // for a token that had used some is the only leniency).
        let mut m = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() > MAX_CLAIM_BUCKETS {
            m.clear();
        }
        drop(m);
        let mut e = self.embed_tenant.lock().unwrap_or_else(|p| p.into_inner());
        if e.len() > MAX_CLAIM_BUCKETS {
            e.clear();
        }
    }
}

/// A waiting long poll, counted against its token.
#[derive(Debug)]
pub(crate) struct PollGuard {
    limits: Arc<Limits>,
    key: [u8; 32],
}

impl Drop for PollGuard {
    fn drop(&mut self) {
        let mut p = self.limits.polls.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = p.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                p.remove(&self.key);
            }
        }
    }
}

/// An open SSE stream, counted against its token.
#[derive(Debug)]
pub(crate) struct StreamGuard {
    limits: Arc<Limits>,
    key: [u8; 32],
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut s = self
            .limits
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = s.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                s.remove(&self.key);
            }
        }
    }
}
