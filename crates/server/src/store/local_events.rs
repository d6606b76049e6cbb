//! [`LocalEvents`]: the event bus of a store that lives in one process (the in-memory and
//! SQLite stores): a broadcast channel with ids that start at the start-up time in ms × 1000,
//! so they keep growing across restarts without being stored. A store that kept its last id
//! across a clean shutdown (SQLite) starts [`LocalEvents::resuming`] from it, so a client that
//! saw that id resumes without a `reset` (crate::sse).

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use ternflow_core::protocol::ServerEvent;
use tokio::sync::broadcast;

use super::NumberedEvent;

/// See the [module docs](self).
#[derive(Debug)]
pub struct LocalEvents {
    tx: broadcast::Sender<NumberedEvent>,
    /// Last event id; held while sending so events leave in id order.
    seq: Mutex<u64>,
    /// `seq` before the first event.
    start: u64,
    /// The last id before this bus existed that subscribers are known not to have missed
    /// (the last id of the previous run after a clean shutdown; else `start`).
    floor: u64,
}

impl Default for LocalEvents {
    fn default() -> Self {
        LocalEvents::resuming(None)
    }
}

impl LocalEvents {
    /// A bus whose ids continue after `last` (the previous run's last id, when it shut down
    /// cleanly), or start at the start-up time when unknown.
    pub fn resuming(last: Option<u64>) -> Self {
        let (tx, _) = broadcast::channel(4_096);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let start = (now * 1_000).max(last.unwrap_or(0));
        LocalEvents {
            tx,
            seq: Mutex::new(start),
            start,
            floor: last.unwrap_or(start),
        }
    }

    /// Numbers `event` and sends it to every subscriber (none is fine).
    pub fn publish(&self, event: ServerEvent) -> u64 {
        let mut seq = self.seq.lock().unwrap_or_else(|p| p.into_inner());
        *seq += 1;
        let _ = self.tx.send((*seq, event));
        *seq
    }

    /// Receives published events, in id order.
    pub fn subscribe(&self) -> broadcast::Receiver<NumberedEvent> {
        self.tx.subscribe()
    }

    /// The last id published, or the floor before the first.
    pub fn last_id(&self) -> u64 {
        let seq = *self.seq.lock().unwrap_or_else(|p| p.into_inner());
        if seq == self.start {
            self.floor
        } else {
            seq
        }
    }
}

#[cfg(test)]
mod tests {
    use ternflow_core::protocol::JobsEvent;

    use super::*;

    #[test]
    fn ids_continue_after_the_previous_runs_last() {
        let fresh = LocalEvents::default();
        let base = fresh.last_id();
        assert!(base > 1_700_000_000_000_000, "starts at the clock × 1000");
        // The previous run ended cleanly at 42 (an old clock): its subscribers missed nothing.
        let bus = LocalEvents::resuming(Some(42));
        assert_eq!(bus.last_id(), 42);
        let id = bus.publish(ServerEvent::Jobs(JobsEvent { depth: 1 }));
        assert!(id > base, "ids still grow past the clock");
        assert_eq!(bus.last_id(), id);
        // One from the future (a clock that went back): ids go on from it.
        let far = base * 2;
        let bus = LocalEvents::resuming(Some(far));
        assert_eq!(bus.last_id(), far);
        assert_eq!(
            bus.publish(ServerEvent::Jobs(JobsEvent { depth: 1 })),
            far + 1
        );
    }
}
