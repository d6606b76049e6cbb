//! Time from `wasi:clocks`: the wall clock for timestamps, and the monotonic clock's pollable
//! for sleeping (the reactor blocks in `wasi:io/poll` until it fires: no spinning).

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

    async fn sleep(&self, ms: u64) {
        wstd::task::sleep(wstd::time::Duration::from_millis(ms)).await;
    }
}
