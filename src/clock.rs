//! Wall-clock time and timers from the global scope (worker, window or edge isolate alike).

use ternflow_core::ports::Clock;
use wasm_bindgen::{JsCast as _, JsValue};

/// `Date.now()` and `setTimeout`.
#[derive(Debug, Clone, Copy, Default)]
pub struct BrowserClock;

impl Clock for BrowserClock {
    fn now_ms(&self) -> u64 {
        js_sys::Date::now() as u64
    }

    /// `performance.timeOrigin + performance.now()` where the global scope has `performance`
    /// (browsers coarsen it to 0.1–1 ms; an edge isolate may freeze it between I/O), else
    /// `Date.now()`.
    fn now_us(&self) -> u64 {
        let perf = js_sys::Reflect::get(&js_sys::global(), &"performance".into())
            .ok()
            .filter(JsValue::is_object);
        let Some(perf) = perf else {
            return self.now_ms() * 1000;
        };
        let now = js_sys::Reflect::get(&perf, &"now".into())
            .ok()
            .and_then(|f| f.dyn_into::<js_sys::Function>().ok())
            .and_then(|f| f.call0(&perf).ok())
            .and_then(|v| v.as_f64());
        let origin = js_sys::Reflect::get(&perf, &"timeOrigin".into())
            .ok()
            .and_then(|v| v.as_f64());
        match (now, origin) {
            (Some(n), Some(o)) => ((o + n) * 1000.0) as u64,
            _ => self.now_ms() * 1000,
        }
    }

    async fn sleep(&self, ms: u64) {
        gloo_timers::future::TimeoutFuture::new(ms.min(u64::from(u32::MAX)) as u32).await;
    }
}
