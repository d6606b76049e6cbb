//! The server's protocol over `wasi:http/outgoing-handler` (through wstd's client): the queue,
//! the remote cache, the locks and the backend embedder, from one client holding the base URL and
//! the bearer token. Every request is awaited on its `wasi:io/poll` pollable: the component
//! yields to the host while it waits, and an idle worker blocks in `poll` without spinning.
//!
//! Status mapping (as the browser adapter's `src/http.rs`): 409 on a lease or lock route is
//! [`Error::LeaseLost`]; 409 on a cache put is a [`PutOutcome::Conflict`] carrying the stored
//! entry; 409 on lock acquire means "held"; every other non-2xx is [`Error::Http`] with the
//! protocol's code and `Retry-After`. A transport failure is [`Error::Unreachable`]; no answer
//! within the request timeout (plus a claim's long-poll wait) is [`Error::Http`] 408 `timeout`.

use std::cell::RefCell;
use std::rc::Rc;

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
use wstd::http::body::util::Empty;
use wstd::http::body::Bytes;
use wstd::http::error::ErrorCode;
use wstd::http::{Body, Client, Method, Request};
use wstd::time::Duration;

/// How long a connection may take to open, ms.
const CONNECT_TIMEOUT_MS: u64 = 5_000;

/// A client of one ternflow server (or none: then the remote cache misses, locks are granted
/// locally, and the queue and the backend are unreachable). Clones share one state.
#[derive(Debug, Clone)]
pub struct HttpClient {
    inner: Rc<Inner>,
}

#[derive(Debug)]
struct Inner {
    base: Option<String>,
    token: String,
    worker: String,
    timeout_ms: u64,
    backend_model: RefCell<Option<String>>,
    claim_model: RefCell<Option<String>>,
}

/// An answer: status, `Retry-After` (ms) and body.
struct Answer {
    status: u16,
    retry_after_ms: Option<u64>,
    body: Vec<u8>,
}

impl Answer {
    fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    fn json<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.body)
            .map_err(|e| Error::Protocol(format!("bad response body: {e}")))
    }

    /// The non-2xx answer as [`Error::Http`], and the cache entry a 409 carries, if any.
    fn failure(&self) -> (Error, Option<CacheEntry>) {
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

    /// The body as `T`, or the error; a 409 on a lease route is `LeaseLost(lease_id)`.
    fn expect<T: DeserializeOwned>(&self, lease_id: Option<&str>) -> Result<T> {
        if self.ok() {
            return self.json();
        }
        match (self.status, lease_id) {
            (409, Some(id)) => Err(Error::LeaseLost(id.to_owned())),
            _ => Err(self.failure().0),
        }
    }
}

/// Percent-encodes a path segment (ids and keys are `[A-Za-z0-9-_.:]`; anything else is
/// escaped all the same).
fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~:".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn is_timeout(e: &wstd::http::Error) -> bool {
    matches!(
        e.downcast_ref::<ErrorCode>(),
        Some(
            ErrorCode::ConnectionTimeout
                | ErrorCode::ConnectionReadTimeout
                | ErrorCode::ConnectionWriteTimeout
                | ErrorCode::HttpResponseTimeout
        )
    )
}

impl HttpClient {
    /// A client of the server at `base` (or none), as worker `worker`.
    pub fn new(base: Option<&str>, token: &str, worker: &str, timeout_ms: u64) -> Self {
        HttpClient {
            inner: Rc::new(Inner {
                base: base.map(|b| b.trim_end_matches('/').to_owned()),
                token: token.to_owned(),
                worker: worker.to_owned(),
                timeout_ms,
                backend_model: RefCell::new(None),
                claim_model: RefCell::new(None),
            }),
        }
    }

    /// Names `model` in this worker's claims (it fills in jobs enqueued without a model).
    pub fn set_claim_model(&self, model: Option<String>) {
        *self.inner.claim_model.borrow_mut() = model;
    }

    /// Whether a server is configured.
    pub fn is_online(&self) -> bool {
        self.inner.base.is_some()
    }

