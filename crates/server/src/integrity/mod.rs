//! Result verification: the server does not believe a worker's vector, it checks it.
//!
//! A worker runs in a visitor's browser, so anything it sends may be a lie. What the server
//! does about it (the integrity model, with its figures, is in `docs/security.md`):
//!
//! - **Shape checks** ([`shape`]) on every ack and cache write: the dimension of the model the
//!   server runs, every value finite, unit norm (the engine L2-normalises), the job's model.
//! - **Provenance**: every result and cache entry records its writer ([`Writer`]: tenant, `sub`,
//!   worker name, time), and the store keeps an index of what each writer wrote.
//! - **Verification** ([`verifier`]): the server recomputes results with its own engine (the
//!   engine is bit-exact across its kernels, so the comparison is exact). A writer on
//!   **probation** (fewer than `probation` verified results) has every result checked before it
//!   is stored; after that a fraction `sample` is checked off the hot path.
//! - **Quarantine** on a mismatch: the writer's requests are refused (403 `quarantined`), every
//!   result it wrote is re-queued and every cache entry it wrote deleted (an `invalidate` event
//!   tells browsers to drop their copies); an admin can lift it (`DELETE /v1/quarantine/{sub}`).
//!
//! # Layout
//! - `mod.rs`: [`Policy`], [`Writer`] and the writer's identity.
//! - [`shape`]: what a vector must look like.
//! - [`verifier`]: standings (cached), recomputation, quarantine and undo.

use std::sync::Arc;

use ternflow_core::protocol::Provenance;

pub mod shape;
pub mod verifier;

pub use verifier::Verifier;

/// How the server checks workers' results (`ternflow serve --verify-*`).
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Check results at all (off: shape checks and provenance only).
    pub enabled: bool,
    /// Results of a new writer verified (all of them, before they are stored) before it is
    /// trusted enough for sampling. Default 32: one claim's worth of a default worker, and ≈ 32
    /// engine runs of server CPU per new visitor (≈ 30 ms with the shipped model).
    pub probation: u64,
    /// Fraction of a trusted writer's results recomputed after they are stored (0..=1).
    /// Default 0.05: a liar is caught after 1 / 0.05 = 20 lies on average, for 5 % of the
    /// workers' embedding work done again on the server.
    pub sample: f64,
    /// Largest difference per component accepted as equal; 0 = bit-exact (the default: every
    /// kernel of the engine gives the same bits, `docs/engine.md`).
    pub tolerance: f32,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            enabled: true,
            probation: 32,
            sample: 0.05,
            tolerance: 0.0,
        }
    }
}

/// Who wrote a result: the caller's verified identity and the worker name it gave.
#[derive(Debug, Clone)]
pub struct Writer {
    /// The token's tenant.
    pub tenant: Arc<str>,
    /// The writer's identity ([`writer_id`]).
    pub sub: Arc<str>,
    /// The worker name it gave (checked by [`worker_name`]).
    pub worker: Option<String>,
}

impl Writer {
    /// The provenance record of a write at `at`.
    pub fn provenance(&self, at: u64, verified: bool) -> Provenance {
        Provenance {
            tenant: self.tenant.to_string(),
            sub: self.sub.to_string(),
            worker: self.worker.clone(),
            at,
            verified,
        }
    }
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
    d[..8].iter().map(|b| format!("{b:02x}")).collect()
}

fn is_clean(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'@' | b'-'))
}

/// A worker name fit to record: 1–128 characters of `[A-Za-z0-9._:@-]`; anything else is
/// dropped (a name is self-reported: it must not carry newlines or escapes into logs).
pub fn worker_name(name: Option<&str>) -> Option<String> {
    name.filter(|n| is_clean(n, 128)).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
