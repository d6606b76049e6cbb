//! The transport of the server's protocol over `fetch` (gloo-net): the base URL, the bearer
//! token (renewed from the page's `token()` before it expires and once on a 401) and the request
//! timeout. What each answer means (409s, offline mode, per-item batch results) is
//! `ternflow_core::server_client`'s.
//!
//! A network failure is [`Error::Unreachable`]; no answer within the request timeout
//! (`requestTimeoutMs`, plus the long-poll wait for a claim) is [`Error::Http`] with status 408
//! and code `timeout` (retryable), the request aborted.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use gloo_net::http::{Request, RequestBuilder};
use ternflow_core::server_client::{timed_out, Answer, ServerClient, Transport, Verb};
use ternflow_core::{Error, Result};

/// The worker's client of the server (or of none: offline mode): the protocol over [`Fetch`].
/// Cheap to clone: clones share one state, so one client serves as the queue, the cache, the
/// locks and the backend.
pub type HttpClient = ServerClient<Fetch>;

/// Requests to one ternflow server over `fetch`.
pub struct Fetch {
    base: RefCell<Option<String>>,
    token: RefCell<String>,
    /// The current token's `exp` (Unix s) when it is a JWT, read once when the token is set.
    token_exp: Cell<Option<u64>>,
    /// Where a fresh token comes from (the page's `token()` function), when it can be renewed.
    token_source: RefCell<Option<TokenSource>>,
    /// Limit of one request, ms (`0`: none).
    timeout_ms: Cell<u64>,
}

impl std::fmt::Debug for Fetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token.
        f.debug_struct("Fetch")
            .field("base", &self.base)
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

/// A client of the server at `base` (e.g. `http://127.0.0.1:8787`), or offline with `None`,
/// claiming as `worker`.
pub fn client(base: Option<&str>, token: &str, worker: &str) -> HttpClient {
    ServerClient::new(Fetch::new(base, token), worker)
}

impl Fetch {
    /// Requests to the server at `base`, or none.
    pub fn new(base: Option<&str>, token: &str) -> Self {
        Fetch {
            base: RefCell::new(base.map(|b| b.trim_end_matches('/').to_owned())),
            token: RefCell::new(token.to_owned()),
            token_exp: Cell::new(jwt_exp(token)),
            token_source: RefCell::new(None),
            timeout_ms: Cell::new(DEFAULT_TIMEOUT_MS),
        }
    }

    /// Whether a server is configured.
    pub fn is_online(&self) -> bool {
        self.base.borrow().is_some()
    }

    /// The server's base URL.
    pub fn base(&self) -> Option<String> {
        self.base.borrow().clone()
    }

    /// Points every clone of the client at another server (or none). Used to fail over, and by
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

    /// Replaces the bearer token (every clone of the client uses it from the next request).
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

    fn builder(&self, verb: Verb, path: &str, trace: &str) -> Result<RequestBuilder> {
        let Some(base) = self.base() else {
            return Err(Error::Unreachable("no server configured".into()));
        };
        let url = format!("{base}{path}");
        let mut rb = match verb {
            Verb::Get => Request::get(&url),
            Verb::Post => Request::post(&url),
            Verb::Put => Request::put(&url),
            Verb::Delete => Request::delete(&url),
        }
        .header("authorization", &format!("Bearer {}", self.token.borrow()));
        if !trace.is_empty() {
            rb = rb.header("traceparent", trace);
        }
        Ok(rb)
    }

    /// One request and its whole answer, within the timeout (plus `wait_ms` for a long poll).
    async fn send_once(
        &self,
        verb: Verb,
        path: &str,
        body: Option<&[u8]>,
        trace: &str,
        wait_ms: u64,
    ) -> Result<Answer> {
        let limit = match self.timeout_ms.get() {
            0 => 0,
            ms => ms + wait_ms,
        };
        let deadline = crate::cancel::Deadline::new(limit);
        let rb = self
            .builder(verb, path, trace)?
            .abort_signal(deadline.signal().as_ref());
        let req = match body {
            Some(b) => rb
                .header("content-type", "application/json")
                .body(js_sys::Uint8Array::from(b)),
            None => rb.build(),
        }
        .map_err(|e| Error::Protocol(e.to_string()))?;
        let failed = |e: gloo_net::Error| {
            if deadline.timed_out() {
                timed_out(path, limit)
            } else {
                Error::Unreachable(e.to_string())
            }
        };
        let resp = req.send().await.map_err(failed)?;
        let retry_after = resp.headers().get("retry-after");
        let body = resp.binary().await.map_err(failed)?;
        Ok(Answer::new(resp.status(), retry_after.as_deref(), body))
    }
}

impl Transport for Fetch {
    fn is_online(&self) -> bool {
        Fetch::is_online(self)
    }

    /// One request, and once more with a renewed token after a 401 (with a token source; a
    /// token about to expire is renewed first).
    async fn send(
        &self,
        verb: Verb,
        path: &str,
        body: Option<Vec<u8>>,
        trace: &str,
        wait_ms: u64,
    ) -> Result<Answer> {
        let body = body.as_deref();
        self.renew_if_expiring().await;
        let a = self.send_once(verb, path, body, trace, wait_ms).await?;
        if a.status == 401 && self.renew_token().await {
            return self.send_once(verb, path, body, trace, wait_ms).await;
        }
        Ok(a)
    }
}
