//! Short-lived signed tokens (JWT, `jsonwebtoken`), minted by a web app's own backend for the
//! visitors' workers: a role, a tenant and an expiry in minutes, signed with one of the keys the
//! server knows (several at once, told apart by `kid`, so keys rotate without downtime).
//!
//! # Format
//! Header `{"alg": "HS256" | "EdDSA", "kid": "<key id>", "typ": "JWT"}`; claims
//! `{"role": "worker" | "producer" | "admin", "tenant": "<[a-z0-9_-]{1,64}>", "exp": <unix s>,
//! "nbf"?: <unix s>, "iat"?: <unix s>, "sub"?: "<[A-Za-z0-9._:@-]{1,128}>", "claims_per_min"?: <1..=60000>}`;
//! the claims are checked by [`crate::identity::check_claims`] (the role byte for byte, the
//! tenant not `default`). Refused (401): bad claims, an unknown `kid`,
//! an algorithm other than the key's, a bad signature, `alg: none`, a token past `exp` or before
//! `nbf` (by the server's clock, 5 s of leeway), or one whose `exp` lies more than
//! [`Keys::max_lifetime_s`] ahead (a leaked token must die soon).
//!
//! # Keys
//! `TERNFLOW_JWT_KEYS="kid1:hs256:<base64 secret>,kid2:ed25519:<base64 32-byte public key>"`
//! (or `--jwt-keys FILE`, one per line). HS256 secrets must be at least 32 bytes.

use std::collections::HashMap;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::identity::{check_claims, Role};

/// Clock skew accepted on `exp` and `nbf`, seconds.
const LEEWAY_S: u64 = 5;

/// The claims of a ternflow token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// `worker`, `producer` or `admin`.
    pub role: String,
    /// The tenant whose queue, cache, locks and events the token may touch.
    pub tenant: String,
    /// Expiry, Unix seconds.
    pub exp: u64,
    /// Not before, Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
    /// Issued at, Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<u64>,
    /// Who it was minted for: the writer identity of what the token's worker sends (results
    /// are verified and attributed per `sub`), 1–128 characters of `[A-Za-z0-9._:@-]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub: Option<String>,
    /// At most this many `POST /v1/jobs/claim` per minute with this token (429 beyond):
    /// `1..=`[`crate::identity::MAX_CLAIMS_PER_MIN`]; anything else is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims_per_min: Option<u32>,
}

pub use crate::identity::is_valid_tenant;

/// A verified token's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Role.
    pub role: Role,
    /// Tenant.
    pub tenant: String,
    /// Expiry, Unix seconds.
    pub exp: u64,
    /// The token's own claim limit, per minute.
    pub claims_per_min: Option<u32>,
    /// Its `sub`, when it names one.
    pub sub: Option<String>,
}

/// Why a token was refused (every one is a 401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// No `kid`, or one the server does not know.
    #[error("unknown signing key")]
    UnknownKey,
    /// Bad signature, wrong algorithm for the key, malformed token.
    #[error("invalid token: {0}")]
    Invalid(String),
    /// Past its expiry.
    #[error("token expired")]
    Expired,
    /// Before its `nbf`.
    #[error("token not valid yet")]
    NotYetValid,
    /// Expires too far ahead.
    #[error("token lifetime over the server's maximum of {0} s")]
    TooLong(u64),
    /// Claims the server does not accept (role, tenant).
    #[error("bad claims: {0}")]
    BadClaims(String),
}

struct Key {
    alg: Algorithm,
    decoding: DecodingKey,
}

/// The verification keys, by `kid`.
pub struct Keys {
    keys: HashMap<String, Key>,
    /// Longest accepted lifetime: `exp` at most this far after now, seconds.
    pub max_lifetime_s: u64,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut kids: Vec<&String> = self.keys.keys().collect();
        kids.sort();
        f.debug_struct("Keys")
            .field("kids", &kids)
            .field("max_lifetime_s", &self.max_lifetime_s)
            .finish()
    }
}

impl Default for Keys {
    fn default() -> Self {
        Keys {
            keys: HashMap::new(),
            max_lifetime_s: 3_600,
        }
    }
}

