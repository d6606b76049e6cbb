//! Shared by the client subcommands (`enqueue`, `stats`): server URL and token options.

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
