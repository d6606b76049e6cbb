//! A token-bucket rate limiter: `rate_per_s` sustained, bursts up to `burst`.

use std::cell::Cell;

/// A token bucket driven by the caller's clock (milliseconds).
#[derive(Debug)]
pub struct RateLimiter {
    rate_per_ms: f64,
    burst: f64,
    tokens: Cell<f64>,
    last_ms: Cell<Option<u64>>,
}

impl RateLimiter {
    /// A full bucket of `burst` tokens refilled at `rate_per_s`.
    pub fn new(rate_per_s: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        RateLimiter {
            rate_per_ms: rate_per_s.max(0.0) / 1000.0,
            burst,
            tokens: Cell::new(burst),
            last_ms: Cell::new(None),
        }
    }

    fn refill(&self, now_ms: u64) {
        if let Some(last) = self.last_ms.get() {
            let dt = now_ms.saturating_sub(last) as f64;
            self.tokens
                .set((self.tokens.get() + dt * self.rate_per_ms).min(self.burst));
        }
        self.last_ms.set(Some(now_ms));
    }

    /// Takes one token at `now_ms`: `Ok(())`, or `Err(ms)` to wait before one is available.
    pub fn try_take(&self, now_ms: u64) -> Result<(), u64> {
        self.refill(now_ms);
        let t = self.tokens.get();
        if t >= 1.0 {
            self.tokens.set(t - 1.0);
            Ok(())
        } else if self.rate_per_ms <= 0.0 {
            Err(u64::MAX)
        } else {
            Err(((1.0 - t) / self.rate_per_ms).ceil() as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_sustained_rate() {
        let r = RateLimiter::new(10.0, 3);
        assert!((0..3).all(|_| r.try_take(0).is_ok()));
        let wait = r.try_take(0).unwrap_err();
        assert_eq!(wait, 100);
        assert!(r.try_take(50).is_err());
        assert!(r.try_take(100).is_ok());
        assert!(r.try_take(100).is_err());
        // A long idle refills only up to the burst.
        assert!((0..3).all(|_| r.try_take(100_000).is_ok()));
        assert!(r.try_take(100_000).is_err());
    }
}