impl Keys {
    /// Parses `kid:alg:base64` entries separated by commas or newlines (`#` comments);
    /// `alg` is `hs256` (a secret of ≥ 32 bytes) or `ed25519` (a 32-byte public key).
    ///
    /// # Errors
    /// A message naming the first bad entry.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut k = Keys::default();
        for entry in spec.split([',', '\n']) {
            let entry = entry.split('#').next().unwrap_or("").trim();
            if entry.is_empty() {
                continue;
            }
            let mut parts = entry.splitn(3, ':');
            let (kid, alg, b64) = match (parts.next(), parts.next(), parts.next()) {
                (Some(a), Some(b), Some(c)) if !a.is_empty() => (a, b, c),
                _ => {
                    return Err(format!(
                        "key entry is not kid:alg:base64: {kid:?}",
                        kid = entry.split(':').next().unwrap_or("")
                    ))
                }
            };
            let raw = STANDARD
                .decode(b64.trim())
                .map_err(|e| format!("key {kid}: not base64: {e}"))?;
            let key = match alg.trim().to_ascii_lowercase().as_str() {
                "hs256" => {
                    if raw.len() < 32 {
                        return Err(format!(
                            "key {kid}: an HS256 secret needs at least 32 bytes"
                        ));
                    }
                    Key {
                        alg: Algorithm::HS256,
                        decoding: DecodingKey::from_secret(&raw)
                            .map_err(|e| format!("key {kid}: {e}"))?,
                    }
                }
                "ed25519" => {
                    if raw.len() != 32 {
                        return Err(format!("key {kid}: an Ed25519 public key is 32 bytes"));
                    }
                    Key {
                        alg: Algorithm::EdDSA,
                        decoding: DecodingKey::from_ed_der(&raw),
                    }
                }
                other => return Err(format!("key {kid}: unknown algorithm {other:?}")),
            };
            if k.keys.insert(kid.to_owned(), key).is_some() {
                return Err(format!("key {kid} appears twice"));
            }
        }
        Ok(k)
    }

    /// Whether no key is configured (signed tokens are then refused).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Verifies `token` at `now_s` (Unix seconds, the server's clock).
    ///
    /// # Errors
    /// [`TokenError`], each a 401.
    pub fn verify(&self, token: &str, now_s: u64) -> Result<Verified, TokenError> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| TokenError::Invalid(e.to_string()))?;
        let kid = header.kid.as_deref().ok_or(TokenError::UnknownKey)?;
        let key = self.keys.get(kid).ok_or(TokenError::UnknownKey)?;
        if header.alg != key.alg {
            return Err(TokenError::Invalid(format!(
                "key {kid} signs with {:?}, not {:?}",
                key.alg, header.alg
            )));
        }
        // Time is checked below against the server's (injected) clock.
        let mut v = Validation::new(key.alg);
        v.validate_exp = false;
        v.validate_nbf = false;
        v.validate_aud = false;
        v.required_spec_claims.clear();
        let data = jsonwebtoken::decode::<Claims>(token, &key.decoding, &v)
            .map_err(|e| TokenError::Invalid(e.to_string()))?;
        let c = data.claims;
        if c.exp + LEEWAY_S <= now_s {
            return Err(TokenError::Expired);
        }
        if c.nbf.is_some_and(|nbf| nbf > now_s + LEEWAY_S) {
            return Err(TokenError::NotYetValid);
        }
        if c.exp > now_s + self.max_lifetime_s + LEEWAY_S {
            return Err(TokenError::TooLong(self.max_lifetime_s));
        }
        let role = check_claims(&c.role, &c.tenant, c.claims_per_min, c.sub.as_deref())
            .map_err(TokenError::BadClaims)?;
        Ok(Verified {
            role,
            tenant: c.tenant,
            exp: c.exp,
            claims_per_min: c.claims_per_min,
            sub: c.sub,
        })
    }
}

/// Mints a token with an HS256 secret (what `ternflow token mint` and app backends do).
///
/// # Errors
/// When the secret is empty.
pub fn mint_hs256(kid: &str, secret: &[u8], claims: &Claims) -> Result<String, String> {
    let mut h = Header::new(Algorithm::HS256);
    h.kid = Some(kid.to_owned());
    let key = EncodingKey::from_secret(secret).map_err(|e| e.to_string())?;
    jsonwebtoken::encode(&h, claims, &key).map_err(|e| e.to_string())
}

