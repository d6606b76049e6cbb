//! Bearer tokens with roles.
//!
//! Tokens come from a file (one `token:role` per line, `#` comments) or from
//! `TERNFLOW_TOKENS="tok1:producer,tok2:worker,tok3:admin"`. Roles: `producer` enqueues and reads
//! job status; `worker` claims, heartbeats, acks, nacks, reads status, uses the cache, locks,
//! embed and events and pushes metrics; `admin` may do everything (DLQ, redrive, stats, metrics).
//! `GET /v1/events` also accepts `?token=` because `EventSource` cannot send headers.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;

use crate::error::Error;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Enqueues jobs.
    Producer,
    /// Processes jobs.
    Worker,
    /// Operates the server; passes every role check.
    Admin,
}

impl Role {
    /// The role's name in token files.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Producer => "producer",
            Role::Worker => "worker",
            Role::Admin => "admin",
        }
    }

    fn parse(s: &str) -> Option<Role> {
        match s.trim() {
            "producer" => Some(Role::Producer),
            "worker" => Some(Role::Worker),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

/// The token table.
#[derive(Clone, Default)]
pub struct Tokens(HashMap<String, Role>);

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the tokens themselves.
        write!(f, "Tokens({} entries)", self.0.len())
    }
}

impl Tokens {
    /// An empty table (every request is refused with 401).
    pub fn new() -> Self {
        Tokens::default()
    }

    /// Adds one token.
    pub fn insert(&mut self, token: impl Into<String>, role: Role) {
        self.0.insert(token.into(), role);
    }

    /// Parses `tok:role` entries separated by commas or newlines; `#` starts a comment.
    ///
    /// # Errors
    /// A message naming the first malformed entry.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut t = Tokens::new();
        for entry in spec.split([',', '\n']) {
            let entry = entry.split('#').next().unwrap_or("").trim();
            if entry.is_empty() {
                continue;
            }
            let (tok, role) = entry
                .rsplit_once(':')
                .ok_or_else(|| format!("token entry without `:role`: {entry:?}"))?;
            let role = Role::parse(role).ok_or_else(|| format!("unknown role {role:?}"))?;
            if tok.trim().is_empty() {
                return Err("empty token".to_owned());
            }
            t.insert(tok.trim(), role);
        }
        Ok(t)
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The role of `token`.
    pub fn role(&self, token: &str) -> Option<Role> {
        self.0.get(token).copied()
    }
}

/// A route group's requirement: any of `roles` (admin always passes).
#[derive(Debug, Clone)]
pub struct Gate {
    pub(crate) tokens: Arc<Tokens>,
    pub(crate) roles: &'static [Role],
    pub(crate) allow_query_token: bool,
}

fn query_token(query: Option<&str>) -> Option<String> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == "token").then(|| v.to_owned())
    })
}

/// Middleware: 401 without a known token, 403 when its role is not allowed.
pub async fn gate(State(g): State<Gate>, req: Request, next: Next) -> Result<Response, Error> {
    let header_token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").map(|t| t.trim().to_owned()));
    let token = match header_token {
        Some(t) => Some(t),
        None if g.allow_query_token => query_token(req.uri().query()),
        None => None,
    };
    let role = token
        .as_deref()
        .and_then(|t| g.tokens.role(t))
        .ok_or(Error::Unauthorized)?;
    if role != Role::Admin && !g.roles.contains(&role) {
        return Err(Error::Forbidden(
            g.roles.first().map_or("admin", |r| r.as_str()),
        ));
    }
    Ok(next.run(req).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_env_and_file_forms() {
        let t = Tokens::parse("a:producer, b:worker,c:admin").unwrap();
        assert_eq!(t.role("a"), Some(Role::Producer));
        assert_eq!(t.role("b"), Some(Role::Worker));
        assert_eq!(t.role("c"), Some(Role::Admin));
        let f = Tokens::parse("# tokens\nx:worker # ci\n\n").unwrap();
        assert_eq!(f.len(), 1);
        assert!(Tokens::parse("nope").is_err());
        assert!(Tokens::parse("a:root").is_err());
    }

    #[test]
    fn query_token_parsing() {
        assert_eq!(query_token(Some("a=1&token=xyz")), Some("xyz".to_owned()));
        assert_eq!(query_token(Some("tokens=1")), None);
        assert_eq!(query_token(None), None);
    }
}
