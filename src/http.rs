//! The server's protocol over `fetch` (gloo-net): the queue, the remote cache, the locks and the
//! backend embedder, all from one client holding the base URL and the bearer token.
//!
//! Status mapping: 409 on a lease or lock route is [`Error::LeaseLost`]; 409 on a cache put is a
//! [`PutOutcome::Conflict`] carrying the stored entry; 409 on lock acquire means "held"; every
//! other non-2xx is [`Error::Http`] with the protocol's code and `Retry-After`. A network failure
//! is [`Error::Unreachable`]; no answer within the request timeout (`requestTimeoutMs`, plus the
//! long-poll wait for a claim) is [`Error::Http`] with status 408 and code `timeout` (retryable),
//! the request aborted. Without a server (offline mode) the remote cache always misses, locks
//! are granted locally, and the queue and backend are unreachable.

use std::cell::{Cell, RefCell};
use std::ops::Deref;
use std::rc::Rc;

use gloo_net::http::{Request, RequestBuilder, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;
use ternflow_core::ports::{Embedder, JobSource, Locks, PutOutcome, RemoteCache};
use ternflow_core::protocol::{
    AckBatchRequest, AckBatchResponse, AckRequest, CacheEntry, CachePut, ClaimRequest,
    ClaimResponse, ClaimedJob, EmbedRequest, EmbedResponse, ErrorBody, HeartbeatBatchRequest,
    HeartbeatBatchResponse, HeartbeatRequest, HeartbeatResponse, Lease, LockGrant, LockRequest,
    LockToken, NackBatchRequest, NackBatchResponse, NackRequest, NackResponse, ReleaseRequest,
    WorkerMetrics,
};
use ternflow_core::{Error, Result};

/// A client of one ternflow server (or none: offline mode). Cheap to clone: clones share one
/// connection state, so one client serves as the queue, the cache, the locks and the backend.
#[derive(Debug, Clone)]
pub struct HttpClient {
    inner: Rc<ClientInner>,
}

impl Deref for HttpClient {
    type Target = ClientInner;
    fn deref(&self) -> &ClientInner {
        &self.inner
    }
}

/// The shared state of an [`HttpClient`].
pub struct ClientInner {
    base: RefCell<Option<String>>,
    token: RefCell<String>,
    /// The current token's `exp` (Unix s) when it is a JWT, read once when the token is set.
    token_exp: Cell<Option<u64>>,
    /// Where a fresh token comes from (the page's `token()` function), when it can be renewed.
    token_source: RefCell<Option<TokenSource>>,
    worker: String,
    backend_model: RefCell<Option<String>>,
    /// The model this worker embeds with, named in claims (it fills in model-less jobs).
    claim_model: RefCell<Option<String>>,
    /// Limit of one request, ms (`0`: none).
    timeout_ms: Cell<u64>,
}

#[derive(Clone, Copy)]
enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl std::fmt::Debug for ClientInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token.
        f.debug_struct("ClientInner")
            .field("base", &self.base)
            .field("worker", &self.worker)
            .field("renewable", &self.token_source.borrow().is_some())
            .finish_non_exhaustive()
    }
}

/// Renew a signed token this long before its `exp`, seconds.
pub const RENEW_BEFORE_S: u64 = 30;

/// A source of fresh tokens (the page's `token()`; a test's minting function).
pub type TokenSource =
    Rc<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>>>>>;

/// The `exp` claim of a JWT (read, not verified: only to know when to renew).
fn jwt_exp(token: &str) -> Option<u64> {
    let claims = token.split('.').nth(1)?;
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(claims.trim_end_matches('='))
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v.get("exp")?.as_u64()
}

/// Default limit of one request, ms.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

impl HttpClient {
    /// A client of the server at `base` (e.g. `http://127.0.0.1:8787`), or offline with `None`.
    pub fn new(base: Option<&str>, token: &str, worker: &str) -> Self {
        HttpClient {
            inner: Rc::new(ClientInner {
                base: RefCell::new(base.map(|b| b.trim_end_matches('/').to_owned())),
                token: RefCell::new(token.to_owned()),
                token_exp: Cell::new(jwt_exp(token)),
                token_source: RefCell::new(None),
                worker: worker.to_owned(),
                backend_model: RefCell::new(None),
                claim_model: RefCell::new(None),
                timeout_ms: Cell::new(DEFAULT_TIMEOUT_MS),
            }),
        }
    }

