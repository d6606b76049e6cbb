//! `GET /v1/events`: Server-Sent Events, resumable with `Last-Event-ID`. A worker token gets
//! `jobs` and `invalidate`; a producer token gets `finished` (jobs done or dead-lettered, to
//! fetch with `POST /v1/jobs/status`); an admin token gets all three; every role gets `reset`.
//!
//! On connect the stream replays every event after `Last-Event-ID` (header, or `last_event_id`
//! query parameter) still in the ring — or, when the ring no longer reaches back to that id
//! (evicted, a restart, an id never issued), a `reset` (`crate::sse` says when) — then a fresh
//! `jobs` event (no id) with the current depth, then live events. Keep-alive comments flow every `keepalive_ms`. The stream ends when the
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
    let wanted = move |ev: &ServerEvent| match (caller.role, ev) {
        (_, ServerEvent::Reset(_)) | (Role::Admin, _) => true,
        (Role::Producer, ev) => matches!(ev, ServerEvent::Finished(_)),
        (Role::Worker, ev) => !matches!(ev, ServerEvent::Finished(_)),
    };
    let resume = state.hub.resume(last);
    if let Some((_, ServerEvent::Reset(r))) = &resume.reset {
        tracing::debug!(last = ?last, reason = %r.reason, "SSE client resumed across a gap");
    }
    let backlog: Vec<_> = resume
        .backlog
        .into_iter()
        .filter(|(_, ev)| wanted(ev))
        .collect();
    let mut floor = resume.floor;
    let depth = state.store.depth(state.now()).await?.ready;
    let hello = ServerEvent::Jobs(JobsEvent { depth });

    let replay = stream::iter(
        resume
            .reset
            .into_iter()
            .chain(backlog)
            .map(|(id, ev)| sse_event(Some(id), &ev))
            .chain(std::iter::once(sse_event(None, &hello))),
    );
    // A client too slow to keep up (the broadcast lagged) is disconnected rather than silently
    // skipped: it reconnects with its Last-Event-ID and the ring replays what it missed (or it
    // gets a reset). A live reset moves the floor: the numbering after it may be lower.
    let live = BroadcastStream::new(resume.rx)
        .take_while(|r| std::future::ready(r.is_ok()))
        .filter_map(move |r| {
            let out = match r {
                Ok((id, ev @ ServerEvent::Reset(_))) => {
                    floor = id;
                    Some(sse_event(Some(id), &ev))
                }
                Ok((id, ev)) if id > floor && wanted(&ev) => Some(sse_event(Some(id), &ev)),
                _ => None,
            };
            std::future::ready(out)
        });
    let mut shutdown = WatchStream::new(state.shutdown_signal());
    let stop = async move { while let Some(false) = shutdown.next().await {} };
    // The guards live as long as the stream: dropping the stream (client gone, shutdown) frees
    // the token's slot and counts the disconnect.
    let open = state.metrics.families.sse_client();
    let stream = replay
        .chain(live)
        .map(move |e| {
            let _held = (&guard, &open);
            Ok(e)
        })
        .take_until(stop);
    Ok(Sse::new(stream).keep_alive(
        KeepAlive::new()
            .interval(Duration::from_millis(state.config.keepalive_ms))
            .text("keep-alive"),
    ))
}
