//! Bearer tokens with roles.
//!
//! Tokens come from a file (one `token:role` per line, `#` comments) or from
//! `TERNFLOW_TOKENS="tok1:producer,tok2:worker,tok3:admin"`. Roles: `producer` enqueues and reads
//! job status; `worker` claims, heartbeats, acks, nacks, reads status, uses the cache, locks,
//! embed and events and pushes metrics; `admin` may do everything (DLQ, redrive, stats, metrics).
//! `GET /v1/events` also accepts `?token=` because `EventSource` cannot send headers.

use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use percent_encoding::percent_decode_str;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::clock::Clock;
use crate::error::Error;
use crate::identity::{static_writer_id, writer_id, Identity, DEFAULT_TENANT};
use crate::jwt::Keys;
use crate::limits::Limits;

pub use crate::identity::Role;

/// The token table. Tokens are kept as SHA-256 digests and looked up in constant time: every
/// entry is compared (with `subtle`), so the time a lookup takes tells nothing about how much of
/// a guessed token was right.
#[derive(Clone, Default)]
pub struct Tokens(Vec<([u8; 32], Role)>);

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

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
        let d = digest(&token.into());
        self.0.retain(|(t, _)| *t != d);
        self.0.push((d, role));
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
            let role = Role::parse(role.trim()).ok_or_else(|| format!("unknown role {role:?}"))?;
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
        self.lookup(token).map(|(role, _)| role)
    }

    /// The role of `token` and its digest (the key of its rate limit).
    pub(crate) fn lookup(&self, token: &str) -> Option<(Role, [u8; 32])> {
        let d = digest(token);
        let mut found = None;
        for (t, role) in &self.0 {
            if bool::from(t.ct_eq(&d)) {
                found = Some(*role);
            }
        }
        found.map(|r| (r, d))
    }
}

/// A route group's requirement: any of `roles` (admin always passes).
#[derive(Debug, Clone)]
pub struct Gate {
    pub(crate) tokens: Arc<Tokens>,
    pub(crate) keys: Arc<Keys>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) limits: Arc<Limits>,
    pub(crate) roles: &'static [Role],
    pub(crate) allow_query_token: bool,
}

/// `?token=` (percent-decoded: `EventSource` URLs carry it encoded, so a token holding `/`, `+`
/// or `=` arrives as `%2F`, `%2B`, `%3D`).
fn query_token(query: Option<&str>) -> Option<String> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        if k != "token" {
            return None;
        }
        percent_decode_str(v)
            .decode_utf8()
            .ok()
            .map(|t| t.into_owned())
    })
}

/// The token of an `Authorization: Bearer <token>` header; the scheme is case-insensitive
/// (RFC 9110 §11.1).
fn bearer(value: &str) -> Option<String> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_owned())
}

/// Middleware: 401 without a known token, 403 when its role is not allowed, 429 when the token
/// is over its rate. Puts the caller's [`Identity`] on the request for the handlers.
pub async fn gate(State(g): State<Gate>, mut req: Request, next: Next) -> Result<Response, Error> {
    let header_token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    let token = match header_token {
        Some(t) => Some(t),
        None if g.allow_query_token => query_token(req.uri().query()),
        None => None,
    };
    let token = token.ok_or(Error::Unauthorized)?;
    let (role, key, tenant, claims_per_min, sub) =
        if token.matches('.').count() == 2 && !g.keys.is_empty() {
            // A signed token: its role and tenant are its claims.
            let v = g
                .keys
                .verify(&token, g.clock.now_ms() / 1_000)
                .map_err(|e| Error::BadToken(e.to_string()))?;
            let key = digest(&token);
            let sub = writer_id(v.sub.as_deref(), &key);
            (
                v.role,
                key,
                Arc::from(v.tenant.as_str()),
                v.claims_per_min,
                sub,
            )
        } else {
            let (role, key) = g.tokens.lookup(&token).ok_or(Error::Unauthorized)?;
            let sub = static_writer_id(&key);
            (role, key, Arc::from(DEFAULT_TENANT), None, sub)
        };
    if role != Role::Admin && !g.roles.contains(&role) {
        return Err(Error::Forbidden(format!(
            "this route needs the {} role",
            g.roles.first().map_or("admin", |r| r.as_str())
        )));
    }
    let caller = Identity {
        key,
        tenant,
        claims_per_min,
        role,
        sub: Arc::from(sub.as_str()),
    };
    g.limits.check_rate(&caller)?;
    req.extensions_mut().insert(caller);
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
        assert_eq!(
            query_token(Some("token=a%2Fb%2Bc%3D%3D")),
            Some("a/b+c==".to_owned()),
            "percent-decoded"
        );
    }

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer("Bearer abc"), Some("abc".to_owned()));
        assert_eq!(bearer("bearer abc"), Some("abc".to_owned()));
        assert_eq!(bearer("BEARER  abc "), Some("abc".to_owned()));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer"), None);
    }

    #[test]
    fn lookup_checks_the_whole_token() {
        let mut t = Tokens::new();
        t.insert("secret-1", Role::Worker);
        t.insert("secret-2", Role::Admin);
        assert_eq!(t.role("secret-2"), Some(Role::Admin));
        assert_eq!(t.role("secret-"), None);
        assert_eq!(t.role("secret-10"), None);
        t.insert("secret-1", Role::Producer);
        assert_eq!(
            (t.len(), t.role("secret-1")),
            (2, Some(Role::Producer)),
            "re-insert replaces"
        );
    }
}
