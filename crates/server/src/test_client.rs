//! A typed client of a running server, for tests (feature `testing`): core's own
//! [`ServerClient`] — the protocol as the browser and WASI workers speak it — over a reqwest
//! [`Transport`]. A test then claims, heartbeats, acks and nacks through the same code a worker
//! runs, instead of building JSON by hand.

use std::time::Duration;

use ternflow_core::server_client::{Answer, ServerClient, Transport, Verb};
use ternflow_core::{Error, Result};

/// reqwest under core's [`Transport`], with a bearer token.
#[derive(Debug, Clone)]
pub struct Reqwest {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Reqwest {
    /// Requests to `base` (e.g. `http://127.0.0.1:8787`) with `token`.
    pub fn new(base: &str, token: &str) -> Self {
        Reqwest {
            http: reqwest::Client::new(),
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
        }
    }
}

impl Transport for Reqwest {
    fn is_online(&self) -> bool {
        true
    }

    async fn send(
        &self,
        verb: Verb,
        path: &str,
        body: Option<Vec<u8>>,
        trace: &str,
        wait_ms: u64,
    ) -> Result<Answer> {
        let url = format!("{}{path}", self.base);
        let mut req = match verb {
            Verb::Get => self.http.get(url),
            Verb::Post => self.http.post(url),
            Verb::Put => self.http.put(url),
            Verb::Delete => self.http.delete(url),
        }
        .bearer_auth(&self.token)
        .timeout(Duration::from_millis(10_000 + wait_ms));
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(body);
        }
        if !trace.is_empty() {
            req = req.header("traceparent", trace);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| Error::Unreachable(e.to_string()))?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = resp
            .bytes()
            .await
            .map_err(|e| Error::Unreachable(e.to_string()))?;
        Ok(Answer::new(status, retry_after.as_deref(), body.to_vec()))
    }
}

/// A worker named `worker` on the server at `base`, with `token`.
pub fn worker_client(base: &str, token: &str, worker: &str) -> ServerClient<Reqwest> {
    ServerClient::new(Reqwest::new(base, token), worker)
}
