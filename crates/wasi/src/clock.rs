//! Time from `wasi:clocks`: the wall clock for timestamps, and the monotonic clock for sleeping.
//! WASI 0.2: its pollable (the reactor blocks in `wasi:io/poll` until it fires); WASI 0.3: the
//! async `wait-for` import (the task waits in the host). No spinning either way.

use std::time::{SystemTime, UNIX_EPOCH};

use ternflow_core::ports::Clock;

/// `wasi:clocks/wall-clock` and `monotonic-clock.subscribe-duration`.
#[derive(Debug, Clone, Copy, Default)]
pub struct WasiClock;

impl Clock for WasiClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }

    fn now_us(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    }

    #[cfg(feature = "p2")]
    async fn sleep(&self, ms: u64) {
        wstd::task::sleep(wstd::time::Duration::from_millis(ms)).await;
    }

    #[cfg(feature = "p3")]
    async fn sleep(&self, ms: u64) {
        wasip3::clocks::monotonic_clock::wait_for(ms.saturating_mul(1_000_000)).await;
    }
}