    /// Sends one request to `url` (absolute) and reads the whole answer; `wait_ms` is how long
    /// the server may hold it (a long poll).
    async fn send_url(
        &self,
        method: Method,
        url: &str,
        body: Option<Vec<u8>>,
        trace: &str,
        wait_ms: u64,
    ) -> Result<Answer> {
        let body = body.unwrap_or_default();
        // A known length, so the host does not send the body chunked.
        let mut rb = Request::builder()
            .method(method)
            .uri(url)
            .header("authorization", format!("Bearer {}", self.inner.token))
            .header("content-length", body.len().to_string());
        if !body.is_empty() {
            rb = rb.header("content-type", "application/json");
        }
        if !trace.is_empty() {
            rb = rb.header("traceparent", trace);
        }
        // No body: nothing is written at all. (wstd writes even an empty in-memory body, and
        // that write fails when the host has already closed the stream of a body-less request.)
        let body = if body.is_empty() {
            Body::from_http_body(Empty::<Bytes>::new())
        } else {
            Body::from(body)
        };
        let req = rb
            .body(body)
            .map_err(|e| Error::Protocol(format!("{url}: {e}")))?;
        let limit = self.inner.timeout_ms + wait_ms;
        let mut client = Client::new();
        client.set_connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS));
        if self.inner.timeout_ms > 0 {
            client.set_first_byte_timeout(Duration::from_millis(limit));
            client.set_between_bytes_timeout(Duration::from_millis(self.inner.timeout_ms));
        }
        let transport = |e: wstd::http::Error| {
            if is_timeout(&e) {
                Error::Http {
                    status: 408,
                    code: "timeout".into(),
                    message: format!("{url}: no answer within {limit} ms"),
                    retry_after_ms: None,
                }
            } else {
                Error::Unreachable(format!("{url}: {e:#}"))
            }
        };
        let resp = client.send(req).await.map_err(transport)?;
        let status = resp.status().as_u16();
        let retry_after_ms = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|s| s * 1000);
        let mut body = resp.into_body();
        let body = body.contents().await.map_err(transport)?.to_vec();
        Ok(Answer {
            status,
            retry_after_ms,
            body,
        })
    }

    async fn send<B: Serialize>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        trace: &str,
        wait_ms: u64,
    ) -> Result<Answer> {
        let Some(base) = &self.inner.base else {
            return Err(Error::Unreachable("no server configured".into()));
        };
        let body = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|e| Error::Protocol(e.to_string()))?;
        self.send_url(method, &format!("{base}{path}"), body, trace, wait_ms)
            .await
    }

    async fn post<B: Serialize>(&self, path: &str, body: &B, trace: &str) -> Result<Answer> {
        self.send(Method::POST, path, Some(body), trace, 0).await
    }

    /// Downloads a file (the model): `GET url`, the whole body.
    ///
    /// # Errors
    /// [`Error::Unreachable`], or [`Error::Http`] for a non-2xx answer.
    pub async fn download(&self, url: &str) -> Result<Vec<u8>> {
        let a = self.send_url(Method::GET, url, None, "", 0).await?;
        if a.ok() {
            Ok(a.body)
        } else {
            Err(a.failure().0)
        }
    }

    /// Pushes a metrics snapshot (`POST /v1/metrics`).
    ///
    /// # Errors
    /// When the server is unreachable or refuses the snapshot.
    pub async fn push_metrics(&self, m: &WorkerMetrics) -> Result<()> {
        let a = self.post("/v1/metrics", m, "").await?;
        if a.ok() {
            Ok(())
        } else {
            Err(a.failure().0)
        }
    }
}

impl JobSource for HttpClient {
    async fn claim(&self, max: u32, wait_ms: u64) -> Result<Vec<ClaimedJob>> {
        let body = ClaimRequest {
            worker: self.inner.worker.clone(),
            max,
            wait_ms,
            model_id: self.inner.claim_model.borrow().clone(),
        };
        let a = self
            .send(Method::POST, "/v1/jobs/claim", Some(&body), "", wait_ms)
            .await?;
        Ok(a.expect::<ClaimResponse>(None)?.jobs)
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
}

impl RemoteCache for HttpClient {
    async fn get(&self, key: &str, trace: &str) -> Result<Option<CacheEntry>> {
        if !self.is_online() {
            return Ok(None);
        }
        let path = format!("/v1/cache/{}", enc(key));
        let a = self.send::<()>(Method::GET, &path, None, trace, 0).await?;
        if a.status == 404 {
            return Ok(None);
        }
        a.expect(None).map(Some)
    }

    async fn put(&self, key: &str, put: &CachePut, trace: &str) -> Result<PutOutcome> {
        if !self.is_online() {
            return Ok(PutOutcome::Stored);
        }
        let path = format!("/v1/cache/{}", enc(key));
        let a = self.send(Method::PUT, &path, Some(put), trace, 0).await?;
        if a.ok() {
            return Ok(PutOutcome::Stored);
        }
        match a.failure() {
            (_, Some(entry)) if a.status == 409 => Ok(PutOutcome::Conflict(entry)),
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
        let a = self
            .post(&format!("/v1/locks/{}", enc(key)), &body, trace)
            .await?;
        if a.status == 409 {
            return Ok(None);
        }
        a.expect(None).map(Some)
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
        self.post(&path, &body, trace).await?.expect(Some(key))
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
        let a = self
            .send(Method::DELETE, &path, Some(&body), trace, 0)
            .await?;
        if a.ok() || a.status == 409 {
            // 409: it expired and someone else holds it now; nothing of ours to release.
            Ok(())
        } else {
            Err(a.failure().0)
        }
    }
}

impl Embedder for HttpClient {
    fn model_id(&self) -> Option<String> {
        self.inner.backend_model.borrow().clone()
    }

    async fn embed(&self, text: &str, trace: &str) -> Result<Vec<f32>> {
        let body = EmbedRequest {
            texts: vec![text.to_owned()],
        };
        let r: EmbedResponse = self.post("/v1/embed", &body, trace).await?.expect(None)?;
        *self.inner.backend_model.borrow_mut() = Some(r.model_id);
        r.vectors
            .into_iter()
            .next()
            .map(|v| v.0)
            .ok_or_else(|| Error::Protocol("embed response without a vector".into()))
    }
}
