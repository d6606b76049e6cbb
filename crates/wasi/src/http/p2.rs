//! WASI 0.2: requests through wstd's client over `wasi:http/outgoing-handler`. Every request is
//! awaited on its `wasi:io/poll` pollable: the component yields to the host while it waits, and an
//! idle worker blocks in `poll` without spinning.

use ternflow_core::server_client::{timed_out, Answer, Verb};
use ternflow_core::{Error, Result};
use wstd::http::body::util::Empty;
use wstd::http::body::Bytes;
use wstd::http::error::ErrorCode;
use wstd::http::{Body, Client, Method, Request};
use wstd::time::Duration;

use super::{WasiHttp, CONNECT_TIMEOUT_MS};

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
    /// Sends one request to `url` (absolute) and reads the whole answer; `wait_ms` is how long
    /// the server may hold it (a long poll).
    pub(super) async fn send_url(
        &self,
        verb: Verb,
        url: &str,
        body: Option<Vec<u8>>,
        trace: &str,
        wait_ms: u64,
    ) -> Result<Answer> {
        let method = match verb {
            Verb::Get => Method::GET,
            Verb::Post => Method::POST,
            Verb::Put => Method::PUT,
            Verb::Delete => Method::DELETE,
        };
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
}