/// Mints a token with an Ed25519 private key (PKCS#8 DER).
///
/// # Errors
/// When the key cannot sign.
pub fn mint_ed25519(kid: &str, pkcs8_der: &[u8], claims: &Claims) -> Result<String, String> {
    let mut h = Header::new(Algorithm::EdDSA);
    h.kid = Some(kid.to_owned());
    let key = EncodingKey::from_ed_der(pkcs8_der);
    jsonwebtoken::encode(&h, claims, &key).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn keys() -> Keys {
        Keys::parse(&format!(
            "k1:hs256:{}\nk2:hs256:{}",
            STANDARD.encode(SECRET),
            STANDARD.encode(b"another-secret-of-32-bytes-ok!!!")
        ))
        .unwrap()
    }

    fn claims(exp: u64) -> Claims {
        Claims {
            role: "worker".into(),
            tenant: "acme".into(),
            exp,
            nbf: None,
            iat: Some(1_000),
            sub: None,
            claims_per_min: None,
        }
    }

    #[test]
    fn a_good_token_verifies_and_every_bad_one_is_refused() {
        let k = keys();
        let now = 1_000;
        let t = mint_hs256("k1", SECRET, &claims(now + 600)).unwrap();
        assert_eq!(
            k.verify(&t, now).unwrap(),
            Verified {
                role: Role::Worker,
                tenant: "acme".into(),
                exp: now + 600,
                claims_per_min: None,
                sub: None,
            }
        );
        assert_eq!(k.verify(&t, now + 700), Err(TokenError::Expired));
        let early = Claims {
            nbf: Some(now + 100),
            ..claims(now + 600)
        };
        let t2 = mint_hs256("k1", SECRET, &early).unwrap();
        assert_eq!(k.verify(&t2, now), Err(TokenError::NotYetValid));
        let wrong = mint_hs256(
            "k1",
            b"a-different-secret-32-bytes-long",
            &claims(now + 600),
        )
        .unwrap();
        assert!(matches!(k.verify(&wrong, now), Err(TokenError::Invalid(_))));
        let unknown = mint_hs256("k9", SECRET, &claims(now + 600)).unwrap();
        assert_eq!(k.verify(&unknown, now), Err(TokenError::UnknownKey));
        let long = mint_hs256("k1", SECRET, &claims(now + 100_000)).unwrap();
        assert_eq!(k.verify(&long, now), Err(TokenError::TooLong(3_600)));
        // Tampered: the tenant changed after signing.
        let mut parts: Vec<String> = t.split('.').map(str::to_owned).collect();
        let forged = claims(now + 600);
        let forged = Claims {
            tenant: "other".into(),
            ..forged
        };
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        parts[1] = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        assert!(matches!(
            k.verify(&parts.join("."), now),
            Err(TokenError::Invalid(_))
        ));
        // Unsigned (`alg: none`).
        let none_header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","kid":"k1","typ":"JWT"}"#);
        let unsigned = format!("{none_header}.{}.", parts[1]);
        assert!(k.verify(&unsigned, now).is_err());
        // Bad claims.
        let root = Claims {
            role: "root".into(),
            ..claims(now + 600)
        };
        let t3 = mint_hs256("k1", SECRET, &root).unwrap();
        assert!(matches!(k.verify(&t3, now), Err(TokenError::BadClaims(_))));
        // Enumerated claims match exactly; a limit of zero is no limit and is refused; the
        // static tokens' tenant cannot be named.
        for bad in [
            Claims {
                role: "admin ".into(),
                ..claims(now + 600)
            },
            Claims {
                tenant: "default".into(),
                ..claims(now + 600)
            },
            Claims {
                claims_per_min: Some(0),
                ..claims(now + 600)
            },
            Claims {
                claims_per_min: Some(u32::MAX),
                ..claims(now + 600)
            },
            Claims {
                sub: Some("visitor\nINFO forged".into()),
                ..claims(now + 600)
            },
        ] {
            let t = mint_hs256("k1", SECRET, &bad).unwrap();
            assert!(
                matches!(k.verify(&t, now), Err(TokenError::BadClaims(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn two_keys_verify_at_once_for_rotation() {
        let k = keys();
        let a = mint_hs256("k1", SECRET, &claims(2_000)).unwrap();
        let b = mint_hs256("k2", b"another-secret-of-32-bytes-ok!!!", &claims(2_000)).unwrap();
        assert!(k.verify(&a, 1_500).is_ok());
        assert!(k.verify(&b, 1_500).is_ok());
    }

    /// A throw-away Ed25519 key pair (`openssl genpkey -algorithm ed25519`), for this test only.
    const ED_PRIVATE_PKCS8_HEX: &str =
        "302e020100300506032b657004220420a2a030cab9c77444772012fd9342057861ab8df8226072ff33683d06170d6a24";
    const ED_PUBLIC_HEX: &str = "373600f65cd6ffa3cf184ae91e40ee3368c6d9fc3ae78afff48fa73eb60748fc";

    fn unhex(h: &str) -> Vec<u8> {
        hex::decode(h).unwrap()
    }

    #[test]
    fn ed25519_tokens_verify_with_the_public_key_only() {
        let k = Keys::parse(&format!(
            "ed:ed25519:{}",
            STANDARD.encode(unhex(ED_PUBLIC_HEX))
        ))
        .unwrap();
        let t = mint_ed25519("ed", &unhex(ED_PRIVATE_PKCS8_HEX), &claims(2_000)).unwrap();
        assert_eq!(k.verify(&t, 1_500).unwrap().tenant, "acme");
        // An HS256 token claiming the Ed25519 key id is refused (no algorithm confusion).
        let hs = mint_hs256("ed", &unhex(ED_PUBLIC_HEX), &claims(2_000)).unwrap();
        assert!(matches!(k.verify(&hs, 1_500), Err(TokenError::Invalid(_))));
    }

    #[test]
    fn key_specs_are_checked() {
        assert!(Keys::parse("k:hs256:c2hvcnQ=").is_err(), "short secret");
        assert!(Keys::parse("k:rs256:AAAA").is_err(), "unknown alg");
        assert!(Keys::parse("k:hs256").is_err(), "no key");
        let s = STANDARD.encode(SECRET);
        assert!(
            Keys::parse(&format!("k:hs256:{s},k:hs256:{s}")).is_err(),
            "duplicate kid"
        );
        assert!(Keys::parse(&format!("# keys\nk:hs256:{s}\n")).is_ok());
    }
}
