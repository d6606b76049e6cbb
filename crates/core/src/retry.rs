//! Exponential backoff with full jitter, and TTLs with jitter.
//!
//! Delay for retry `n` (0-based) is uniform in `[0, min(max, base · 2ⁿ)]` ("full jitter"): workers
//! that failed together spread out instead of retrying in lock-step. A server `Retry-After` is a
//! floor.

use serde::{Deserialize, Serialize};

use crate::rng::Rng;

/// A retry policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Backoff {
    /// First delay ceiling, ms.
    pub base_ms: u64,
    /// Largest delay ceiling, ms.
    pub max_ms: u64,
    /// Tries in all (the first included) before giving up.
    pub max_attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base_ms: 100,
            max_ms: 5_000,
            max_attempts: 4,
        }
    }
}

impl Backoff {
    /// The ceiling of the delay after failed try number `retry` (0 = after the first failure).
    pub fn ceiling_ms(&self, retry: u32) -> u64 {
        let exp = self.base_ms.saturating_mul(1u64 << retry.min(40));
        exp.min(self.max_ms)
    }

    /// The jittered delay after failed try `retry`, never below `floor_ms` (a server's Retry-After).
    pub fn delay_ms(&self, retry: u32, floor_ms: Option<u64>, rng: &Rng) -> u64 {
        let d = rng.up_to(self.ceiling_ms(retry));
        d.max(floor_ms.unwrap_or(0))
    }

    /// "Equal jitter" after failed try `retry`: uniform in `[c/2, c]` for the ceiling `c`, so a
    /// retry never comes back at once (the server's nack backoff, where a burst of failures
    /// must spread out but each job must still wait).
    pub fn equal_jitter_ms(&self, retry: u32, rng: &Rng) -> u64 {
        let c = self.ceiling_ms(retry);
        c / 2 + rng.up_to(c - c / 2)
    }

    /// Whether another try is allowed after `tries` tries.
    pub fn allows(&self, tries: u32) -> bool {
        tries < self.max_attempts
    }
}

/// A TTL with ± `jitter` (a fraction, e.g. 0.1 for ±10 %) so entries written together do not
/// expire together.
pub fn jittered_ttl_ms(ttl_ms: u64, jitter: f64, rng: &Rng) -> u64 {
    let spread = (ttl_ms as f64 * jitter.clamp(0.0, 1.0)) as u64;
    ttl_ms - spread + rng.up_to(2 * spread)
}

#[cfg(test)]
mod equal_jitter_tests {
    use super::*;

    #[test]
    fn equal_jitter_stays_in_the_upper_half() {
        let b = Backoff {
            base_ms: 1_000,
            max_ms: 60_000,
            max_attempts: 5,
        };
        let rng = Rng::new(7);
        for _ in 0..1_000 {
            assert!((500..=1_000).contains(&b.equal_jitter_ms(0, &rng)));
            assert!((2_000..=4_000).contains(&b.equal_jitter_ms(2, &rng)));
            assert!((30_000..=60_000).contains(&b.equal_jitter_ms(19, &rng)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling_doubles_then_caps() {
        let b = Backoff {
            base_ms: 100,
            max_ms: 1_000,
            max_attempts: 5,
        };
        let c: Vec<u64> = (0..6).map(|n| b.ceiling_ms(n)).collect();
        assert_eq!(c, vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.ceiling_ms(200), 1000, "no overflow on huge retry counts");
    }

    #[test]
    fn delays_are_jittered_within_bounds_and_respect_retry_after() {
        let b = Backoff::default();
        let rng = Rng::new(3);
        let ds: Vec<u64> = (0..200).map(|_| b.delay_ms(2, None, &rng)).collect();
        assert!(ds.iter().all(|&d| d <= 400));
        assert!(
            ds.iter().any(|&d| d < 200) && ds.iter().any(|&d| d > 200),
            "spread"
        );
        assert!((0..50).all(|_| b.delay_ms(0, Some(700), &rng) >= 700));
    }

    #[test]
    fn attempts_are_bounded() {
        let b = Backoff {
            max_attempts: 3,
            ..Backoff::default()
        };
        assert!(b.allows(1) && b.allows(2) && !b.allows(3));
    }

    #[test]
    fn ttl_jitter_stays_in_band() {
        let rng = Rng::new(9);
        let ttls: Vec<u64> = (0..500)
            .map(|_| jittered_ttl_ms(10_000, 0.1, &rng))
            .collect();
        assert!(ttls.iter().all(|&t| (9_000..=11_000).contains(&t)));
        assert!(ttls.iter().any(|&t| t < 9_500) && ttls.iter().any(|&t| t > 10_500));
    }
}
