//! The event hub: numbered events from the store (so from every server sharing it) kept in a
//! bounded ring for `Last-Event-ID` resume, fanned out to SSE clients, and waking long-polling
//! claims when work arrives.
//!
//! **Gaps.** The ring holds every event numbered after `complete_after`: the store's last event
//! id when the hub started (after a clean restart, the last id before it: `SqliteStore` keeps it
//! across a clean shutdown), raised as old events are evicted. A client resuming from an id
//! below that, or from an id this numbering never issued, may have missed events it cannot get
//! back: it gets a `reset` event (id: where it resumes from) instead of a silent hole. The same
//! `reset` goes to every connected client when the hub itself loses events: the store's event
//! subscription was lost (Redis: it sends a `reset` of its own, numbered with the counter it read
//! after subscribing again), the hub fell behind the store's channel, or ids went backwards.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use ternflow_core::protocol::{ResetEvent, ServerEvent};
use tokio::sync::{broadcast, Notify};

use crate::store::{NumberedEvent, Store};

/// A `reset` event numbered `id` (where the stream resumes from).
pub fn reset(id: u64, reason: &str) -> NumberedEvent {
    (
        id,
        ServerEvent::Reset(ResetEvent {
            reason: reason.to_owned(),
        }),
    )
}

#[derive(Debug)]
struct Ring {
    events: VecDeque<NumberedEvent>,
    /// Every event numbered above this is in `events` (or was sent after a `reset` at it).
    complete_after: u64,
    /// The hub missed events from the store's channel; the next event starts after a reset.
    lost: bool,
}

impl Ring {
    /// The newest id this ring knows of.
    fn newest(&self) -> u64 {
        self.events
            .back()
            .map_or(self.complete_after, |(id, _)| *id)
    }
}

/// What a client resuming from `Last-Event-ID` gets: a `reset` when it may have missed
/// events, the events it missed otherwise, a receiver for what comes next, and the id below
/// which live events are already covered.
#[derive(Debug)]
pub struct Resume {
    /// A `reset` to send first, when the client's id is older than the ring or unknown.
    pub reset: Option<NumberedEvent>,
    /// Events after the client's id (none after a reset).
    pub backlog: Vec<NumberedEvent>,
    /// Everything later.
    pub rx: broadcast::Receiver<NumberedEvent>,
    /// Live events numbered at or below this were covered by the backlog or the reset.
    pub floor: u64,
}

/// See the [module docs](self).
#[derive(Debug)]
pub struct Hub {
    ring: Mutex<Ring>,
    cap: usize,
    tx: broadcast::Sender<NumberedEvent>,
    work: Notify,
}

impl Hub {
    fn new(cap: usize, complete_after: u64) -> Hub {
        let (tx, _) = broadcast::channel(cap.max(16));
        Hub {
            ring: Mutex::new(Ring {
                events: VecDeque::with_capacity(cap.min(4_096)),
                complete_after,
                lost: false,
            }),
            cap: cap.max(1),
            tx,
            work: Notify::new(),
        }
    }

