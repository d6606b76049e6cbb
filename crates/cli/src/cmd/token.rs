//! `ternflow token mint`: a short-lived signed token for a role and a tenant (what a web app's
//! backend does for each visitor; see docs/security.md for the Node and Rust recipes).

use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ternflow_server::identity::check_claims;
use ternflow_server::jwt::{mint_hs256, Claims};

use super::CmdResult;

/// Arguments of `ternflow token`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub action: Action,
}

/// `ternflow token` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Print a signed token (HS256) on stdout.
    Mint(MintArgs),
}

/// Arguments of `ternflow token mint`.
#[derive(Debug, clap::Args)]
pub struct MintArgs {
    /// Key id, as in the server's `TERNFLOW_JWT_KEYS` (`kid:hs256:<base64 secret>`).
    #[arg(long)]
    pub kid: String,
    /// The base64 secret of that key (or set `TERNFLOW_JWT_SECRET`).
    #[arg(long, env = "TERNFLOW_JWT_SECRET", hide_env_values = true)]
    pub secret: String,
    /// `worker`, `producer` or `admin`.
    #[arg(long)]
    pub role: String,
    /// Tenant: 1–64 characters of `[a-z0-9_-]`, not `default` (the static tokens' own).
    #[arg(long)]
    pub tenant: String,
    /// Lifetime in seconds (the server refuses more than its `--max-token-lifetime-secs`).
    #[arg(long, default_value_t = 600)]
    pub ttl_secs: u64,
    /// Who it is for (kept in the token as `sub`, for your logs).
    #[arg(long)]
    pub sub: Option<String>,
    /// At most this many claims a minute with this token (1..=60000).
    #[arg(long)]
    pub claims_per_min: Option<u32>,
}

/// Runs `ternflow token`.
pub fn run(args: Args) -> CmdResult {
    match args.action {
        Action::Mint(m) => {
            // The same checks the server makes when it verifies the token.
            check_claims(&m.role, &m.tenant, m.claims_per_min, m.sub.as_deref())
                .map_err(|e| format!("token mint: {e}"))?;
            let secret = STANDARD
                .decode(m.secret.trim())
                .map_err(|e| format!("--secret is not base64: {e}"))?;
            if secret.len() < 32 {
                return Err("--secret must decode to at least 32 bytes".into());
            }
            let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
            let claims = Claims {
                role: m.role,
                tenant: m.tenant,
                exp: now + m.ttl_secs,
                nbf: None,
                iat: Some(now),
                sub: m.sub,
                claims_per_min: m.claims_per_min,
            };
            println!("{}", mint_hs256(&m.kid, &secret, &claims)?);
            Ok(())
        }
    }
}