    /// Names `model` in this worker's claims: jobs enqueued without a model id are handed out
    /// with it (the server's one rule for model-less jobs).
    pub fn set_claim_model(&self, model: Option<String>) {
        *self.claim_model.borrow_mut() = model;
    }

    /// Whether a server is configured.
    pub fn is_online(&self) -> bool {
        self.base.borrow().is_some()
    }

    /// The server's base URL.
    pub fn base(&self) -> Option<String> {
        self.base.borrow().clone()
    }

    /// Points every clone of this client at another server (or none). Used to fail over, and by
    /// the tests to cut the network and bring it back.
    pub fn set_base(&self, base: Option<&str>) {
        *self.base.borrow_mut() = base.map(|b| b.trim_end_matches('/').to_owned());
    }

    /// Limits every request to `ms` (a claim adds its long-poll wait); `0` for no limit.
    pub fn set_timeout_ms(&self, ms: u64) {
        self.timeout_ms.set(ms);
    }

    /// The bearer token.
    pub fn token(&self) -> String {
        self.token.borrow().clone()
    }

    /// Replaces the bearer token (every clone of this client uses it from the next request).
    pub fn set_token(&self, token: &str) {
        *self.token.borrow_mut() = token.to_owned();
        self.token_exp.set(jwt_exp(token));
    }

    /// Renews the token from `source`: before a signed token expires (within
    /// [`RENEW_BEFORE_S`] of its `exp`), and once on a 401 (then the request is sent again).
    /// Leases and in-flight jobs are untouched: only the `Authorization` header changes.
    pub fn set_token_source(&self, source: TokenSource) {
        *self.token_source.borrow_mut() = Some(source);
    }

    /// Whether a token source is set.
    pub fn is_renewable(&self) -> bool {
        self.token_source.borrow().is_some()
    }

    /// Asks the source for a fresh token; `true` when one arrived.
    async fn renew_token(&self) -> bool {
        let source = self.token_source.borrow().clone();
        let Some(source) = source else {
            return false;
        };
        match source().await {
            Some(t) if !t.is_empty() => {
                self.set_token(&t);
                true
            }
            _ => false,
        }
    }

    /// Renews first when the current token is a JWT about to expire.
    async fn renew_if_expiring(&self) {
        if self.token_source.borrow().is_none() {
            return;
        }
        if let Some(exp) = self.token_exp.get() {
            let now_s = ternflow_core::ports::Clock::now_ms(&crate::clock::BrowserClock) / 1_000;
            if now_s + RENEW_BEFORE_S >= exp {
                self.renew_token().await;
            }
        }
    }

    fn builder(&self, method: Method, path: &str, trace: &str) -> Result<RequestBuilder> {
        let Some(base) = self.base() else {
            return Err(Error::Unreachable("no server configured".into()));
        };
        let url = format!("{base}{path}");
        let mut rb = match method {
            Method::Get => Request::get(&url),
            Method::Post => Request::post(&url),
            Method::Put => Request::put(&url),
            Method::Delete => Request::delete(&url),
        }
        .header("authorization", &format!("Bearer {}", self.token.borrow()));
        if !trace.is_empty() {
            rb = rb.header("traceparent", trace);
        }
        Ok(rb)
    }

