//! Worker sessions: a browser worker's run, so that a page going away strands nothing.
//!
//! A browser worker names its run with a random `session` in every claim and in its event
//! stream (`GET /v1/events?session=`). This server keeps, per session, the leases its claims
//! handed out and not yet ended (acked, nacked, released). The session ends:
//!
//! - when the page's hand-back names it (`POST /v1/jobs/release` with `session`, sent at
//!   `pagehide` with `fetch`'s `keepalive`): the page can name only the leases it heard of, and
//!   a claim's answer reaches it up to 50 ms after the worker, while a claim may still be on its
//!   way to the server at the close;
//! - when its event stream drops and no other opens within [`GONE_AFTER_MS`]: a closed tab
//!   takes its worker and the worker's connections with it, and the browser may not send the
//!   page's hand-back at all (a renderer torn down under load loses it);
//!
//! and then its leases are handed back at once, and its later claims (including one already
//! waiting or under way) are refused with `session_ended` after handing back what the store gave
//! them.
//!
//! Per server: in a fleet, a session's claims and its end may reach different servers; the
//! leases the page names are handed back by whichever server gets them (they are in the store),
//! the rest only by the server that handed them out (a worker's claims and its stream go to the
//! server its page named). Bounded: [`MAX_SESSIONS`] sessions (the least recently used dropped,
//! its leases left to expire), [`MAX_HELD`] leases each (past it a lease is not followed); an
//! ended session is remembered for [`ENDED_MS`], past any claim still on its way.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::Mutex;

use lru::LruCache;

/// How long a session may be without an event stream before it is taken for gone: longer than
/// the reconnect the stream asks of the browser (`retry`), shorter than the second a closed
/// tab's jobs may wait.
pub(crate) const GONE_AFTER_MS: u64 = 600;

/// Leases followed per session, at most.
pub(crate) const MAX_HELD: usize = 2_048;

/// Sessions followed at once, at most.
pub(crate) const MAX_SESSIONS: usize = 16_384;

/// How long an ended session refuses claims: longer than any claim's long poll.
pub(crate) const ENDED_MS: u64 = 120_000;

/// A lease handed out under a session: job id and lease token.
pub(crate) type Held = (String, String);

/// A session's key: tenant and session id.
type Key = (String, String);

#[derive(Debug)]
struct Session {
    /// Who claims under it (the token's writer id): no one else can end it.
    owner: String,
    /// When it was ended, if it was.
    ended_at: Option<u64>,
    /// Its leases not yet ended, job id → token.
    held: HashMap<String, String>,
    /// Its event streams open now.
    streams: u32,
    /// Counts its streams' closes: a gone-check is for the close that started it.
    closes: u64,
}

impl Session {
    fn new(owner: &str) -> Self {
        Session {
            owner: owner.to_owned(),
            ended_at: None,
            held: HashMap::new(),
            streams: 0,
            closes: 0,
        }
    }

    fn is_ended(&self, now: u64) -> bool {
        self.ended_at.is_some_and(|t| now < t + ENDED_MS)
    }
}

/// What [`Sessions::claimed`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Claimed {
    /// Kept: the session goes on.
    Kept,
    /// The session ended before this claim landed: hand its leases back and refuse it.
    Ended,
}

#[derive(Debug)]
struct Inner {
    sessions: LruCache<Key, Session>,
    /// Which session holds a job's lease (tenant, job id → session id).
    by_job: HashMap<Key, String>,
}

impl Inner {
    /// `key`'s session, made for `owner` when new; `None` when it is another owner's.
    fn session(&mut self, key: Key, owner: &str) -> Option<&mut Session> {
        if !self.sessions.contains(&key) {
            if let Some((old_key, old)) = self.sessions.push(key.clone(), Session::new(owner)) {
                if old_key != key {
                    self.forget(&old_key.0, old.held.keys());
                }
            }
        }
        self.sessions.get_mut(&key).filter(|s| s.owner == owner)
    }

    fn forget<'a>(&mut self, tenant: &str, ids: impl Iterator<Item = &'a String>) {
        for id in ids {
            self.by_job.remove(&(tenant.to_owned(), id.clone()));
        }
    }

    /// Ends `key`'s session (already checked to be the caller's): what it held.
    fn end(&mut self, key: &Key, now: u64) -> Vec<Held> {
        let Some(s) = self.sessions.get_mut(key) else {
            return Vec::new();
        };
        s.ended_at = Some(now);
        let held: Vec<Held> = s.held.drain().collect();
        self.forget(&key.0, held.iter().map(|(id, _)| id));
        held
    }
}

