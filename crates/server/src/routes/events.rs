//! `GET /v1/events`: Server-Sent Events, resumable with `Last-Event-ID`. A worker token gets
//! `jobs` and `invalidate`; a producer token gets `finished` (jobs done or dead-lettered, to
//! fetch with `POST /v1/jobs/status`); an admin token gets all three.
//!
//! On connect the stream replays every event after `Last-Event-ID` (header, or `last_event_id`
//! query parameter) still in the ring, then a fresh `jobs` event (no id) with the current depth,
//! then live events. Keep-alive comments flow every `keepalive_ms`. The stream ends when the
//! server shuts down, or when the client falls more than the ring behind (clients reconnect and
//! resume).

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::Extension;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream, StreamExt};
use serde::Deserialize;
use ternflow_core::protocol::{JobsEvent, ServerEvent};
use tokio_stream::wrappers::{BroadcastStream, WatchStream};

use crate::auth::Role;
use crate::error::Result;
use crate::extract::Query;
use crate::identity::Identity;
use crate::tenants::Ctx;

#[derive(Debug, Deserialize)]
pub(crate) struct EventsQuery {
    last_event_id: Option<u64>,
}

fn sse_event(id: Option<u64>, ev: &ServerEvent) -> Event {
    let e = Event::default().event(ev.name()).data(ev.data_json());
    match id {
        Some(id) => e.id(id.to_string()),
        None => e,
    }
}

pub(crate) async fn events(
    state: Ctx,
    Extension(caller): Extension<Identity>,
    headers: HeaderMap,
    Query(q): Query<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let guard = match state.limits.open_stream(&caller) {
        Ok(g) => g,
        Err(e) => {
            state.metrics.add(|c| &c.streams_refused, 1);
            return Err(e);
        }
    };
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .or(q.last_event_id);
    let wanted = move |ev: &ServerEvent| match caller.role {
        Role::Admin => true,
        Role::Producer => matches!(ev, ServerEvent::Finished(_)),
        Role::Worker => !matches!(ev, ServerEvent::Finished(_)),
    };
    let (backlog, rx) = state.hub.subscribe_after(last);
    let backlog: Vec<_> = backlog.into_iter().filter(|(_, ev)| wanted(ev)).collect();
    let floor = backlog.last().map(|(id, _)| *id).or(last).unwrap_or(0);
    let depth = state.store.depth(state.now()).await?.ready;
    let hello = ServerEvent::Jobs(JobsEvent { depth });

    let replay = stream::iter(
        backlog
            .into_iter()
            .map(|(id, ev)| sse_event(Some(id), &ev))
            .chain(std::iter::once(sse_event(None, &hello))),
    );
    // A client too slow to keep up (the broadcast lagged) is disconnected rather than silently
    // skipped: it reconnects with its Last-Event-ID and the ring replays what it missed.
    let live = BroadcastStream::new(rx)
        .take_while(|r| std::future::ready(r.is_ok()))
        .filter_map(move |r| async move {
            match r {
                Ok((id, ev)) if id > floor && wanted(&ev) => Some(sse_event(Some(id), &ev)),
                _ => None,
            }
        });
    let mut shutdown = WatchStream::new(state.shutdown_signal());
    let stop = async move { while let Some(false) = shutdown.next().await {} };
    // The guard lives as long as the stream: dropping the stream (client gone, shutdown) frees
    // the token's slot.
    let stream = replay
        .chain(live)
        .map(move |e| {
            let _held = &guard;
            Ok(e)
        })
        .take_until(stop);
    Ok(Sse::new(stream).keep_alive(
        KeepAlive::new()
            .interval(Duration::from_millis(state.config.keepalive_ms))
            .text("keep-alive"),
    ))
}
