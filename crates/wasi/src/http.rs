//! The transport of the server's protocol over `wasi:http/outgoing-handler` (through wstd's
//! client). Every request is awaited on its `wasi:io/poll` pollable: the component yields to the
//! host while it waits, and an idle worker blocks in `poll` without spinning. What each answer
//! means (409s, offline mode, per-item batch results) is `ternflow_core::server_client`'s.
//!
//! A transport failure is [`Error::Unreachable`]; no answer within the request timeout (plus a
//! claim's long-poll wait) is [`Error::Http`] 408 `timeout`.

use ternflow_core::server_client::{timed_out, Answer, ServerClient, Transport, Verb};
use ternflow_core::{Error, Result};
use wstd::http::body::util::Empty;
use wstd::http::body::Bytes;
use wstd::http::error::ErrorCode;
use wstd::http::{Body, Client, Method, Request};
use wstd::time::Duration;

/// How long a connection may take to open, ms.
const CONNECT_TIMEOUT_MS: u64 = 5_000;

/// The worker's client of the server: the protocol over [`WasiHttp`].
pub type HttpClient = ServerClient<WasiHttp>;

/// Requests to one ternflow server (or none) over `wasi:http`, with the bearer token.
#[derive(Debug)]
pub struct WasiHttp {
    base: Option<String>,
    token: String,
    timeout_ms: u64,
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

impl WasiHttp {
    /// Requests to the server at `base` (or none), each limited to `timeout_ms` (`0`: none).
    pub fn new(base: Option<&str>, token: &str, timeout_ms: u64) -> Self {
        WasiHttp {
            base: base.map(|b| b.trim_end_matches('/').to_owned()),
            token: token.to_owned(),
            timeout_ms,
        }
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
            .header("authorization", format!("Bearer {}", self.token))
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
        let limit = self.timeout_ms + wait_ms;
        let mut client = Client::new();
        client.set_connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS));
        if self.timeout_ms > 0 {
            client.set_first_byte_timeout(Duration::from_millis(limit));
            client.set_between_bytes_timeout(Duration::from_millis(self.timeout_ms));
        }
        let transport = |e: wstd::http::Error| {
            if is_timeout(&e) {
                timed_out(url, limit)
            } else {
                Error::Unreachable(format!("{url}: {e:#}"))
            }
        };
        let resp = client.send(req).await.map_err(transport)?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut body = resp.into_body();
        let body = body.contents().await.map_err(transport)?.to_vec();
        Ok(Answer::new(status, retry_after.as_deref(), body))
    }

    /// Downloads a file (the model): `GET url`, the whole body.
    ///
    /// # Errors
    /// [`Error::Unreachable`], or [`Error::Http`] for a non-2xx answer.
    pub async fn download(&self, url: &str) -> Result<Vec<u8>> {
        let a = self.send_url(Method::GET, url, None, "", 0).await?;
        a.check()?;
        Ok(a.body)
    }
}

impl Transport for WasiHttp {
    fn is_online(&self) -> bool {
        self.base.is_some()
    }

    async fn send(
        &self,
        verb: Verb,
        path: &str,
        body: Option<Vec<u8>>,
        trace: &str,
        wait_ms: u64,
    ) -> Result<Answer> {
        let Some(base) = &self.base else {
            return Err(Error::Unreachable("no server configured".into()));
        };
        let method = match verb {
            Verb::Get => Method::GET,
            Verb::Post => Method::POST,
            Verb::Put => Method::PUT,
            Verb::Delete => Method::DELETE,
        };
        self.send_url(method, &format!("{base}{path}"), body, trace, wait_ms)
            .await
    }
}