/// Every tenant's worker sessions on this server.
#[derive(Debug)]
pub(crate) struct Sessions {
    inner: Mutex<Inner>,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions {
            inner: Mutex::new(Inner {
                sessions: LruCache::new(NonZeroUsize::new(MAX_SESSIONS).expect("non-zero")),
                by_job: HashMap::new(),
            }),
        }
    }
}

fn key(tenant: &str, session: &str) -> Key {
    (tenant.to_owned(), session.to_owned())
}

impl Sessions {
    /// Whether `session` (of `tenant`, claimed under by `owner`) has ended: a claim under it is
    /// refused before it reaches the store.
    pub(crate) fn is_ended(&self, tenant: &str, session: &str, owner: &str, now: u64) -> bool {
        let mut inner = self.inner.lock().expect("sessions lock");
        inner
            .sessions
            .get(&key(tenant, session))
            .is_some_and(|s| s.owner == owner && s.is_ended(now))
    }

    /// Notes the leases a claim under `session` handed out. [`Claimed::Ended`] when the session
    /// ended meanwhile (its page went away while the claim was on its way): nothing is kept.
    pub(crate) fn claimed(
        &self,
        tenant: &str,
        session: &str,
        owner: &str,
        leases: impl IntoIterator<Item = Held>,
        now: u64,
    ) -> Claimed {
        let mut inner = self.inner.lock().expect("sessions lock");
        let Some(s) = inner.session(key(tenant, session), owner) else {
            // Another caller's session id (a collision, or a guess): nothing is kept for it,
            // and its owner's session is left alone.
            return Claimed::Kept;
        };
        if s.is_ended(now) {
            return Claimed::Ended;
        }
        s.ended_at = None;
        let mut kept = Vec::new();
        for (id, token) in leases {
            if s.held.len() >= MAX_HELD && !s.held.contains_key(&id) {
                break; // not followed: it expires as any lease does
            }
            s.held.insert(id.clone(), token);
            kept.push(id);
        }
        for id in kept {
            inner.by_job.insert(key(tenant, &id), session.to_owned());
        }
        Claimed::Kept
    }

    /// A delivery of `tenant`'s job `id` ended (acked, nacked, released): its session, if
    /// any, no longer holds it.
    pub(crate) fn finished(&self, tenant: &str, id: &str) {
        let mut inner = self.inner.lock().expect("sessions lock");
        let Some(session) = inner.by_job.remove(&key(tenant, id)) else {
            return;
        };
        if let Some(s) = inner.sessions.peek_mut(&key(tenant, &session)) {
            s.held.remove(id);
        }
    }

    /// Ends `session` for `owner`: its later claims are refused, and the leases it holds are
    /// returned, to be handed back. A session this server never saw is remembered as ended
    /// (its first claim may still be on its way); another owner's is left alone.
    pub(crate) fn end(&self, tenant: &str, session: &str, owner: &str, now: u64) -> Vec<Held> {
        let mut inner = self.inner.lock().expect("sessions lock");
        let k = key(tenant, session);
        if inner.session(k.clone(), owner).is_none() {
            return Vec::new();
        }
        inner.end(&k, now)
    }

    /// An event stream of `owner`'s `session` opened. `false` when the session is another
    /// owner's (the stream is then not followed).
    pub(crate) fn stream_opened(&self, tenant: &str, session: &str, owner: &str) -> bool {
        let mut inner = self.inner.lock().expect("sessions lock");
        match inner.session(key(tenant, session), owner) {
            Some(s) => {
                s.streams += 1;
                true
            }
            None => false,
        }
    }

    /// That stream closed. With `dropped` (the client went away, not the server ending it),
    /// the mark to hand to [`Sessions::end_if_gone`] after [`GONE_AFTER_MS`].
    pub(crate) fn stream_closed(
        &self,
        tenant: &str,
        session: &str,
        owner: &str,
        dropped: bool,
    ) -> Option<u64> {
        let mut inner = self.inner.lock().expect("sessions lock");
        let s = inner
            .sessions
            .peek_mut(&key(tenant, session))
            .filter(|s| s.owner == owner)?;
        s.streams = s.streams.saturating_sub(1);
        s.closes += 1;
        dropped.then_some(s.closes)
    }