    /// Starts a hub fed by `store`'s events, keeping the last `cap` of them.
    pub fn start(store: &dyn Store, cap: usize) -> Arc<Hub> {
        // Subscribed first: every event after the id read next reaches the hub.
        let mut rx = store.subscribe();
        let hub = Arc::new(Hub::new(cap, store.last_event_id()));
        let h = hub.clone();
        tokio::spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(ev) => h.push(ev),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "event hub lagged behind the store");
                        h.ring.lock().unwrap_or_else(|p| p.into_inner()).lost = true;
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
            if let ServerEvent::Reset(_) = ev.1 {
                // From the store: what came before this id may be lost.
                ring.events.clear();
                ring.complete_after = ring.complete_after.max(ev.0);
                ring.lost = false;
                let _ = self.tx.send(ev);
                return;
            }
            let newest = ring.newest();
            let mut gap = None;
            if ring.lost {
                gap = Some("server_fell_behind");
            } else if ev.0 < newest && !ring.events.is_empty() {
                // The counter went backwards (the store lost it): the old ids mean nothing now.
                tracing::warn!(
                    last = newest,
                    next = ev.0,
                    "event ids went backwards; ring reset"
                );
                gap = Some("ids_went_backwards");
            } else if ev.0 <= newest {
                return; // a duplicate, or covered by a reset already sent
            }
            if let Some(reason) = gap {
                ring.events.clear();
                ring.complete_after = ev.0.saturating_sub(1);
                ring.lost = false;
                let _ = self.tx.send(reset(ring.complete_after, reason));
            }
            ring.events.push_back(ev.clone());
            while ring.events.len() > self.cap {
                if let Some((id, _)) = ring.events.pop_front() {
                    ring.complete_after = id;
                }
            }
            // Sent under the ring lock so `resume` sees each event exactly once.
            let _ = self.tx.send(ev);
        }
        if is_jobs {
            self.work.notify_waiters();
        }
    }

    /// What a client that last saw `last_id` (none: a new client) gets.
    pub fn resume(&self, last_id: Option<u64>) -> Resume {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let newest = ring.newest();
        let rx = self.tx.subscribe();
        match last_id {
            None => Resume {
                reset: None,
                backlog: Vec::new(),
                rx,
                floor: newest,
            },
            Some(last) if last < ring.complete_after || last > newest => Resume {
                reset: Some(reset(
                    newest,
                    if last > newest {
                        "unknown_id"
                    } else {
                        "older_than_the_ring"
                    },
                )),
                backlog: Vec::new(),
                rx,
                floor: newest,
            },
            Some(last) => Resume {
                reset: None,
                backlog: ring
                    .events
                    .iter()
                    .filter(|(id, _)| *id > last)
                    .cloned()
                    .collect(),
                rx,
                floor: newest,
            },
        }
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

    fn ev(id: u64) -> NumberedEvent {
        (id, ServerEvent::Jobs(JobsEvent { depth: id }))
    }

    fn ids(evs: &[NumberedEvent]) -> Vec<u64> {
        evs.iter().map(|(id, _)| *id).collect()
    }

    fn drain(rx: &mut broadcast::Receiver<NumberedEvent>) -> Vec<(u64, &'static str)> {
        std::iter::from_fn(|| rx.try_recv().ok().map(|(id, e)| (id, e.name()))).collect()
    }

    fn reason(r: &Resume) -> Option<String> {
        match &r.reset {
            Some((_, ServerEvent::Reset(e))) => Some(e.reason.clone()),
            _ => None,
        }
    }

    #[test]
    fn resuming_inside_the_ring_replays_and_outside_it_resets() {
        let h = Hub::new(3, 100);
        for id in 101..=105 {
            h.push(ev(id));
        }
        // The ring holds 103..=105: complete after 102.
        let r = h.resume(Some(103));
        assert_eq!(
            (reason(&r), ids(&r.backlog), r.floor),
            (None, vec![104, 105], 105)
        );
        let r = h.resume(Some(102));
        assert_eq!(
            ids(&r.backlog),
            [103, 104, 105],
            "102 is the last evicted: nothing missed"
        );
        let r = h.resume(Some(101));
        assert_eq!(reason(&r).as_deref(), Some("older_than_the_ring"));
        assert_eq!(
            (r.reset.unwrap().0, r.backlog.len()),
            (105, 0),
            "resumes from the newest"
        );
        let r = h.resume(Some(999));
        assert_eq!(
            reason(&r).as_deref(),
            Some("unknown_id"),
            "an id never issued"
        );
        let r = h.resume(None);
        assert_eq!((reason(&r), r.backlog.len(), r.floor), (None, 0, 105));
    }

    #[test]
    fn a_new_hub_knows_nothing_before_the_stores_last_id() {
        // After a restart: the store's last id is 500 (kept across a clean shutdown).
        let h = Hub::new(8, 500);
        assert_eq!(
            reason(&h.resume(Some(500))),
            None,
            "saw everything up to the restart"
        );
        assert_eq!(
            reason(&h.resume(Some(499))).as_deref(),
            Some("older_than_the_ring"),
            "the events after 499 were in the old server's memory"
        );
        h.push(ev(400)); // before the hub's start: covered
        h.push(ev(501));
        let r = h.resume(Some(500));
        assert_eq!((reason(&r), ids(&r.backlog)), (None, vec![501]));
    }

    #[test]
    fn duplicates_are_dropped_and_a_counter_that_goes_back_restarts_the_ring_with_a_reset() {
        let h = Hub::new(8, 0);
        let mut rx = h.resume(None).rx;
        for id in [5, 6, 6, 2, 3] {
            h.push(ev(id));
        }
        assert_eq!(
            drain(&mut rx),
            [
                (5, "jobs"),
                (6, "jobs"),
                (1, "reset"),
                (2, "jobs"),
                (3, "jobs")
            ],
            "live clients are told, and nothing after the reset is lost"
        );
        assert_eq!(
            ids(&h.resume(Some(1)).backlog),
            [2, 3],
            "the new numbering only"
        );
        assert_eq!(
            reason(&h.resume(Some(6))).as_deref(),
            Some("unknown_id"),
            "an id of the old numbering"
        );
    }

    #[test]
    fn a_reset_from_the_store_or_a_lag_reaches_live_clients_and_empties_the_ring() {
        let h = Hub::new(8, 0);
        let mut rx = h.resume(None).rx;
        h.push(ev(1));
        h.push(reset(10, "subscription_lost"));
        h.push(ev(9)); // published before the store read 10: covered by the reset
        h.push(ev(11));
        assert_eq!(drain(&mut rx), [(1, "jobs"), (10, "reset"), (11, "jobs")]);
        assert_eq!(
            reason(&h.resume(Some(1))).as_deref(),
            Some("older_than_the_ring")
        );
        assert_eq!(ids(&h.resume(Some(10)).backlog), [11]);
        // The hub's own receiver lagged: the next event comes after a reset.
        h.ring.lock().unwrap().lost = true;
        h.push(ev(20));
        assert_eq!(drain(&mut rx), [(19, "reset"), (20, "jobs")]);
        assert_eq!(
            reason(&h.resume(Some(11))).as_deref(),
            Some("older_than_the_ring")
        );
    }
}
