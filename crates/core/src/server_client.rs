//! The server's protocol as a worker speaks it: the queue, the remote cache, the locks and the
//! backend embedder over one [`Transport`]. The adapters (the browser's `fetch`, WASI's
//! `wasi:http`) only move bytes; which answer means what is decided here, once.
//!
//! Status mapping: 409 on a lease or lock route is [`Error::LeaseLost`]; 409 on a cache put is a
//! [`PutOutcome::Conflict`] carrying the stored entry; 409 on lock acquire means "held"; every
//! other non-2xx is [`Error::Http`] with the protocol's code and `Retry-After`. Without a server
//! (offline mode) the remote cache always misses, locks are granted locally, and the queue and the
//! backend are [`Error::Unreachable`]. Transport failures and timeouts are the transport's to
//! report (as [`Error::Unreachable`] and [`Error::Http`] 408 `timeout`).

use std::cell::RefCell;
use std::ops::Deref;
use std::rc::Rc;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::ports::{Embedder, JobSource, Locks, PutOutcome, RemoteCache};
use crate::protocol::{
    AckBatchRequest, AckBatchResponse, AckRequest, CacheEntry, CachePut, ClaimRequest,
    ClaimResponse, ClaimedJob, EmbedRequest, EmbedResponse, ErrorBody, HeartbeatBatchRequest,
    HeartbeatBatchResponse, HeartbeatRequest, HeartbeatResponse, Lease, LockGrant, LockRequest,
    LockToken, NackBatchRequest, NackBatchResponse, NackRequest, NackResponse, ReleaseBatchRequest,
    ReleaseBatchResponse, ReleaseRequest, WorkerMetrics,
};

/// The request methods the protocol uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `GET`
    Get,
    /// `POST`
    Post,
    /// `PUT`
    Put,
    /// `DELETE`
    Delete,
}

/// One whole answer, as a transport read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// `Retry-After`, in ms.
    pub retry_after_ms: Option<u64>,
    /// The body.
    pub body: Vec<u8>,
}

impl Answer {
    /// An answer with status `status`, the `Retry-After` header's value as sent (seconds;
    /// anything else is ignored) and `body`.
    pub fn new(status: u16, retry_after: Option<&str>, body: Vec<u8>) -> Self {
        Answer {
            status,
            retry_after_ms: retry_after
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|s| s.saturating_mul(1000)),
            body,
        }
    }

    /// Whether the status is 2xx.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as `T`.
    ///
    /// # Errors
    /// [`Error::Protocol`] when it is not.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.body)
            .map_err(|e| Error::Protocol(format!("bad response body: {e}")))
    }

    /// The non-2xx answer as [`Error::Http`] (the protocol's code and message when the body has
    /// them), and the cache entry a 409 carries, if any.
    pub fn failure(&self) -> (Error, Option<CacheEntry>) {
        let (code, message, entry) = match serde_json::from_slice::<ErrorBody>(&self.body) {
            Ok(b) => (b.error.code, b.error.message, b.entry),
            Err(_) => (format!("http_{}", self.status), String::new(), None),
        };
        let err = Error::Http {
            status: self.status,
            code,
            message,
            retry_after_ms: self.retry_after_ms,
        };
        (err, entry)
    }

    /// The body as `T`, or the error; a 409 on a lease route (`lease_id`) is
    /// [`Error::LeaseLost`].
    ///
    /// # Errors
    /// As above.
    pub fn expect<T: DeserializeOwned>(&self, lease_id: Option<&str>) -> Result<T> {
        if self.ok() {
            return self.json();
        }
        match (self.status, lease_id) {
            (409, Some(id)) => Err(Error::LeaseLost(id.to_owned())),
            _ => Err(self.failure().0),
        }
    }

    /// `Ok` for a 2xx, else the error.
    ///
    /// # Errors
    /// As [`Answer::failure`].
    pub fn check(&self) -> Result<()> {
        if self.ok() {
            Ok(())
        } else {
            Err(self.failure().0)
        }
    }
}

