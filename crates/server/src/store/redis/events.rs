//! Events across servers: `publish.lua` appends each event, numbered, to the stream `P:events`
//! (`XADD … MAXLEN ~`), and every server runs one reader per store that follows the stream with
//! `XREAD BLOCK` on a connection of its own and forwards what it reads to its SSE hub.
//!
//! A stream rather than Pub/Sub: it is a key, so in a cluster it lives on the master of the
//! store's hash tag beside the queue it describes (classic Pub/Sub would broadcast every event to
//! every node; sharded Pub/Sub needs a push-capable connection per shard), it is replicated and
//! persisted like the queue, and a reader that reconnects after a blip resumes from the last
//! entry it read instead of missing what was published meanwhile.
//!
//! After any loss of its connection the reader still announces a `reset` (`subscription_lost`)
//! before resuming: across a failover the new master may lack the last entries the old one
//! took (replication is asynchronous), and nothing tells the reader which. A reset makes SSE
//! clients resynchronise, which is always safe.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::streams::{StreamRangeReply, StreamReadReply};
use ternflow_core::protocol::ServerEvent;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::conn::{Client, Conn};
use super::RedisStore;
use crate::error::{Error, Result};
use crate::store::{EventBus, NumberedEvent};

/// About how many events the stream keeps (`XADD MAXLEN ~`): far more than a reader falls
/// behind between two reads; SSE clients resume from the hub's own ring, not from here.
pub(super) const EVENTS_KEPT: u64 = 10_000;

/// How long one `XREAD` blocks: the reader notices a dead connection within about this.
const BLOCK: Duration = Duration::from_secs(2);

#[derive(serde::Deserialize)]
struct WireEvent {
    id: u64,
    #[serde(flatten)]
    event: ServerEvent,
}

/// Where the reader starts: the stream entry to read after and the event id it carried.
pub(super) struct Head {
    pub(super) cursor: String,
    pub(super) last_id: u64,
}

/// The stream's last entry now (`0-0` and the counter when the stream is empty).
pub(super) async fn head(con: &mut Conn, stream: &str, evseq: &str) -> redis::RedisResult<Head> {
    let last: StreamRangeReply = redis::cmd("XREVRANGE")
        .arg(stream)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async(con)
        .await?;
    if let Some(e) = last.ids.first() {
        let id = e
            .get::<String>("e")
            .and_then(|s| serde_json::from_str::<WireEvent>(&s).ok())
            .map_or(0, |w| w.id);
        return Ok(Head {
            cursor: e.id.clone(),
            last_id: id,
        });
    }
    let n: Option<u64> = redis::cmd("GET").arg(evseq).query_async(con).await?;
    Ok(Head {
        cursor: "0-0".to_owned(),
        last_id: n.unwrap_or(0),
    })
}

/// Follows `stream` from `start` for as long as the store lives, forwarding each event to `tx`
/// and raising `last` to its id.
pub(super) fn spawn_reader(
    client: Client,
    stream: String,
    start: Head,
    tx: broadcast::Sender<NumberedEvent>,
    last: Arc<AtomicU64>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut cursor = start.cursor;
        let mut con: Option<Conn> = None;
        let mut lost = false;
        loop {
            let c = match con.as_mut() {
                Some(c) => c,
                None => match client.connect_blocking(BLOCK).await {
                    Ok(c) => con.insert(c),
                    Err(e) => {
                        tracing::warn!("redis event stream: reconnecting: {e}");
                        tokio::time::sleep(Duration::from_millis(250)).await;
                        continue;
                    }
                },
            };
            if std::mem::take(&mut lost) {
                // Numbered with the last id forwarded: the reader resumes after its cursor, so
                // every entry still in the stream arrives after the reset, numbered above it;
                // what may be gone (a failover's last entries) is what the reset covers.
                let id = last.load(Ordering::Relaxed);
                let _ = tx.send(crate::sse::reset(id, "subscription_lost"));
            }
            let read: redis::RedisResult<Option<StreamReadReply>> = redis::cmd("XREAD")
                .arg("COUNT")
                .arg(512)
                .arg("BLOCK")
                .arg(BLOCK.as_millis() as u64)
                .arg("STREAMS")
                .arg(&stream)
                .arg(&cursor)
                .query_async(c)
                .await;
            match read {
                Ok(reply) => {
                    for entry in reply.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids) {
                        cursor = entry.id.clone();
                        let Some(w) = entry
                            .get::<String>("e")
                            .and_then(|s| serde_json::from_str::<WireEvent>(&s).ok())
                        else {
                            continue;
                        };
                        last.fetch_max(w.id, Ordering::Relaxed);
                        let _ = tx.send((w.id, w.event));
                    }
                }
                Err(e) => {
                    tracing::warn!("redis event stream lost ({e}); reconnecting");
                    con = None;
                    lost = true;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
    })
}

#[async_trait]
impl EventBus for RedisStore {
    async fn publish(&self, event: ServerEvent) -> Result<u64> {
        // `{"event":…,"data":…}` — the script splices the id in after the opening brace.
        let body = serde_json::to_string(&event)
            .map_err(|e| Error::Store(format!("encode event: {e}")))?;
        let floor = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64 * 1_000)
            .unwrap_or(0);
        self.invoke(&self.scripts.publish, |i| {
            i.key(self.k("evseq"))
                .key(self.k("events"))
                .arg(body)
                .arg(floor)
                .arg(EVENTS_KEPT);
        })
        .await
    }

    fn subscribe(&self) -> broadcast::Receiver<NumberedEvent> {
        self.events.subscribe()
    }

    fn last_event_id(&self) -> u64 {
        self.last_event.load(Ordering::Relaxed)
    }
}
