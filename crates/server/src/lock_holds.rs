//! The single-flight locks one token may hold on this server: how many at once
//! ([`Config::max_locks_per_token`](crate::Config::max_locks_per_token)), and how long one key
//! ([`Config::max_lock_hold_ms`](crate::Config::max_lock_hold_ms)).
//!
//! Without them a visitor's worker token could take the lock of every text its tenant embeds,
//! and keep them by renewing: every other worker's `embed()` of such a text would wait out its
//! lock tries and then compute without writing the shared entry. An honest worker holds one lock
//! per text it is embedding, for the seconds that takes; one refused goes on without single
//! flight (`LockOutcome::GaveUp` in the core), so the limits cost it a shared write, never an
//! embedding.
//!
//! - **How many**: past the cap `POST /v1/locks/{key}` answers 429 until one of the token's locks
//!   is released or expires. Renewing a held lock is not taking more.
//! - **How long**: one token holds one key for at most the hold, across renewals, as a delivery
//!   holds its job; a grant or a renewal runs to the hold's end at the latest, and a renewal past
//!   it answers 409 `lock_lost`. Releasing and taking the key again does not start a new hold:
//!   the time adds up until the token has left the key alone as long as it held it, and a token
//!   that used its hold up gets 429 for that key until it has left it alone for a whole hold. So
//!   a token holds a key at most half the time, and an honest worker (who holds a key for the
//!   seconds an embedding takes) never meets the limit, nor is remembered for longer.
//!
//! Per server, as a token's request rate, streams and long polls are (the crate's `limits`
//! module): they bound what one token holds through one server. Two acquires of one token racing
//! at the cap may both pass (the check and the grant are not one step); the excess is bounded
//! by the token's concurrent requests.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::identity::Identity as Caller;

/// One key as one token has held it lately.
#[derive(Debug, Clone)]
struct Key {
    /// The live lock: its token, when its hold began (ms) and when it expires.
    lock: Option<(String, u64, u64)>,
    /// Time (ms) the key was held in the holds that ended, since the token last left it alone as
    /// long as it had held it.
    used: u64,
    /// When the last hold ended (released or expired).
    ended: u64,
}

impl Key {
    /// Ends the live lock if it expired by `now`, adding its time to `used`.
    fn settle(&mut self, now: u64) {
        match self.lock.as_ref().map(|l| l.2) {
            Some(exp) if exp <= now => self.close(exp),
            _ => {}
        }
    }

    fn close(&mut self, end: u64) {
        if let Some((_, began, _)) = self.lock.take() {
            self.used += end.saturating_sub(began);
            self.ended = end;
        }
    }

    fn live(&self) -> bool {
        self.lock.is_some()
    }

    /// Hold time left to the token on this key at `now` (the key settled).
    fn left(&self, hold: u64, now: u64) -> u64 {
        let current = self
            .lock
            .as_ref()
            .map_or(0, |(_, b, _)| now.saturating_sub(*b));
        hold.saturating_sub(self.used + current)
    }
}

/// See the [module docs](self).
#[derive(Debug)]
pub(crate) struct LockHolds {
    max: usize,
    hold: u64,
    /// Per token digest, the keys it holds, and those it held and has not yet left alone as long.
    keys: Mutex<HashMap<[u8; 32], HashMap<String, Key>>>,
}

