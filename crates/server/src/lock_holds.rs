//! How many of its tenant's single-flight locks one token may hold on this server at once
//! ([`Config::max_locks_per_token`](crate::Config::max_locks_per_token)): past it
//! `POST /v1/locks/{key}` answers 429 until one of its locks is released or expires. Without
//! it a visitor's worker token could take the lock of every text its tenant embeds, and keep
//! them by renewing: every other worker's `embed()` of such a text would wait out its lock
//! tries and then compute without writing the shared entry. An honest worker holds one lock
//! per text it is embedding; one refused goes on without single flight (`LockOutcome::GaveUp`
//! in the core), so the cap costs it a shared write, never an embedding.
//!
//! Per server, as a token's request rate, streams and long polls are (the crate's `limits`
//! module): it bounds what one token holds through one server. Two acquires of one token racing
//! at the cap may both pass (the check and the grant are not one step); the excess is bounded
//! by the token's concurrent requests.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::identity::Identity as Caller;

/// A lock held: its token and when it expires (ms).
type Held = (String, u64);

/// See the [module docs](self).
#[derive(Debug)]
pub(crate) struct LockHolds {
    max: usize,
    /// Per token digest, its live locks by key.
    held: Mutex<HashMap<[u8; 32], HashMap<String, Held>>>,
}

impl LockHolds {
    pub(crate) fn new(max: usize) -> Self {
        LockHolds {
            max: max.max(1),
            held: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], HashMap<String, Held>>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `caller` may take one more lock at `now`.
    ///
    /// # Errors
    /// 429 with `Retry-After` (until its first lock expires) when it holds the most it may.
    pub(crate) fn admit(&self, caller: &Caller, now: u64) -> Result<()> {
        let mut g = self.lock();
        let Some(mine) = g.get_mut(&caller.key) else {
            return Ok(());
        };
        mine.retain(|_, (_, exp)| *exp > now);
        if mine.len() < self.max {
            return Ok(());
        }
        let first = mine.values().map(|(_, exp)| *exp).min().unwrap_or(now);
        Err(Error::TooManyRequests {
            message: format!(
                "this token holds {} locks, the most one token may hold; release one first",
                self.max
            ),
            retry_after_s: first.saturating_sub(now).div_ceil(1_000).max(1),
        })
    }

    /// Records a lock granted to (or renewed by) `caller`.
    pub(crate) fn granted(&self, caller: &Caller, key: &str, token: &str, expires_at: u64) {
        self.lock()
            .entry(caller.key)
            .or_default()
            .insert(key.to_owned(), (token.to_owned(), expires_at));
    }

    /// Forgets a lock `caller` released (when it still holds it with `token`).
    pub(crate) fn released(&self, caller: &Caller, key: &str, token: &str) {
        let mut g = self.lock();
        if let Some(mine) = g.get_mut(&caller.key) {
            if mine.get(key).is_some_and(|(t, _)| t == token) {
                mine.remove(key);
            }
            if mine.is_empty() {
                g.remove(&caller.key);
            }
        }
    }

    /// Drops expired locks, and the tokens left holding none (the sweeper, every few seconds).
    pub(crate) fn tidy(&self, now: u64) {
        self.lock().retain(|_, mine| {
            mine.retain(|_, (_, exp)| *exp > now);
            !mine.is_empty()
        });
    }

    /// Locks `caller` holds here now (tests).
    #[cfg(test)]
    pub(crate) fn count(&self, caller: &Caller, now: u64) -> usize {
        self.lock()
            .get(&caller.key)
            .map_or(0, |m| m.values().filter(|(_, exp)| *exp > now).count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Role;

    fn caller(k: u8) -> Caller {
        Caller {
            key: [k; 32],
            tenant: "acme".into(),
            role: Role::Worker,
            sub: "v".into(),
            claims_per_min: None,
        }
    }

    #[test]
    fn a_token_at_the_cap_is_refused_until_one_is_released_or_expires() {
        let h = LockHolds::new(2);
        let (a, b) = (caller(1), caller(2));
        for (i, key) in ["k1", "k2"].into_iter().enumerate() {
            h.admit(&a, 0).unwrap();
            h.granted(&a, key, &format!("t{i}"), 5_000 + i as u64);
        }
        let err = h.admit(&a, 1_000).unwrap_err();
        assert!(
            matches!(
                err,
                Error::TooManyRequests {
                    retry_after_s: 4,
                    ..
                }
            ),
            "{err:?}"
        );
        h.admit(&b, 1_000).expect("another token is not counted");
        h.released(&a, "k1", "wrong");
        assert!(
            h.admit(&a, 1_000).is_err(),
            "a release under another token frees nothing"
        );
        h.released(&a, "k1", "t0");
        h.admit(&a, 1_000).expect("one released");
        h.granted(&a, "k3", "t3", 9_000);
        assert!(h.admit(&a, 1_000).is_err());
        h.admit(&a, 5_001).expect("k2 expired");
        assert_eq!(h.count(&a, 5_001), 1);
        h.tidy(10_000);
        assert!(h.lock().is_empty(), "tidy forgets tokens holding nothing");
    }
}