    async fn send<B: Serialize>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        trace: &str,
    ) -> Result<Response> {
        self.send_waiting(method, path, body, trace, 0).await
    }

    /// [`send`](Self::send) for a request the server may hold for `wait_ms` (a long poll). With
    /// a token source, a token about to expire is renewed first, and a 401 renews it and sends
    /// the request once more.
    async fn send_waiting<B: Serialize>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        trace: &str,
        wait_ms: u64,
    ) -> Result<Response> {
        self.renew_if_expiring().await;
        let resp = self.send_once(method, path, body, trace, wait_ms).await?;
        if resp.status() == 401 && self.renew_token().await {
            return self.send_once(method, path, body, trace, wait_ms).await;
        }
        Ok(resp)
    }

    async fn send_once<B: Serialize>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        trace: &str,
        wait_ms: u64,
    ) -> Result<Response> {
        let limit = match self.timeout_ms.get() {
            0 => 0,
            ms => ms + wait_ms,
        };
        let deadline = crate::cancel::Deadline::new(limit);
        let rb = self
            .builder(method, path, trace)?
            .abort_signal(deadline.signal().as_ref());
        let req = match body {
            Some(b) => rb.json(b),
            None => rb.build(),
        }
        .map_err(|e| Error::Protocol(e.to_string()))?;
        req.send().await.map_err(|e| {
            if deadline.timed_out() {
                Error::Http {
                    status: 408,
                    code: "timeout".into(),
                    message: format!("{path}: no answer within {limit} ms"),
                    retry_after_ms: None,
                }
            } else {
                Error::Unreachable(e.to_string())
            }
        })
    }

    async fn json<T: DeserializeOwned>(resp: Response) -> Result<T> {
        resp.json::<T>()
            .await
            .map_err(|e| Error::Protocol(format!("bad response body: {e}")))
    }

    /// Turns a non-2xx response into [`Error::Http`] (with the cache entry of a 409, if any).
    async fn failure(resp: Response) -> (Error, Option<CacheEntry>) {
        let status = resp.status();
        let retry_after_ms = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|s| s * 1000);
        let (code, message, entry) = match resp.json::<ErrorBody>().await {
            Ok(b) => (b.error.code, b.error.message, b.entry),
            Err(_) => (format!("http_{status}"), String::new(), None),
        };
        (
            Error::Http {
                status,
                code,
                message,
                retry_after_ms,
            },
            entry,
        )
    }

    async fn expect_ok<T: DeserializeOwned>(resp: Response, lease_id: Option<&str>) -> Result<T> {
        if resp.ok() {
            return Self::json(resp).await;
        }
        let status = resp.status();
        let (err, _) = Self::failure(resp).await;
        match (status, lease_id) {
            (409, Some(id)) => Err(Error::LeaseLost(id.to_owned())),
            _ => Err(err),
        }
    }

    /// Pushes a metrics snapshot (`POST /v1/metrics`).
    ///
    /// # Errors
    /// When the server is unreachable or refuses the snapshot.
    pub async fn push_metrics(&self, m: &WorkerMetrics) -> Result<()> {
        let resp = self.send(Method::Post, "/v1/metrics", Some(m), "").await?;
        if resp.ok() {
            Ok(())
        } else {
            Err(Self::failure(resp).await.0)
        }
    }
}

fn enc(s: &str) -> String {
    String::from(js_sys::encode_uri_component(s))
}

impl JobSource for HttpClient {
    async fn claim(&self, max: u32, wait_ms: u64) -> Result<Vec<ClaimedJob>> {
        let body = ClaimRequest {
            worker: self.worker.clone(),
            max,
            wait_ms,
            model_id: self.claim_model.borrow().clone(),
        };
        let resp = self
            .send_waiting(Method::Post, "/v1/jobs/claim", Some(&body), "", wait_ms)
            .await?;
        Ok(Self::expect_ok::<ClaimResponse>(resp, None).await?.jobs)
    }

    async fn heartbeat(&self, job_id: &str, token: &str, trace: &str) -> Result<Lease> {
        let body = HeartbeatRequest {
            token: token.to_owned(),
        };
        let path = format!("/v1/jobs/{}/heartbeat", enc(job_id));
        let resp = self.send(Method::Post, &path, Some(&body), trace).await?;
        Ok(Self::expect_ok::<HeartbeatResponse>(resp, Some(job_id))
            .await?
            .lease)
    }

    async fn ack(&self, job_id: &str, ack: &AckRequest, trace: &str) -> Result<()> {
        let path = format!("/v1/jobs/{}/ack", enc(job_id));
        let resp = self.send(Method::Post, &path, Some(ack), trace).await?;
        Self::expect_ok::<serde_json::Value>(resp, Some(job_id)).await?;
        Ok(())
    }

    async fn ack_many(&self, acks: &[(String, AckRequest)]) -> Result<Vec<Result<()>>> {
        let body = AckBatchRequest::from_pairs(acks);
        let resp = self
            .send(Method::Post, "/v1/jobs/ack", Some(&body), "")
            .await?;
        Self::expect_ok::<AckBatchResponse>(resp, None)
            .await?
            .into_results(acks.len())
    }

    async fn heartbeat_many(&self, leases: &[(String, String)]) -> Result<Vec<Result<Lease>>> {
        let body = HeartbeatBatchRequest::from_pairs(leases);
        let resp = self
            .send(Method::Post, "/v1/jobs/heartbeat", Some(&body), "")
            .await?;
        Self::expect_ok::<HeartbeatBatchResponse>(resp, None)
            .await?
            .into_results(leases.len())
    }

    async fn nack(&self, job_id: &str, nack: &NackRequest, trace: &str) -> Result<NackResponse> {
        let path = format!("/v1/jobs/{}/nack", enc(job_id));
        let resp = self.send(Method::Post, &path, Some(nack), trace).await?;
        Self::expect_ok(resp, Some(job_id)).await
    }