    /// Ends `session` when no stream of it opened or closed since the close `mark` came from
    /// and it has not ended: the leases it held, to be handed back. `None`: it lives on.
    pub(crate) fn end_if_gone(
        &self,
        tenant: &str,
        session: &str,
        owner: &str,
        mark: u64,
        now: u64,
    ) -> Option<Vec<Held>> {
        let mut inner = self.inner.lock().expect("sessions lock");
        let k = key(tenant, session);
        let s = inner.sessions.peek(&k).filter(|s| s.owner == owner)?;
        if s.streams > 0 || s.closes != mark || s.is_ended(now) {
            return None;
        }
        Some(inner.end(&k, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(id: &str) -> Held {
        (id.to_owned(), format!("tok-{id}"))
    }

    fn sorted(mut v: Vec<Held>) -> Vec<Held> {
        v.sort();
        v
    }

    #[test]
    fn an_ended_session_returns_what_it_holds_and_refuses_later_claims() {
        let s = Sessions::default();
        assert_eq!(s.claimed("t", "s1", "w", [held("a")], 0), Claimed::Kept);
        assert_eq!(
            s.claimed("t", "s1", "w", [held("b"), held("c")], 1),
            Claimed::Kept
        );
        s.finished("t", "a"); // acked: not the session's any more
        assert_eq!(sorted(s.end("t", "s1", "w", 2)), vec![held("b"), held("c")]);
        assert!(s.is_ended("t", "s1", "w", 3));
        // A claim that was on its way when the session ended.
        assert_eq!(s.claimed("t", "s1", "w", [held("d")], 4), Claimed::Ended);
        // Ending twice returns nothing more.
        assert!(s.end("t", "s1", "w", 5).is_empty());
        // Long after, the id is free again.
        assert!(!s.is_ended("t", "s1", "w", 5 + ENDED_MS));
    }

    #[test]
    fn an_end_before_the_first_claim_still_refuses_it() {
        let s = Sessions::default();
        assert!(s.end("t", "s1", "w", 5).is_empty());
        assert_eq!(s.claimed("t", "s1", "w", [held("a")], 6), Claimed::Ended);
    }

    #[test]
    fn no_one_ends_another_owners_session_or_another_tenants() {
        let s = Sessions::default();
        s.claimed("t", "s1", "w", [held("a")], 0);
        assert!(s.end("t", "s1", "mallory", 1).is_empty());
        assert!(!s.is_ended("t", "s1", "w", 2));
        assert!(!s.stream_opened("t", "s1", "mallory"));
        assert!(
            s.end("u", "s1", "w", 1).is_empty(),
            "another tenant's id space"
        );
        assert_eq!(s.claimed("t", "s1", "w", [held("b")], 3), Claimed::Kept);
        assert_eq!(sorted(s.end("t", "s1", "w", 4)), vec![held("a"), held("b")]);
    }

    #[test]
    fn a_dropped_stream_ends_the_session_unless_another_opened_or_the_server_closed_it() {
        let s = Sessions::default();
        s.claimed("t", "s1", "w", [held("a")], 0);
        assert!(s.stream_opened("t", "s1", "w"));
        // The server ended the stream (a lagging client, shutdown): no gone-check.
        assert_eq!(s.stream_closed("t", "s1", "w", false), None);
        assert!(s.stream_opened("t", "s1", "w"));
        // Dropped, and reopened in time (a reconnect): it lives on.
        let mark = s.stream_closed("t", "s1", "w", true).unwrap();
        assert!(s.stream_opened("t", "s1", "w"));
        assert_eq!(s.end_if_gone("t", "s1", "w", mark, 10), None);
        // Dropped, reopened and dropped again: only the latest close's check counts.
        let old = s.stream_closed("t", "s1", "w", true).unwrap();
        assert!(s.stream_opened("t", "s1", "w"));
        let mark = s.stream_closed("t", "s1", "w", true).unwrap();
        assert_eq!(s.end_if_gone("t", "s1", "w", old, 20), None);
        assert_eq!(
            s.end_if_gone("t", "s1", "w", mark, 20),
            Some(vec![held("a")])
        );
        assert!(s.is_ended("t", "s1", "w", 21));
        assert_eq!(s.end_if_gone("t", "s1", "w", mark, 22), None, "ended once");
    }

    #[test]
    fn a_session_follows_at_most_max_held_leases_and_a_dropped_session_its_jobs_none() {
        let s = Sessions::default();
        let many = (0..MAX_HELD + 10).map(|i| held(&i.to_string()));
        s.claimed("t", "s1", "w", many, 0);
        assert_eq!(s.end("t", "s1", "w", 1).len(), MAX_HELD);
        assert!(s.inner.lock().unwrap().by_job.is_empty());
    }
}
