//! SSE wake-ups: the server's `/v1/events` stream through `EventSource`.
//!
//! `jobs` events wake the idle queue loop; `invalidate` events are handed to a callback that
//! drops local cache entries; `reset` events (the stream had a gap: invalidations may have been
//! missed) to one that empties the local cache. The browser's `EventSource` reconnects by itself with
//! `Last-Event-ID`; when it gives up (the server answered an error), this reopens it after a pause
//! with `?last_event_id=` so no numbered event is missed. The loop's watchdog claims anyway when
//! the stream is silent, so a dead stream slows the worker down but never stalls it.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use futures_channel::mpsc;
use futures_util::future::{select, Either};
use futures_util::StreamExt;
use gloo_net::eventsource::futures::EventSource;
use gloo_net::eventsource::State;
use ternflow_core::ports::{Clock, Wakeups};
use ternflow_core::protocol::{InvalidateEvent, JobsEvent};

use crate::clock::BrowserClock;

/// Wake-ups from one server's event stream.
#[derive(Debug)]
pub struct SseWakeups {
    rx: RefCell<mpsc::UnboundedReceiver<u64>>,
    closed: Rc<Cell<bool>>,
}

impl SseWakeups {
    /// Opens `{base}/v1/events` with the token `token()` returns (asked again at every
    /// reconnect, and the stream reopened when it changed, so a renewed token is used);
    /// `on_invalidate` receives the keys of every `invalidate` event, `on_reset` is called at
    /// every `reset` event. `session()` names the worker's session (`?session=`, asked again
    /// the same way): while the stream is open the server knows the worker is there, and when
    /// it drops for good the server hands the session's leases back.
    pub fn open(
        base: &str,
        token: Rc<dyn Fn() -> String>,
        session: Rc<dyn Fn() -> Option<String>>,
        on_invalidate: impl Fn(Vec<String>) + 'static,
        on_reset: impl Fn() + 'static,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded();
        let closed = Rc::new(Cell::new(false));
        let base = base.trim_end_matches('/').to_owned();
        wasm_bindgen_futures::spawn_local(pump(
            base,
            token,
            session,
            tx,
            Handlers {
                invalidate: Rc::new(on_invalidate),
                reset: Rc::new(on_reset),
            },
            closed.clone(),
        ));
        SseWakeups {
            rx: RefCell::new(rx),
            closed,
        }
    }

    /// Closes the stream (the pump stops at its next event or reconnect).
    pub fn close(&self) {
        self.closed.set(true);
    }
}

impl Drop for SseWakeups {
    fn drop(&mut self) {
        self.closed.set(true);
    }
}

/// What the pump calls for the events that are not wake-ups.
struct Handlers {
    invalidate: Rc<dyn Fn(Vec<String>)>,
    reset: Rc<dyn Fn()>,
}

async fn pump(
    base: String,
    token: Rc<dyn Fn() -> String>,
    session: Rc<dyn Fn() -> Option<String>>,
    tx: mpsc::UnboundedSender<u64>,
    on: Handlers,
    closed: Rc<Cell<bool>>,
) {
    let mut last_id = String::new();
    while !closed.get() {
        let opened_with = token();
        let opened_for = session();
        let mut url = format!(
            "{base}/v1/events?token={}",
            String::from(js_sys::encode_uri_component(&opened_with))
        );
        if let Some(s) = &opened_for {
            url.push_str("&session=");
            url.push_str(&String::from(js_sys::encode_uri_component(s)));
        }
        let full = if last_id.is_empty() {
            url.clone()
        } else {
            format!("{url}&last_event_id={last_id}")
        };
        if let Ok(mut es) = EventSource::new(&full) {
            if let (Ok(jobs), Ok(inval), Ok(reset)) = (
                es.subscribe("jobs"),
                es.subscribe("invalidate"),
                es.subscribe("reset"),
            ) {
                let mut events =
                    futures_util::stream::select(futures_util::stream::select(jobs, inval), reset);
                while let Some(ev) = events.next().await {
                    if closed.get() {
                        break;
                    }
                    let Ok((kind, msg)) = ev else {
                        if es.state() == State::Closed {
                            break; // given up: reopen below
                        }
                        continue;
                    };
                    let id = msg.last_event_id();
                    if !id.is_empty() {
                        last_id = id;
                    }
                    let data = msg.data().as_string().unwrap_or_default();
                    if kind == "jobs" {
                        let depth = serde_json::from_str::<JobsEvent>(&data).map_or(0, |e| e.depth);
                        if tx.unbounded_send(depth).is_err() {
                            closed.set(true);
                        }
                    } else if kind == "reset" {
                        (on.reset)();
                    } else if let Ok(e) = serde_json::from_str::<InvalidateEvent>(&data) {
                        (on.invalidate)(e.keys);
                    }
                    if token() != opened_with || session() != opened_for {
                        break; // renewed: reopen with the new token or session (and Last-Event-ID)
                    }
                }
            }
            es.close();
        }
        if !closed.get() {
            BrowserClock.sleep(1_000).await;
        }
    }
}

impl Wakeups for SseWakeups {
    async fn next(&self, timeout_ms: u64) -> Option<u64> {
        let mut rx = std::mem::replace(&mut *self.rx.borrow_mut(), mpsc::unbounded().1);
        let r = {
            let event = rx.next();
            let timer = BrowserClock.sleep(timeout_ms);
            futures_util::pin_mut!(event, timer);
            match select(event, timer).await {
                Either::Left((Some(depth), _)) => Some(depth),
                Either::Left((None, timer)) => {
                    // The stream is gone for good: behave as a plain watchdog.
                    timer.await;
                    None
                }
                Either::Right(_) => None,
            }
        };
        *self.rx.borrow_mut() = rx;
        r
    }
}
