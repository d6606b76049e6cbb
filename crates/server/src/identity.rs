//! Who is calling: the [`Identity`] a request carries once the auth gate has read its token —
//! tenant, [`Role`], writer identity (`sub`) and the token's own limits — and the rules a
//! token's claims must meet to become one.
//!
//! A leaf: it knows no store, no state and no route. It is parsed once per request (by
//! `auth::gate`), exactly: an enumerated claim either is one of its values, byte for byte, or
//! the token is refused. Every client-chosen string that reaches a log or a page (a `sub`, a
//! worker name) passes [`is_clean`] first.

use std::sync::Arc;

/// The tenant of static tokens (and of the store the server starts with). A signed token may
/// not name it: the operator's tenant is reached only with the operator's own tokens.
pub const DEFAULT_TENANT: &str = "default";

/// Highest `claims_per_min` a signed token may carry (1 000 claims a second). A higher value
/// is not a limit, and is refused like a zero.
pub const MAX_CLAIMS_PER_MIN: u32 = 60_000;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Enqueues jobs.
    Producer,
    /// Processes jobs.
    Worker,
    /// Operates the server (or, with a signed token, its tenant); passes every role check.
    Admin,
}

impl Role {
    /// The role's name in token files and claims.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Producer => "producer",
            Role::Worker => "worker",
            Role::Admin => "admin",
        }
    }

    /// The role named exactly `s` (no trimming, no case folding: `"admin "` is no role).
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "producer" => Some(Role::Producer),
            "worker" => Some(Role::Worker),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

/// The caller of a request (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct Identity {
    /// SHA-256 of the token: the key of its rate limits.
    pub key: [u8; 32],
    /// The tenant whose data the request may touch.
    pub tenant: Arc<str>,
    /// The token's role.
    pub role: Role,
    /// Who writes with this token ([`writer_id`], [`static_writer_id`]).
    pub sub: Arc<str>,
    /// A signed token's own claim limit, per minute.
    pub claims_per_min: Option<u32>,
}

impl Identity {
    /// Whether this caller operates the whole server: an admin of the `default` tenant, which
    /// only static tokens reach. A signed admin token administers its own tenant only.
    pub fn is_operator(&self) -> bool {
        self.role == Role::Admin && &*self.tenant == DEFAULT_TENANT
    }
}

/// A signed token's claims, checked: the role exact, the tenant valid and not [`DEFAULT_TENANT`],
/// `claims_per_min` within `1..=`[`MAX_CLAIMS_PER_MIN`], the `sub` (when given) a clean
/// identity. Used when a token is verified and when one is minted.
///
/// # Errors
/// What is wrong, in words fit for the 401 body.
pub fn check_claims(
    role: &str,
    tenant: &str,
    claims_per_min: Option<u32>,
    sub: Option<&str>,
) -> Result<Role, String> {
    let role = Role::parse(role)
        .ok_or_else(|| format!("role must be exactly worker, producer or admin, not {role:?}"))?;
    if !is_valid_tenant(tenant) {
        return Err("tenant must be 1–64 characters of [a-z0-9_-]".into());
    }
    if tenant == DEFAULT_TENANT {
        return Err(format!(
            "tenant {DEFAULT_TENANT:?} is reserved for the server's static tokens"
        ));
    }
    if let Some(n) = claims_per_min {
        if !(1..=MAX_CLAIMS_PER_MIN).contains(&n) {
            return Err(format!(
                "claims_per_min must be within 1..={MAX_CLAIMS_PER_MIN} (omit it for the server's limits), not {n}"
            ));
        }
    }
    if let Some(s) = sub {
        if !is_clean(s, 128) {
            return Err("sub must be 1–128 characters of [A-Za-z0-9._:@-]".into());
        }
        if is_reserved_sub(s) {
            return Err(format!(
                "sub {s:?} is reserved: {SERVER_WRITER:?} and the static:… and tok:… forms name \
                 the server and tokens of other kinds"
            ));
        }
    }
    Ok(role)
}

/// The writer identity of what the server computes itself (a job a worker failed that the
/// server embedded): no token's `sub` may take it.
pub const SERVER_WRITER: &str = "server";

/// Whether a signed token's `sub` would take an identity that is not its to take: the
/// server's own, or the forms the server gives static tokens (`static:…`) and signed tokens
/// without a `sub` (`tok:…`). Identities carry standing and quarantine (`crate::integrity`): a
/// visitor's token named `static:<digest>` would share an operator's worker's.
pub fn is_reserved_sub(s: &str) -> bool {
    s == SERVER_WRITER || s.starts_with("static:") || s.starts_with("tok:")
}

