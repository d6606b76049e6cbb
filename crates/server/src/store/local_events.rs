//! [`LocalEvents`]: the event bus of a store that lives in one process (the in-memory and
//! SQLite stores): a broadcast channel with ids that start at the start-up time in ms × 1000,
//! so they keep growing across restarts without being stored.

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
}

impl Default for LocalEvents {
    fn default() -> Self {
        let (tx, _) = broadcast::channel(4_096);
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        LocalEvents {
            tx,
            seq: Mutex::new(start * 1_000),
        }
    }
}

impl LocalEvents {
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
}