/// The error a transport reports when `what` got no answer within `limit_ms`: 408 `timeout`,
/// which the retry policy treats as transient.
pub fn timed_out(what: &str, limit_ms: u64) -> Error {
    Error::Http {
        status: 408,
        code: "timeout".into(),
        message: format!("{what}: no answer within {limit_ms} ms"),
        retry_after_ms: None,
    }
}

/// How requests reach the server: the one thing each adapter provides.
#[allow(async_fn_in_trait)] // single-threaded adapters, as in `ports`
pub trait Transport {
    /// Whether a server is configured.
    fn is_online(&self) -> bool;

    /// Sends `verb path` (below the server's base URL) with a JSON `body` and the job's
    /// `traceparent` (`""`: none), and reads the whole answer. `wait_ms` is how long the server
    /// may hold the request (a claim's long poll), on top of the transport's own limit.
    ///
    /// # Errors
    /// [`Error::Unreachable`] when nothing answered (or no server is configured), [`Error::Http`]
    /// 408 `timeout` when the answer did not come in time.
    async fn send(
        &self,
        verb: Verb,
        path: &str,
        body: Option<Vec<u8>>,
        trace: &str,
        wait_ms: u64,
    ) -> Result<Answer>;
}

/// Path segments: job ids and keys are `[A-Za-z0-9-_.:]`; anything else is escaped all the same.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b':');

fn enc(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

struct Shared<T> {
    transport: T,
    worker: String,
    /// The model the backend answered with last.
    backend_model: RefCell<Option<String>>,
    /// The model this worker embeds with, named in claims (it fills in model-less jobs).
    claim_model: RefCell<Option<String>>,
    /// The worker session named in claims (`ClaimRequest::session`), when its page gave one.
    session: RefCell<Option<String>>,
    /// How often this client renewed its session.
    renewals: std::cell::Cell<u32>,
}

/// A client of one ternflow server as worker `worker`, over transport `T` (which it derefs
/// to, for the transport's own settings). Cheap to clone: clones share one state, so one client
/// serves as the queue, the remote cache, the locks and the backend.
pub struct ServerClient<T> {
    shared: Rc<Shared<T>>,
}

impl<T> Clone for ServerClient<T> {
    fn clone(&self) -> Self {
        ServerClient {
            shared: Rc::clone(&self.shared),
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for ServerClient<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerClient")
            .field("transport", &self.shared.transport)
            .field("worker", &self.shared.worker)
            .finish_non_exhaustive()
    }
}

impl<T> Deref for ServerClient<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.shared.transport
    }
}

impl<T: Transport> ServerClient<T> {
    /// A client over `transport`, claiming as `worker`.
    pub fn new(transport: T, worker: &str) -> Self {
        ServerClient {
            shared: Rc::new(Shared {
                transport,
                worker: worker.to_owned(),
                backend_model: RefCell::new(None),
                claim_model: RefCell::new(None),
                session: RefCell::new(None),
                renewals: std::cell::Cell::new(0),
            }),
        }
    }

    /// Names `model` in this worker's claims: jobs enqueued without a model id are handed out
    /// with it (the server's one rule for model-less jobs).
    pub fn set_claim_model(&self, model: Option<String>) {
        *self.shared.claim_model.borrow_mut() = model;
    }

    /// Names `session` in this worker's claims (its page's id for the run, which the page's
    /// hand-back ends when it goes away); `None`: claims name none.
    pub fn set_session(&self, session: Option<String>) {
        *self.shared.session.borrow_mut() = session;
    }

    /// The session named in claims, if any (the event stream names it too).
    pub fn session(&self) -> Option<String> {
        self.shared.session.borrow().clone()
    }