    async fn nack_many(
        &self,
        nacks: &[(String, NackRequest)],
    ) -> Result<Vec<Result<NackResponse>>> {
        let body = NackBatchRequest::from_pairs(nacks);
        let resp = self
            .send(Method::Post, "/v1/jobs/nack", Some(&body), "")
            .await?;
        Self::expect_ok::<NackBatchResponse>(resp, None)
            .await?
            .into_results(nacks.len())
    }

    async fn release(&self, job_id: &str, token: &str, trace: &str) -> Result<()> {
        let body = ReleaseRequest {
            token: token.to_owned(),
        };
        let path = format!("/v1/jobs/{}/release", enc(job_id));
        let resp = self.send(Method::Post, &path, Some(&body), trace).await?;
        if resp.ok() {
            return Ok(());
        }
        let status = resp.status();
        let (err, _) = Self::failure(resp).await;
        match status {
            409 => Err(Error::LeaseLost(job_id.to_owned())),
            _ => Err(err),
        }
    }
}

impl RemoteCache for HttpClient {
    async fn get(&self, key: &str, trace: &str) -> Result<Option<CacheEntry>> {
        if !self.is_online() {
            return Ok(None);
        }
        let path = format!("/v1/cache/{}", enc(key));
        let resp = self.send::<()>(Method::Get, &path, None, trace).await?;
        if resp.status() == 404 {
            return Ok(None);
        }
        Self::expect_ok(resp, None).await.map(Some)
    }

    async fn put(&self, key: &str, put: &CachePut, trace: &str) -> Result<PutOutcome> {
        if !self.is_online() {
            return Ok(PutOutcome::Stored);
        }
        let path = format!("/v1/cache/{}", enc(key));
        let resp = self.send(Method::Put, &path, Some(put), trace).await?;
        if resp.ok() {
            return Ok(PutOutcome::Stored);
        }
        let status = resp.status();
        match Self::failure(resp).await {
            (_, Some(entry)) if status == 409 => Ok(PutOutcome::Conflict(entry)),
            (e, _) => Err(e),
        }
    }
}

impl Locks for HttpClient {
    async fn acquire(&self, key: &str, ttl_ms: u64, trace: &str) -> Result<Option<LockGrant>> {
        if !self.is_online() {
            return Ok(Some(LockGrant {
                token: "local".into(),
                fence: 0,
                expires_at: u64::MAX,
            }));
        }
        let body = LockRequest {
            ttl_ms: Some(ttl_ms),
        };
        let path = format!("/v1/locks/{}", enc(key));
        let resp = self.send(Method::Post, &path, Some(&body), trace).await?;
        if resp.status() == 409 {
            return Ok(None);
        }
        Self::expect_ok(resp, None).await.map(Some)
    }

    async fn renew(&self, key: &str, token: &str, ttl_ms: u64, trace: &str) -> Result<LockGrant> {
        if !self.is_online() {
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
        let resp = self.send(Method::Post, &path, Some(&body), trace).await?;
        Self::expect_ok(resp, Some(key)).await
    }

    async fn release(&self, key: &str, token: &str, trace: &str) -> Result<()> {
        if !self.is_online() {
            return Ok(());
        }
        let body = LockToken {
            token: token.to_owned(),
            ttl_ms: None,
        };
        let path = format!("/v1/locks/{}", enc(key));
        let resp = self.send(Method::Delete, &path, Some(&body), trace).await?;
        if resp.ok() || resp.status() == 409 {
            // 409: it expired and someone else holds it now; nothing of ours to release.
            Ok(())
        } else {
            Err(Self::failure(resp).await.0)
        }
    }
}

impl Embedder for HttpClient {
    fn model_id(&self) -> Option<String> {
        self.backend_model.borrow().clone()
    }

    async fn embed(&self, text: &str, trace: &str) -> Result<Vec<f32>> {
        let body = EmbedRequest {
            texts: vec![text.to_owned()],
        };
        let resp = self
            .send(Method::Post, "/v1/embed", Some(&body), trace)
            .await?;
        let r: EmbedResponse = Self::expect_ok(resp, None).await?;
        *self.backend_model.borrow_mut() = Some(r.model_id);
        r.vectors
            .into_iter()
            .next()
            .map(|v| v.0)
            .ok_or_else(|| Error::Protocol("embed response without a vector".into()))
    }
}
