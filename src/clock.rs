//! Wall-clock time and timers from the global scope (worker, window or edge isolate alike).

use ternflow_core::ports::Clock;

/// `Date.now()` and `setTimeout`.
#[derive(Debug, Clone, Copy, Default)]
pub struct BrowserClock;

impl Clock for BrowserClock {
    fn now_ms(&self) -> u64 {
        js_sys::Date::now() as u64
    }

    async fn sleep(&self, ms: u64) {
        gloo_timers::future::TimeoutFuture::new(ms.min(u64::from(u32::MAX)) as u32).await;
    }
}
