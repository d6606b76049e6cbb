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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
use crate::sessions;
use crate::tenants::Ctx;

#[derive(Debug, Deserialize)]
pub(crate) struct EventsQuery {
    last_event_id: Option<u64>,
    /// The worker session this stream belongs to (`crate::sessions`): when it drops and no
    /// other opens in time, the session's leases are handed back.
    session: Option<String>,
}

/// How soon a session's stream asks the browser to reconnect after a drop (the `retry` field),
/// well inside [`sessions::GONE_AFTER_MS`].
const SESSION_RETRY: Duration = Duration::from_millis(150);

/// A session's stream while it is open; dropped with it. A drop the server did not cause (the
/// client went away) starts the session's gone-check.
struct SessionStream {
    state: Ctx,
    session: String,
    owner: String,
    /// Cleared when the server ends the stream itself (a lagging client).
    dropped_by_client: Arc<AtomicBool>,
}

impl Drop for SessionStream {
    fn drop(&mut self) {
        let dropped =
            self.dropped_by_client.load(Ordering::Relaxed) && !self.state.is_shutting_down();
        let tenant = self.state.tenant.clone();
        let Some(mark) =
            self.state
                .sessions
                .stream_closed(&tenant, &self.session, &self.owner, dropped)
        else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (state, session, owner) =
            (self.state.clone(), self.session.clone(), self.owner.clone());
        rt.spawn(async move {
            tokio::time::sleep(Duration::from_millis(sessions::GONE_AFTER_MS)).await;
            let Some(held) = state
                .sessions
                .end_if_gone(&tenant, &session, &owner, mark, state.now())
            else {
                return;
            };
            let n = held.len();
            match super::jobs::release_all(state, held).await {
                Ok(results) => {
                    let back = results
                        .iter()
                        .filter(|r| r.outcome != ternflow_core::protocol::ReleaseOutcome::Lost)
                        .count();
                    tracing::info!(session = %session, held = n, handed_back = back,
                        "a worker session's stream dropped and did not come back: its leases are handed back");
                }
                Err(e) => tracing::warn!(session = %session, error = %e,
                    "a gone worker session's leases could not be handed back; they expire"),
            }
        });
    }
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
    let session = match q.session {
        Some(s) => {
            super::jobs::valid_session(&s)?;
            state
                .sessions
                .stream_opened(&state.tenant, &s, &caller.sub)
                .then(|| SessionStream {
                    state: state.clone(),
                    session: s,
                    owner: caller.sub.to_string(),
                    dropped_by_client: Arc::new(AtomicBool::new(true)),
                })
        }
        None => None,
    };
    let retry = session.as_ref().map(|_| SESSION_RETRY);
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
            .chain(std::iter::once(match retry {
                Some(r) => sse_event(None, &hello).retry(r),
                None => sse_event(None, &hello),
            })),
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
    // Reached only when the stream ends on the server's side (a lagging client): that is no
    // sign the worker is gone.
    let by_client = session.as_ref().map(|s| s.dropped_by_client.clone());
    let ended_here = stream::once(async move {
        if let Some(flag) = by_client {
            flag.store(false, Ordering::Relaxed);
        }
    })
    .filter_map(|()| std::future::ready(None));
    let stream = replay
        .chain(live)
        .chain(ended_here)
        .map(move |e| {
            let _held = (&guard, &open, &session);
            Ok(e)
        })
        .take_until(stop);
    Ok(Sse::new(stream).keep_alive(
        KeepAlive::new()
            .interval(Duration::from_millis(state.config.keepalive_ms))
            .text("keep-alive"),
    ))
}
