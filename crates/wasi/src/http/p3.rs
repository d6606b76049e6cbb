//! WASI 0.3: requests through `wasi:http/client`. `send` is an async import of the component
//! model, so a request in flight is a subtask the instance waits on in the host (wit-bindgen's
//! executor, `waitable-set.wait`), and the request and response bodies are `stream<u8>`s.

use futures_util::future::join;
use ternflow_core::server_client::{timed_out, Answer, Verb};
use ternflow_core::{Error, Result};
use wasip3::http::types::{ErrorCode, Fields, Method, Request, RequestOptions, Response, Scheme};
use wasip3::{wit_future, wit_stream};

use super::{WasiHttp, CONNECT_TIMEOUT_MS};

fn is_timeout(e: &ErrorCode) -> bool {
    matches!(
        e,
        ErrorCode::ConnectionTimeout
            | ErrorCode::ConnectionReadTimeout
            | ErrorCode::ConnectionWriteTimeout
            | ErrorCode::HttpResponseTimeout
    )
}

/// `http://host:port/path?query` as (scheme, authority, path with query).
fn split_url(url: &str) -> Result<(Scheme, String, String)> {
    let (scheme, rest) = if let Some(r) = url.strip_prefix("http://") {
        (Scheme::Http, r)
    } else if let Some(r) = url.strip_prefix("https://") {
        (Scheme::Https, r)
    } else {
        return Err(Error::Protocol(format!("{url}: not an http(s) URL")));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    Ok((scheme, authority.to_owned(), path.to_owned()))
}

fn ms_to_ns(ms: u64) -> u64 {
    ms.saturating_mul(1_000_000)
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
            Verb::Get => Method::Get,
            Verb::Post => Method::Post,
            Verb::Put => Method::Put,
            Verb::Delete => Method::Delete,
        };
        let body = body.unwrap_or_default();
        let (scheme, authority, path) = split_url(url)?;
        let bad = |what: &str| Error::Protocol(format!("{url}: {what}"));
        let headers = Fields::new();
        let add = |name: &str, value: &str| {
            headers
                .append(name, value.as_bytes())
                .map_err(|e| bad(&format!("header {name}: {e:?}")))
        };
        add("authorization", &format!("Bearer {}", self.token))?;
        // A known length, so the host does not send the body chunked.
        add("content-length", &body.len().to_string())?;
        if !body.is_empty() {
            add("content-type", "application/json")?;
        }
        if !trace.is_empty() {
            add("traceparent", trace)?;
        }
        let limit = self.timeout_ms + wait_ms;
        let options = RequestOptions::new();
        let _ = options.set_connect_timeout(Some(ms_to_ns(CONNECT_TIMEOUT_MS)));
        if self.timeout_ms > 0 {
            let _ = options.set_first_byte_timeout(Some(ms_to_ns(limit)));
            let _ = options.set_between_bytes_timeout(Some(ms_to_ns(self.timeout_ms)));
        }
        // The body as a stream written beside the send (the host reads it while sending); no
        // body: no stream at all. Trailers: none (the writer dropped resolves them to `None`).
        let (mut body_tx, body_rx) = wit_stream::new();
        let (trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
        let contents = (!body.is_empty()).then_some(body_rx);
        let (req, _sent) = Request::new(headers, contents, trailers_rx, Some(options));
        req.set_method(&method).map_err(|()| bad("method"))?;
        req.set_scheme(Some(&scheme)).map_err(|()| bad("scheme"))?;
        req.set_authority(Some(&authority))
            .map_err(|()| bad("authority"))?;
        req.set_path_with_query(Some(&path))
            .map_err(|()| bad("path"))?;
        let transport = |e: ErrorCode| {
            if is_timeout(&e) {
                timed_out(url, limit)
            } else {
                Error::Unreachable(format!("{url}: {e:?}"))
            }
        };
        let write = async move {
            if !body.is_empty() {
                // What is left unwritten (the host stopped reading: the send fails and says why).
                let _ = body_tx.write_all(body).await;
            }
            drop(body_tx);
            drop(trailers_tx);
        };
        let (resp, ()) = join(wasip3::http::client::send(req), write).await;
        let resp = resp.map_err(transport)?;
        let status = resp.get_status_code();
        let retry_after = resp
            .get_headers()
            .get("retry-after")
            .into_iter()
            .next()
            .and_then(|v| String::from_utf8(v).ok());
        let (done_tx, done_rx) = wit_future::new(|| Ok(()));
        let (contents, trailers) = Response::consume_body(resp, done_rx);
        drop(done_tx);
        let body = contents.collect().await;
        // The body's end: an error here is a connection that broke mid-body.
        if let Err(e) = trailers.await {
            return Err(transport(e));
        }
        Ok(Answer::new(status, retry_after.as_deref(), body))
    }
}
