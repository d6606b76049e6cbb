//! Shared by the client subcommands (`enqueue`, `stats`, `results`, `dlq`, `quarantine`,
//! `locks`): server URL and token options, and the checked request they all make.

/// `--server` and `--token`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArgs {
    /// Server base URL.
    #[arg(long, env = "TERNFLOW_SERVER", default_value = "http://127.0.0.1:8787")]
    pub server: String,
    /// Bearer token.
    #[arg(long, env = "TERNFLOW_TOKEN")]
    pub token: String,
}

impl ServerArgs {
    /// `base + path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.trim_end_matches('/'))
    }
}

/// Turns a non-2xx response into an error carrying the server's error body.
pub async fn check(
    resp: reqwest::Response,
) -> Result<reqwest::Response, Box<dyn std::error::Error>> {
    if resp.status().is_success() {
        return Ok(resp);
    }
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    Err(format!("server answered {status}: {body}").into())
}

impl ServerArgs {
    /// `METHOD base+path` with the bearer token (no body), its answer checked by [`check`].
    pub async fn call(
        &self,
        http: &reqwest::Client,
        method: reqwest::Method,
        path: &str,
    ) -> Result<reqwest::Response, Box<dyn std::error::Error>> {
        let resp = http
            .request(method, self.url(path))
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| format!("{}: {e}", self.url(path)))?;
        check(resp).await
    }

    /// `GET base+path`, its JSON answer.
    pub async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        http: &reqwest::Client,
        path: &str,
    ) -> Result<T, Box<dyn std::error::Error>> {
        Ok(self
            .call(http, reqwest::Method::GET, path)
            .await?
            .json()
            .await?)
    }
}