    /// A claim was refused `session_ended` while this worker runs on (its stream dropped for
    /// longer than the server waits, or a back-forward cache restore): later claims go under a
    /// new session, `<id>-<n>` (unique per session owner, which is all the server asks).
    fn renew_session(&self) {
        let mut s = self.shared.session.borrow_mut();
        if let Some(old) = s.as_deref() {
            let base = old.split_once('-').map_or(old, |(base, _)| base);
            let base: String = base.chars().take(48).collect();
            let n = self.shared.renewals.get().wrapping_add(1);
            self.shared.renewals.set(n);
            *s = Some(format!("{base}-{n}"));
        }
    }

    async fn send<B: Serialize>(
        &self,
        verb: Verb,
        path: &str,
        body: Option<&B>,
        trace: &str,
        wait_ms: u64,
    ) -> Result<Answer> {
        let body = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|e| Error::Protocol(e.to_string()))?;
        self.shared
            .transport
            .send(verb, path, body, trace, wait_ms)
            .await
    }

    async fn post<B: Serialize>(&self, path: &str, body: &B, trace: &str) -> Result<Answer> {
        self.send(Verb::Post, path, Some(body), trace, 0).await
    }

    /// Pushes a metrics snapshot (`POST /v1/metrics`).
    ///
    /// # Errors
    /// When the server is unreachable or refuses the snapshot.
    pub async fn push_metrics(&self, m: &WorkerMetrics) -> Result<()> {
        self.post("/v1/metrics", m, "").await?.check()
    }
}

impl<T: Transport> JobSource for ServerClient<T> {
    async fn claim(&self, max: u32, wait_ms: u64) -> Result<Vec<ClaimedJob>> {
        let body = ClaimRequest {
            worker: self.shared.worker.clone(),
            max,
            wait_ms,
            model_id: self.shared.claim_model.borrow().clone(),
            session: self.shared.session.borrow().clone(),
        };
        let a = self
            .send(Verb::Post, "/v1/jobs/claim", Some(&body), "", wait_ms)
            .await?;
        let jobs = a.expect::<ClaimResponse>(None);
        if let Err(Error::Http { code, .. }) = &jobs {
            if code == crate::ErrorCode::SessionEnded.as_str() {
                self.renew_session();
            }
        }
        Ok(jobs?.jobs)
    }

    async fn heartbeat(&self, job_id: &str, token: &str, trace: &str) -> Result<Lease> {
        let body = HeartbeatRequest {
            token: token.to_owned(),
        };
        let path = format!("/v1/jobs/{}/heartbeat", enc(job_id));
        let a = self.post(&path, &body, trace).await?;
        Ok(a.expect::<HeartbeatResponse>(Some(job_id))?.lease)
    }

    async fn heartbeat_many(&self, leases: &[(String, String)]) -> Result<Vec<Result<Lease>>> {
        let body = HeartbeatBatchRequest::from_pairs(leases);
        self.post("/v1/jobs/heartbeat", &body, "")
            .await?
            .expect::<HeartbeatBatchResponse>(None)?
            .into_results(leases.len())
    }

    async fn ack(&self, job_id: &str, ack: &AckRequest, trace: &str) -> Result<()> {
        let path = format!("/v1/jobs/{}/ack", enc(job_id));
        let a = self.post(&path, ack, trace).await?;
        a.expect::<serde_json::Value>(Some(job_id))?;
        Ok(())
    }

    async fn ack_many(&self, acks: &[(String, AckRequest)]) -> Result<Vec<Result<()>>> {
        let body = AckBatchRequest::from_pairs(acks);
        self.post("/v1/jobs/ack", &body, "")
            .await?
            .expect::<AckBatchResponse>(None)?
            .into_results(acks.len())
    }

    async fn nack(&self, job_id: &str, nack: &NackRequest, trace: &str) -> Result<NackResponse> {
        let path = format!("/v1/jobs/{}/nack", enc(job_id));
        self.post(&path, nack, trace).await?.expect(Some(job_id))
    }