/// Whether `t` is a valid tenant name: 1–64 bytes of `[a-z0-9_-]`.
pub fn is_valid_tenant(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 64
        && t.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// A signed token's writer identity: its `sub` when that is 1–128 characters of
/// `[A-Za-z0-9._:@-]`, else `tok:` and 16 hex digits of the token's digest.
pub fn writer_id(sub: Option<&str>, digest: &[u8; 32]) -> String {
    match sub {
        Some(s) if is_clean(s, 128) => s.to_owned(),
        _ => format!("tok:{}", hex8(digest)),
    }
}

/// A static token's writer identity: `static:` and 16 hex digits of its digest.
pub fn static_writer_id(digest: &[u8; 32]) -> String {
    format!("static:{}", hex8(digest))
}

fn hex8(d: &[u8; 32]) -> String {
    hex::encode(&d[..8])
}

/// Whether `s` is 1–`max` characters of `[A-Za-z0-9._:@-]`: no space, no control character,
/// nothing a log line or a page could be forged with.
pub fn is_clean(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'@' | b'-'))
}

/// Whether `s` can be a writer identity ([`writer_id`], [`static_writer_id`]): 1–128
/// characters of `[A-Za-z0-9._:@-]` (what an admin names in `DELETE /v1/quarantine/{sub}`).
pub fn is_writer_id(s: &str) -> bool {
    is_clean(s, 128)
}

/// A worker name fit to record: 1–128 characters of `[A-Za-z0-9._:@-]`; anything else is
/// dropped (a name is self-reported: it must not carry newlines or escapes into logs).
pub fn worker_name(name: Option<&str>) -> Option<String> {
    name.filter(|n| is_clean(n, 128)).map(str::to_owned)
}

/// `s` fit for one log line: control characters (newlines, ANSI escapes) written as `\u{…}`
/// escapes, at most `max` characters. For client-chosen strings that are logged but not
/// validated (error messages, trace ids).
pub fn loggable(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max));
    for c in s.chars().take(max) {
        if c.is_control() {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_match_exactly() {
        assert_eq!(Role::parse("admin"), Some(Role::Admin));
        for bad in [
            "admin ", " admin", "Admin", "ADMIN", "admin\n", "admin\0", "",
        ] {
            assert_eq!(Role::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn claims_are_checked_exactly() {
        assert_eq!(
            check_claims("worker", "acme", Some(10), Some("v-1")),
            Ok(Role::Worker)
        );
        assert!(check_claims("admin ", "acme", None, None).is_err());
        assert!(check_claims("admin", "default", None, None).is_err());
        assert!(check_claims("worker", "Acme", None, None).is_err());
        assert!(check_claims("worker", "acme", Some(0), None).is_err());
        assert!(check_claims("worker", "acme", Some(MAX_CLAIMS_PER_MIN + 1), None).is_err());
        assert!(check_claims("worker", "acme", Some(MAX_CLAIMS_PER_MIN), None).is_ok());
        assert!(check_claims("worker", "acme", None, Some("a\nb")).is_err());
    }

    /// A visitor's `sub` cannot take the server's identity or the forms given to static tokens
    /// and to signed tokens without a `sub`: it would share their standing and quarantine.
    #[test]
    fn reserved_subs_are_refused() {
        let d = [0xabu8; 32];
        for sub in [
            SERVER_WRITER.to_owned(),
            static_writer_id(&d),
            writer_id(None, &d),
            "static:".to_owned(),
            "tok:x".to_owned(),
        ] {
            let e = check_claims("worker", "acme", None, Some(&sub)).unwrap_err();
            assert!(e.contains("reserved"), "{sub}: {e}");
        }
        for sub in ["servers", "my-server", "stat:x", "token:1", "v:tok:1"] {
            assert_eq!(
                check_claims("worker", "acme", None, Some(sub)),
                Ok(Role::Worker),
                "{sub}"
            );
        }
    }

    #[test]
    fn identities() {
        let d = [0xabu8; 32];
        assert_eq!(writer_id(Some("visitor-1@app"), &d), "visitor-1@app");
        assert_eq!(writer_id(Some("bad\nsub"), &d), "tok:abababababababab");
        assert_eq!(writer_id(None, &d), "tok:abababababababab");
        assert_eq!(static_writer_id(&d), "static:abababababababab");
        assert_eq!(worker_name(Some("w1")), Some("w1".to_owned()));
        assert_eq!(worker_name(Some("w\u{1b}[31m")), None);
        assert_eq!(worker_name(Some("")), None);
    }

    #[test]
    fn loggable_escapes_control_characters() {
        assert_eq!(loggable("a\nb\u{1b}[31m", 64), "a\\u{a}b\\u{1b}[31m");
        assert_eq!(loggable("abcdef", 3), "abc");
    }
}
