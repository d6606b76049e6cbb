//! Lock contention per key, the cache-stampede signal: an *episode* starts when a lock request
//! on a key is refused because another worker holds it, gathers the distinct callers refused on
//! that key (the waiters: told apart by their `traceparent`, each job's own), and ends when the
//! key is free again: its holder releases it (the waiters then find the entry it wrote) or the
//! key is granted anew (its wait and waiter count are then observed); when neither happens, it
//! is dropped [`GRACE_MS`] after its holder's lock ran out. The open episodes answer "how many workers
//! wait on one cold key right now" without a key ever becoming a label.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// Most keys with an open episode (a refusal on a further key is not tracked until one ends).
const MAX_KEYS: usize = 10_000;
/// Most distinct waiters counted in one episode.
const MAX_WAITERS: usize = 1_000;
/// How long after its holder's lock ran out an episode nobody ended still counts (ms).
pub const GRACE_MS: u64 = 1_000;

#[derive(Debug)]
struct Episode {
    /// When the first refusal came (ms).
    since: u64,
    /// Until when the holder's lock is known to run (ms).
    until: u64,
    /// Distinct callers refused (hashes of their `traceparent`, or a fresh number without one).
    waiters: HashSet<u64>,
}

/// What an ended episode came to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ended {
    /// First refusal → the key free again (ms).
    pub wait_ms: u64,
    /// Distinct callers refused meanwhile.
    pub waiters: u64,
}

/// See the [module docs](self).
#[derive(Debug, Default)]
pub struct Contention {
    open: Mutex<HashMap<String, Episode>>,
    anonymous: std::sync::atomic::AtomicU64,
}

fn hash(s: &str) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(s)
}

impl Contention {
    /// A request on `key` was refused at `now`; the holder's lock runs until `held_until`.
    /// `caller`: the request's `traceparent` (`None`: counted as a waiter of its own).
    pub fn refused(&self, key: &str, caller: Option<&str>, held_until: u64, now: u64) {
        let who = match caller {
            Some(t) => hash(t),
            None => {
                // Never equal to a hash in practice; distinct for each anonymous refusal.
                u64::MAX
                    - self
                        .anonymous
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            }
        };
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if !open.contains_key(key) && open.len() >= MAX_KEYS {
            return;
        }
        let e = open.entry(key.to_owned()).or_insert_with(|| Episode {
            since: now,
            until: held_until,
            waiters: HashSet::new(),
        });
        e.until = e.until.max(held_until);
        if e.waiters.len() < MAX_WAITERS {
            e.waiters.insert(who);
        }
    }

    /// `key` was released or granted at `now`: its episode, if one was open, ends.
    pub fn freed(&self, key: &str, now: u64) -> Option<Ended> {
        let e = self
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key)?;
        Some(Ended {
            wait_ms: now.saturating_sub(e.since),
            waiters: e.waiters.len() as u64,
        })
    }

    /// The open episodes at `now`, after dropping those whose holder's lock ran out more than
    /// [`GRACE_MS`] ago with the key never freed since: how many keys have waiters, and the
    /// most waiters on one key.
    pub fn open(&self, now: u64) -> (u64, u64) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|_, e| e.until.saturating_add(GRACE_MS) > now);
        let most = open.values().map(|e| e.waiters.len()).max().unwrap_or(0);
        (open.len() as u64, most as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_episode_counts_distinct_waiters_until_the_key_is_free() {
        let c = Contention::default();
        assert_eq!(c.freed("k", 0), None, "no refusal, no episode");
        for (t, who) in [(100, "a"), (150, "b"), (200, "a"), (250, "c")] {
            c.refused("k", Some(who), 1_000, t);
        }
        c.refused("k", None, 1_000, 260);
        c.refused("other", Some("a"), 1_000, 300);
        assert_eq!(c.open(400), (2, 4), "k: a, b, c and one anonymous");
        assert_eq!(
            c.freed("k", 900),
            Some(Ended {
                wait_ms: 800,
                waiters: 4
            })
        );
        assert_eq!(c.open(900), (1, 1));
        assert_eq!(c.freed("k", 950), None, "ended once");
    }

    #[test]
    fn an_episode_nobody_ends_is_dropped_after_the_holder_s_lock_and_grace() {
        let c = Contention::default();
        c.refused("k", Some("a"), 1_000, 100);
        assert_eq!(c.open(1_000 + GRACE_MS - 1), (1, 1));
        assert_eq!(c.open(1_000 + GRACE_MS), (0, 0));
        // A renewal seen in a later refusal keeps it open.
        c.refused("k", Some("a"), 1_000, 100);
        c.refused("k", Some("b"), 5_000, 1_500);
        assert_eq!(c.open(5_000), (1, 2));
    }

    #[test]
    fn keys_and_waiters_are_bounded() {
        let c = Contention::default();
        for i in 0..MAX_KEYS + 10 {
            c.refused(&format!("k{i}"), Some("a"), 1_000, 0);
        }
        assert_eq!(c.open(0).0, MAX_KEYS as u64);
        for i in 0..MAX_WAITERS + 10 {
            c.refused("k0", Some(&format!("w{i}")), 1_000, 0);
        }
        assert_eq!(c.open(0).1, MAX_WAITERS as u64);
    }
}