    async fn nack_many(
        &self,
        nacks: &[(String, NackRequest)],
    ) -> Result<Vec<Result<NackResponse>>> {
        let body = NackBatchRequest::from_pairs(nacks);
        self.post("/v1/jobs/nack", &body, "")
            .await?
            .expect::<NackBatchResponse>(None)?
            .into_results(nacks.len())
    }

    async fn release(&self, job_id: &str, token: &str, trace: &str) -> Result<()> {
        let body = ReleaseRequest {
            token: token.to_owned(),
        };
        let path = format!("/v1/jobs/{}/release", enc(job_id));
        let a = self.post(&path, &body, trace).await?;
        match a.status {
            _ if a.ok() => Ok(()),
            409 => Err(Error::LeaseLost(job_id.to_owned())),
            _ => Err(a.failure().0),
        }
    }

    async fn release_many(&self, leases: &[(String, String)]) -> Result<Vec<Result<()>>> {
        let body = ReleaseBatchRequest::from_pairs(leases);
        let a = self.post("/v1/jobs/release", &body, "").await?;
        if matches!(a.status, 404 | 405) {
            // A server from before the batch route: one request per lease.
            let mut out = Vec::with_capacity(leases.len());
            for (id, token) in leases {
                out.push(JobSource::release(self, id, token, "").await);
            }
            return Ok(out);
        }
        a.expect::<ReleaseBatchResponse>(None)?
            .into_results(leases.len())
    }
}

impl<T: Transport> RemoteCache for ServerClient<T> {
    async fn get(&self, key: &str, trace: &str) -> Result<Option<CacheEntry>> {
        if !self.shared.transport.is_online() {
            return Ok(None);
        }
        let path = format!("/v1/cache/{}", enc(key));
        let a = self.send::<()>(Verb::Get, &path, None, trace, 0).await?;
        if a.status == 404 {
            return Ok(None);
        }
        a.expect(None).map(Some)
    }

    async fn put(&self, key: &str, put: &CachePut, trace: &str) -> Result<PutOutcome> {
        if !self.shared.transport.is_online() {
            return Ok(PutOutcome::Stored);
        }
        let path = format!("/v1/cache/{}", enc(key));
        let a = self.send(Verb::Put, &path, Some(put), trace, 0).await?;
        if a.ok() {
            return Ok(PutOutcome::Stored);
        }
        match a.failure() {
            (_, Some(entry)) if a.status == 409 => Ok(PutOutcome::Conflict(entry)),
            (e, _) => Err(e),
        }
    }
}

impl<T: Transport> Locks for ServerClient<T> {
    async fn acquire(&self, key: &str, ttl_ms: u64, trace: &str) -> Result<Option<LockGrant>> {
        if !self.shared.transport.is_online() {
            return Ok(Some(LockGrant {
                token: "local".into(),
                fence: 0,
                expires_at: u64::MAX,
            }));
        }
        let body = LockRequest {
            ttl_ms: Some(ttl_ms),
        };
        let a = self
            .post(&format!("/v1/locks/{}", enc(key)), &body, trace)
            .await?;
        if a.status == 409 {
            return Ok(None);
        }
        a.expect(None).map(Some)
    }

    async fn renew(&self, key: &str, token: &str, ttl_ms: u64, trace: &str) -> Result<LockGrant> {
        if !self.shared.transport.is_online() {
            return Ok(LockGrant {
                token: token.to_owned(),
                fence: 0,
                expires_at: u64::MAX,
            });
        }
        let body = LockToken {
            token: token.to_owned(),
            ttl_ms: Some(ttl_ms),
        };
        let path = format!("/v1/locks/{}/renew", enc(key));
        self.post(&path, &body, trace).await?.expect(Some(key))
    }

