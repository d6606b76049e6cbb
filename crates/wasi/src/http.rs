//! The transport of the server's protocol over `wasi:http`, one adapter per WASI version: `p2`
//! (wstd's client over `outgoing-handler`, WASI 0.2) or `p3` (the async `client.send` of WASI 0.3),
//! each only sending one request and reading its answer; the rest (the server's base URL and
//! token, the model download, what each answer means — 409s, offline mode, per-item batch results,
//! which is `ternflow_core::server_client`'s) is shared here.
//!
//! A transport failure is [`Error::Unreachable`]; no answer within the request timeout (plus a
//! claim's long-poll wait) is [`Error::Http`] 408 `timeout`.

use ternflow_core::server_client::{Answer, ServerClient, Transport, Verb};
use ternflow_core::{Error, Result};

#[cfg(feature = "p2")]
mod p2;
#[cfg(feature = "p3")]
mod p3;

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

impl WasiHttp {
    /// Requests to the server at `base` (or none), each limited to `timeout_ms` (`0`: none).
    pub fn new(base: Option<&str>, token: &str, timeout_ms: u64) -> Self {
        WasiHttp {
            base: base.map(|b| b.trim_end_matches('/').to_owned()),
            token: token.to_owned(),
            timeout_ms,
        }
    }

    /// Downloads a file (the model): `GET url`, the whole body.
    ///
    /// # Errors
    /// [`Error::Unreachable`], or [`Error::Http`] for a non-2xx answer.
    pub async fn download(&self, url: &str) -> Result<Vec<u8>> {
        let a = self.send_url(Verb::Get, url, None, "", 0).await?;
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
        self.send_url(verb, &format!("{base}{path}"), body, trace, wait_ms)
            .await
    }
}
