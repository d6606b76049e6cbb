//! A tiny deterministic random source for jitter and tokens.
//!
//! Jitter needs no cryptographic quality, only independence between workers; seeding from the
//! clock and a per-instance salt gives that, and tests seed it with a constant to be repeatable.

use std::cell::Cell;

/// xorshift64* generator.
#[derive(Debug)]
pub struct Rng {
    state: Cell<u64>,
}

impl Rng {
    /// A generator from `seed` (any value; 0 is remapped).
    pub fn new(seed: u64) -> Self {
        // splitmix64 scramble so nearby seeds give unrelated streams.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Rng {
            state: Cell::new(if z == 0 { 1 } else { z }),
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&self) -> u64 {
        let mut x = self.state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..=max`.
    pub fn up_to(&self, max: u64) -> u64 {
        if max == u64::MAX {
            return self.next_u64();
        }
        self.next_u64() % (max + 1)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_varied() {
        let r = Rng::new(7);
        let draws: Vec<u64> = (0..1000).map(|_| r.up_to(9)).collect();
        assert!(draws.iter().all(|&d| d <= 9));
        for v in 0..=9 {
            assert!(draws.contains(&v), "value {v} never drawn");
        }
        let u = r.unit();
        assert!((0.0..1.0).contains(&u));
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }
}