    async fn release(&self, key: &str, token: &str, trace: &str) -> Result<()> {
        if !self.shared.transport.is_online() {
            return Ok(());
        }
        let body = LockToken {
            token: token.to_owned(),
            ttl_ms: None,
        };
        let path = format!("/v1/locks/{}", enc(key));
        let a = self
            .send(Verb::Delete, &path, Some(&body), trace, 0)
            .await?;
        if a.status == 409 {
            // It expired and someone else holds it now; nothing of ours to release.
            return Ok(());
        }
        a.check()
    }
}

impl<T: Transport> Embedder for ServerClient<T> {
    fn model_id(&self) -> Option<String> {
        self.shared.backend_model.borrow().clone()
    }

    async fn embed(&self, text: &str, trace: &str) -> Result<Vec<f32>> {
        self.embed_with(text, None, trace).await
    }

    async fn embed_with(
        &self,
        text: &str,
        max_tokens: Option<u32>,
        trace: &str,
    ) -> Result<Vec<f32>> {
        let body = EmbedRequest {
            texts: vec![text.to_owned()],
            max_tokens,
        };
        let r: EmbedResponse = self.post("/v1/embed", &body, trace).await?.expect(None)?;
        *self.shared.backend_model.borrow_mut() = Some(r.model_id);
        r.vectors
            .into_iter()
            .next()
            .map(|v| v.0)
            .ok_or_else(|| Error::Protocol("embed response without a vector".into()))
    }
}

#[cfg(test)]
mod tests {
    //! The mapping from answers to port results, over a transport that replays set answers and
    //! records what was sent. (The real transports are tested against the real server: the
    //! browser tests and `crates/cli/tests/wasi.rs`.)
    use super::*;
    use crate::codec::Vector;
    use crate::memory::FakeClock;
    use std::collections::VecDeque;

    #[derive(Debug, Default)]
    struct Replay {
        online: bool,
        answers: RefCell<VecDeque<Answer>>,
        sent: RefCell<Vec<(Verb, String, u64)>>,
    }

