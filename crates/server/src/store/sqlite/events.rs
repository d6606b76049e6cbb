//! [`EventBus`] on SQLite: events numbered and kept in the database, delivered in process.

use async_trait::async_trait;
use ternflow_core::protocol::ServerEvent;
use tokio::sync::broadcast;

use super::SqliteStore;
use crate::error::Result;
use crate::store::{EventBus, NumberedEvent};

#[async_trait]
impl EventBus for SqliteStore {
    async fn publish(&self, event: ServerEvent) -> Result<u64> {
        Ok(self.events.publish(event))
    }

    fn subscribe(&self) -> broadcast::Receiver<NumberedEvent> {
        self.events.subscribe()
    }

    fn last_event_id(&self) -> u64 {
        self.events.last_id()
    }
}
