//! The event hub: numbered events from the store (so from every server sharing it) kept in a
//! bounded ring for `Last-Event-ID` resume, fanned out to SSE clients, and waking long-polling
//! claims when work arrives.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use ternflow_core::protocol::ServerEvent;
use tokio::sync::{broadcast, Notify};

use crate::store::{NumberedEvent, Store};

/// See the [module docs](self).
#[derive(Debug)]
pub struct Hub {
    ring: Mutex<VecDeque<NumberedEvent>>,
    cap: usize,
    tx: broadcast::Sender<NumberedEvent>,
    work: Notify,
}

impl Hub {
    /// Starts a hub fed by `store`'s events, keeping the last `cap` of them.
    pub fn start(store: &dyn Store, cap: usize) -> Arc<Hub> {
        let (tx, _) = broadcast::channel(cap.max(16));
        let hub = Arc::new(Hub {
            ring: Mutex::new(VecDeque::with_capacity(cap)),
            cap: cap.max(1),
            tx,
            work: Notify::new(),
        });
        let mut rx = store.subscribe();
        let h = hub.clone();
        tokio::spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(ev) => h.push(ev),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "event hub lagged behind the store");
                        h.work.notify_waiters();
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
        });
        hub
    }

    fn push(&self, ev: NumberedEvent) {
        let is_jobs = matches!(ev.1, ServerEvent::Jobs(_));
        {
            let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
            match ring.back() {
                Some((id, _)) if *id == ev.0 => return, // a duplicate
                Some((id, _)) if *id > ev.0 => {
                    // The counter went backwards (the store lost it): the old ids mean nothing
                    // now. Start the ring again rather than dropping every event from here on.
                    tracing::warn!(
                        last = *id,
                        next = ev.0,
                        "event ids went backwards; ring reset"
                    );
                    ring.clear();
                }
                _ => {}
            }
            ring.push_back(ev.clone());
            while ring.len() > self.cap {
                ring.pop_front();
            }
            // Sent under the ring lock so `subscribe_after` sees each event exactly once.
            let _ = self.tx.send(ev);
        }
        if is_jobs {
            self.work.notify_waiters();
        }
    }

    /// Events after `last_id` still in the ring, and a receiver for everything later.
    pub fn subscribe_after(
        &self,
        last_id: Option<u64>,
    ) -> (Vec<NumberedEvent>, broadcast::Receiver<NumberedEvent>) {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let backlog = match last_id {
            Some(last) => ring.iter().filter(|(id, _)| *id > last).cloned().collect(),
            None => Vec::new(),
        };
        (backlog, self.tx.subscribe())
    }

    /// Resolves at the next `jobs` event (create before checking for work, then await).
    pub fn work_available(&self) -> tokio::sync::futures::Notified<'_> {
        self.work.notified()
    }

    /// Wakes every waiting claim (shutdown).
    pub fn wake_all(&self) {
        self.work.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use ternflow_core::protocol::JobsEvent;

    use super::*;

    fn hub() -> Hub {
        let (tx, _) = broadcast::channel(16);
        Hub {
            ring: Mutex::new(VecDeque::new()),
            cap: 8,
            tx,
            work: Notify::new(),
        }
    }

    fn ev(id: u64) -> NumberedEvent {
        (id, ServerEvent::Jobs(JobsEvent { depth: id }))
    }

    #[test]
    fn duplicates_are_dropped_and_a_counter_that_goes_back_restarts_the_ring() {
        let h = hub();
        let (_, mut rx) = h.subscribe_after(None);
        for id in [5, 6, 6, 2, 3] {
            h.push(ev(id));
        }
        let got: Vec<u64> = std::iter::from_fn(|| rx.try_recv().ok().map(|(id, _)| id)).collect();
        assert_eq!(got, [5, 6, 2, 3], "nothing after the reset is lost");
        let (backlog, _) = h.subscribe_after(Some(0));
        let ids: Vec<u64> = backlog.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [2, 3], "the ring holds the new numbering only");
    }
}