    impl Transport for Replay {
        fn is_online(&self) -> bool {
            self.online
        }
        async fn send(
            &self,
            verb: Verb,
            path: &str,
            _body: Option<Vec<u8>>,
            _trace: &str,
            wait_ms: u64,
        ) -> Result<Answer> {
            self.sent
                .borrow_mut()
                .push((verb, path.to_owned(), wait_ms));
            self.answers
                .borrow_mut()
                .pop_front()
                .ok_or_else(|| Error::Unreachable("no answer".into()))
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        FakeClock::at(0).run(f)
    }

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status,
            retry_after_ms: None,
            body: body.as_bytes().to_vec(),
        }
    }

    fn client(answers: Vec<Answer>) -> ServerClient<Replay> {
        ServerClient::new(
            Replay {
                online: true,
                answers: RefCell::new(answers.into()),
                ..Replay::default()
            },
            "w1",
        )
    }

    #[test]
    fn a_409_means_lease_lost_on_lease_routes_held_on_lock_acquire_and_conflict_on_a_put() {
        let entry = r#"{"vector":"AAAAAA==","model_id":"m","fence":7,"expires_at":0}"#;
        let c = client(vec![
            answer(409, r#"{"error":{"code":"lease_lost","message":"x"}}"#),
            answer(409, r#"{"error":{"code":"held","message":""}}"#),
            answer(
                409,
                &format!(r#"{{"error":{{"code":"stale_fence","message":""}},"entry":{entry}}}"#),
            ),
            answer(409, ""),
            answer(409, ""),
        ]);
        let hb = block_on(JobSource::heartbeat(&c, "j/1", "t", ""));
        assert!(matches!(hb, Err(Error::LeaseLost(id)) if id == "j/1"));
        assert_eq!(c.sent.borrow()[0].1, "/v1/jobs/j%2F1/heartbeat");
        assert_eq!(block_on(c.acquire("k", 1_000, "")).unwrap(), None);
        let put = CachePut {
            vector: Vector(vec![0.0]),
            model_id: "m".into(),
            fence: 3,
            ttl_ms: None,
            text: None,
            worker: None,
        };
        match block_on(RemoteCache::put(&c, "k", &put, "")).unwrap() {
            PutOutcome::Conflict(e) => assert_eq!(e.fence, 7),
            other => panic!("expected a conflict, got {other:?}"),
        }
        assert!(matches!(
            block_on(JobSource::release(&c, "j", "t", "")),
            Err(Error::LeaseLost(_))
        ));
        // Releasing a lock that expired and was taken over is not an error.
        block_on(Locks::release(&c, "k", "t", "")).unwrap();
    }

    #[test]
    fn a_claim_refused_for_an_ended_session_goes_on_under_a_new_one() {
        let ended = r#"{"error":{"code":"session_ended","message":"ended"}}"#;
        let c = client(vec![answer(409, ended), answer(409, ended)]);
        c.set_session(Some("abc123".into()));
        assert!(matches!(
            block_on(c.claim(1, 0)),
            Err(Error::Http { status: 409, code, .. }) if code == "session_ended"
        ));
        assert_eq!(c.session().as_deref(), Some("abc123-1"));
        assert!(block_on(c.claim(1, 0)).is_err());
        assert_eq!(
            c.session().as_deref(),
            Some("abc123-2"),
            "one base, a new number"
        );
        // Without a session there is nothing to renew.
        let c = client(vec![answer(409, ended)]);
        assert!(block_on(c.claim(1, 0)).is_err());
        assert_eq!(c.session(), None);
    }

    #[test]
    fn other_failures_keep_the_servers_code_and_retry_after() {
        let a = Answer::new(
            429,
            Some(" 2 "),
            br#"{"error":{"code":"rate_limited","message":"slow down"}}"#.to_vec(),
        );
        assert_eq!(Answer::new(503, Some("soon"), vec![]).retry_after_ms, None);
        let c = client(vec![
            a,
            answer(502, "<html>bad gateway</html>"),
            answer(404, ""),
        ]);
        match block_on(c.claim(8, 500)) {
            Err(Error::Http {
                status: 429,
                code,
                retry_after_ms: Some(2_000),
                ..
            }) => assert_eq!(code, "rate_limited"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            c.sent.borrow()[0].2,
            500,
            "a claim tells the transport its wait"
        );
        assert!(matches!(
            block_on(c.embed("x", "")),
            Err(Error::Http { status: 502, code, .. }) if code == "http_502"
        ));
        assert_eq!(block_on(RemoteCache::get(&c, "k", "")).unwrap(), None);
    }

    #[test]
    fn offline_the_cache_misses_locks_are_local_and_the_queue_is_unreachable() {
        let c = ServerClient::new(Replay::default(), "w1");
        assert_eq!(block_on(RemoteCache::get(&c, "k", "")).unwrap(), None);
        let grant = block_on(c.acquire("k", 1_000, "")).unwrap().unwrap();
        assert_eq!(grant.token, "local");
        assert!(matches!(
            block_on(c.claim(1, 0)),
            Err(Error::Unreachable(_))
        ));
        assert!(
            c.sent.borrow().len() == 1,
            "only the claim reached the transport"
        );
    }

    #[test]
    fn a_bad_body_on_a_2xx_is_a_protocol_error_and_the_backend_model_is_remembered() {
        let c = client(vec![
            answer(200, "{not json"),
            answer(200, r#"{"model_id":"backend-1","vectors":["AAAAAA=="]}"#),
        ]);
        assert!(matches!(block_on(c.claim(1, 0)), Err(Error::Protocol(_))));
        assert_eq!(c.model_id(), None);
        assert_eq!(block_on(c.embed("x", "")).unwrap(), vec![0.0]);
        assert_eq!(c.model_id().as_deref(), Some("backend-1"));
    }
}