impl LockHolds {
    pub(crate) fn new(max: usize, hold_ms: u64) -> Self {
        LockHolds {
            max: max.max(1),
            hold: hold_ms.max(1),
            keys: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], HashMap<String, Key>>> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Settles `mine` at `now`: expired locks end, keys left alone as long as they were held
    /// (at most a hold) are forgotten, and past `max` keys not held the ones left alone longest
    /// are forgotten first (so a token's record stays under twice the cap).
    fn settle(&self, mine: &mut HashMap<String, Key>, now: u64) {
        let hold = self.hold;
        mine.retain(|_, k| {
            k.settle(now);
            k.live() || now < k.ended.saturating_add(k.used.min(hold))
        });
        let idle = mine.values().filter(|k| !k.live()).count();
        if idle > self.max {
            let mut ends: Vec<(u64, String)> = mine
                .iter()
                .filter(|(_, k)| !k.live())
                .map(|(key, k)| (k.ended, key.clone()))
                .collect();
            ends.sort_unstable();
            for (_, key) in ends.into_iter().take(idle - self.max) {
                mine.remove(&key);
            }
        }
    }

    /// Whether `caller` may take the lock on `key` at `now`, and for how long at most: the TTL
    /// the store should grant (`ttl_ms`, cut to the hold left).
    ///
    /// # Errors
    /// 429 with `Retry-After` when the token holds the most locks it may (until its first one
    /// expires), or has held `key` for the whole hold (until it has left the key alone as long).
    pub(crate) fn admit(&self, caller: &Caller, key: &str, ttl_ms: u64, now: u64) -> Result<u64> {
        let mut g = self.lock();
        let Some(mine) = g.get_mut(&caller.key) else {
            return Ok(ttl_ms.min(self.hold));
        };
        self.settle(mine, now);
        let left = mine.get(key).map_or(self.hold, |k| k.left(self.hold, now));
        if left == 0 {
            let free = mine.get(key).map_or(now, |k| {
                k.lock.as_ref().map_or(k.ended, |l| l.2) + self.hold
            });
            return Err(Error::TooManyRequests {
                message: format!(
                    "this token has held this lock for {} s, the longest one token may; it is \
                     other workers' until the token has left it alone as long",
                    self.hold / 1_000
                ),
                retry_after_s: free.saturating_sub(now).div_ceil(1_000).max(1),
            });
        }
        let held = mine.values().filter(|k| k.live()).count();
        if held >= self.max {
            let first = mine
                .values()
                .filter_map(|k| k.lock.as_ref().map(|(_, _, exp)| *exp))
                .min()
                .unwrap_or(now);
            return Err(Error::TooManyRequests {
                message: format!(
                    "this token holds {} locks, the most one token may hold; release one first",
                    self.max
                ),
                retry_after_s: first.saturating_sub(now).div_ceil(1_000).max(1),
            });
        }
        Ok(ttl_ms.min(left))
    }

    /// The TTL a renewal of `caller`'s lock on `key` may have at `now`:
    /// `ttl_ms` cut to the hold left; `None` once the hold is used up.
    pub(crate) fn renewal(&self, caller: &Caller, key: &str, ttl_ms: u64, now: u64) -> Option<u64> {
        let mut g = self.lock();
        // A lock granted through another server (or before a restart) has no record here: its
        // hold starts at this renewal.
        let left = g.get_mut(&caller.key).map_or(self.hold, |mine| {
            self.settle(mine, now);
            mine.get(key).map_or(self.hold, |k| k.left(self.hold, now))
        });
        (left > 0).then(|| ttl_ms.min(left))
    }

    /// Records a lock granted to (or renewed by) `caller` at `now`.
    pub(crate) fn granted(
        &self,
        caller: &Caller,
        key: &str,
        token: &str,
        expires_at: u64,
        now: u64,
    ) {
        let mut g = self.lock();
        let mine = g.entry(caller.key).or_default();
        let k = mine.entry(key.to_owned()).or_insert(Key {
            lock: None,
            used: 0,
            ended: now,
        });
        k.settle(now);
        match &mut k.lock {
            Some((t, _, exp)) if t == token => *exp = expires_at,
            _ => {
                k.close(now);
                k.lock = Some((token.to_owned(), now, expires_at));
            }
        }
    }

    /// Ends a lock `caller` released (when it still holds it with `token`) at `now`; the key is
    /// remembered as long as it was held.
    pub(crate) fn released(&self, caller: &Caller, key: &str, token: &str, now: u64) {
        let mut g = self.lock();
        let Some(mine) = g.get_mut(&caller.key) else {
            return;
        };
        if let Some(k) = mine.get_mut(key) {
            if k.lock.as_ref().is_some_and(|(t, _, _)| t == token) {
                k.close(now);
            }
        }
        self.settle(mine, now);
        if mine.is_empty() {
            g.remove(&caller.key);
        }
    }

    /// Ends expired locks, forgets keys left alone as long as they were held and tokens with none
    /// left (the sweeper, every few seconds).
    pub(crate) fn tidy(&self, now: u64) {
        self.lock().retain(|_, mine| {
            self.settle(mine, now);
            !mine.is_empty()
        });
    }

    /// Locks `caller` holds here now (tests).
    #[cfg(test)]
    pub(crate) fn count(&self, caller: &Caller, now: u64) -> usize {
        self.lock().get(&caller.key).map_or(0, |m| {
            m.values()
                .filter(|k| k.lock.as_ref().is_some_and(|(_, _, exp)| *exp > now))
                .count()
        })
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
        let h = LockHolds::new(2, 600_000);
        let (a, b) = (caller(1), caller(2));
        for (i, key) in ["k1", "k2"].into_iter().enumerate() {
            assert_eq!(h.admit(&a, key, 30_000, 0).unwrap(), 30_000);
            h.granted(&a, key, &format!("t{i}"), 5_000 + i as u64, 0);
        }
        let err = h.admit(&a, "k3", 30_000, 1_000).unwrap_err();
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
        h.admit(&b, "k3", 30_000, 1_000)
            .expect("another token is not counted");
        h.released(&a, "k1", "wrong", 1_000);
        assert!(
            h.admit(&a, "k3", 30_000, 1_000).is_err(),
            "a release under another token frees nothing"
        );
        h.released(&a, "k1", "t0", 1_000);
        h.admit(&a, "k3", 30_000, 1_000).expect("one released");
        h.granted(&a, "k3", "t3", 9_000, 1_000);
        assert!(h.admit(&a, "k4", 30_000, 1_000).is_err());
        h.admit(&a, "k4", 30_000, 5_001).expect("k2 expired");
        assert_eq!(h.count(&a, 5_001), 1);
        h.tidy(700_000);
        assert!(
            h.lock().is_empty(),
            "tidy forgets keys left alone as long as they were held, and tokens with none"
        );
    }

    #[test]
    fn one_key_is_held_at_most_the_hold_renewals_and_re_takes_included() {
        let h = LockHolds::new(8, 100_000);
        let a = caller(1);
        // Granted and renewed: each TTL is cut to what is left of the hold.
        assert_eq!(h.admit(&a, "k", 30_000, 0).unwrap(), 30_000);
        h.granted(&a, "k", "t1", 30_000, 0);
        assert_eq!(h.renewal(&a, "k", 30_000, 20_000), Some(30_000));
        h.granted(&a, "k", "t1", 50_000, 20_000);
        // Released at 40 s and taken again: the 40 s count, 60 s are left.
        h.released(&a, "k", "t1", 40_000);
        assert_eq!(h.admit(&a, "k", 300_000, 45_000).unwrap(), 60_000);
        h.granted(&a, "k", "t2", 105_000, 45_000);
        assert_eq!(h.renewal(&a, "k", 30_000, 90_000), Some(15_000));
        h.granted(&a, "k", "t2", 105_000, 90_000);
        assert_eq!(
            h.renewal(&a, "k", 30_000, 105_000),
            None,
            "the hold is used up"
        );
        // The key is refused to this token until it has left it alone for a hold ...
        let err = h.admit(&a, "k", 30_000, 110_000).unwrap_err();
        assert!(
            matches!(
                err,
                Error::TooManyRequests {
                    retry_after_s: 95,
                    ..
                }
            ),
            "{err:?}"
        );
        // ... not other keys, nor to other tokens.
        h.admit(&a, "other", 30_000, 110_000).unwrap();
        h.admit(&caller(2), "k", 30_000, 110_000).unwrap();
        assert_eq!(h.admit(&a, "k", 30_000, 205_000).unwrap(), 30_000);
    }

    #[test]
    fn an_honest_worker_taking_a_key_now_and_then_never_meets_the_hold() {
        let h = LockHolds::new(8, 100_000);
        let a = caller(1);
        for i in 0..1_000u64 {
            let now = i * 2_000;
            let ttl = h.admit(&a, "k", 30_000, now).unwrap();
            assert_eq!(ttl, 30_000, "take {i}");
            h.granted(&a, "k", &format!("t{i}"), now + ttl, now);
            h.released(&a, "k", &format!("t{i}"), now + 50);
        }
    }

    #[test]
    fn a_key_left_alone_as_long_as_it_was_held_starts_afresh() {
        let h = LockHolds::new(8, 100_000);
        let a = caller(1);
        h.admit(&a, "k", 30_000, 0).unwrap();
        h.granted(&a, "k", "t1", 30_000, 0);
        h.released(&a, "k", "t1", 30_000);
        assert_eq!(
            h.admit(&a, "k", 100_000, 59_999).unwrap(),
            70_000,
            "30 s used"
        );
        assert_eq!(
            h.admit(&a, "k", 100_000, 60_000).unwrap(),
            100_000,
            "left alone 30 s: a whole hold again"
        );
    }

    #[test]
    fn a_token_s_record_stays_under_twice_the_cap() {
        let h = LockHolds::new(4, 100_000);
        let a = caller(1);
        for i in 0..100u64 {
            let key = format!("k{i}");
            h.admit(&a, &key, 1_000, i).unwrap();
            h.granted(&a, &key, "t", i + 1, i);
        }
        h.admit(&a, "last", 1_000, 200).unwrap();
        assert!(h.lock()[&a.key].len() <= 8, "{}", h.lock()[&a.key].len());
    }
}
