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
//! - `mod.rs`: [`Policy`] and [`Writer`] (identities themselves are `crate::identity`'s).
//! - [`shape`]: what a vector must look like.
//! - [`verifier`]: standings (cached), recomputation, quarantine and undo.

use std::sync::Arc;

use ternflow_core::protocol::Provenance;

pub mod shape;
pub mod verifier;

pub use verifier::Verifier;

pub use crate::identity::{is_writer_id, static_writer_id, worker_name, writer_id};

/// How the server checks workers' results (`ternflow serve --verify-*`).
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Check results at all (off: shape checks and provenance only).
    pub enabled: bool,
    /// Results of a new writer verified (all of them, before they are stored) before it is
    /// trusted enough for sampling. Default 32. Probation goes by whole ack requests (and those
    /// already on their way), so a default worker, acking ~60 results a request, has 75–136
    /// recomputed: 56–112 ms of server CPU per new identity with the shipped model
    /// (docs/security.md).
    pub probation: u64,
    /// Fraction of a trusted writer's results recomputed after they are stored (0..=1).
    /// Default 0.05: a liar is caught after 1 / 0.05 = 20 lies on average, for 5 % of the
    /// workers' embedding work done again on the server.
    pub sample: f64,
    /// Largest difference per component accepted as equal; 0 = bit-exact (the default: every
    /// kernel of the engine gives the same bits, `docs/engine.md`).
    pub tolerance: f32,
    /// For a model the server cannot run: how many different identities must send the same
    /// vector (bit for bit) before a result is final (k-of-n agreement). 1 (the default) takes
    /// the first result, checked for its shape only.
    pub agreement: u32,
}

/// A per-tenant override of the server's [`Policy`] (`ternflow serve --verify-tenants FILE`, a
/// JSON object `{"tenant": {"probation": K, "sample": P, "agreement": N, "enabled": B}}`):
/// each field it names replaces the server's.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyOverride {
    /// [`Policy::enabled`].
    pub enabled: Option<bool>,
    /// [`Policy::probation`].
    pub probation: Option<u64>,
    /// [`Policy::sample`].
    pub sample: Option<f64>,
    /// [`Policy::tolerance`].
    pub tolerance: Option<f32>,
    /// [`Policy::agreement`].
    pub agreement: Option<u32>,
}

impl Policy {
    /// This policy with `o`'s fields in place of its own.
    #[must_use]
    pub fn with(&self, o: &PolicyOverride) -> Policy {
        Policy {
            enabled: o.enabled.unwrap_or(self.enabled),
            probation: o.probation.unwrap_or(self.probation),
            sample: o.sample.unwrap_or(self.sample),
            tolerance: o.tolerance.unwrap_or(self.tolerance),
            agreement: o.agreement.unwrap_or(self.agreement),
        }
    }

    /// Checks the ranges: `sample` within 0..=1, `tolerance` finite and ≥ 0, `agreement`
    /// within 1..=16.
    ///
    /// # Errors
    /// What is out of range.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.sample) {
            return Err(format!("sample {} is not within 0..=1", self.sample));
        }
        if !self.tolerance.is_finite() || self.tolerance < 0.0 {
            return Err(format!(
                "tolerance {} is not a finite number ≥ 0",
                self.tolerance
            ));
        }
        if !(1..=16).contains(&self.agreement) {
            return Err(format!("agreement {} is not within 1..=16", self.agreement));
        }
        Ok(())
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            enabled: true,
            probation: 32,
            sample: 0.05,
            tolerance: 0.0,
            agreement: 1,
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
    /// The caller as the writer of results, under the worker name it gives.
    pub fn of(caller: &crate::identity::Identity, worker: Option<&str>) -> Writer {
        Writer {
            tenant: caller.tenant.clone(),
            sub: caller.sub.clone(),
            worker: worker_name(worker),
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_overrides_and_ranges() {
        let o: PolicyOverride =
            serde_json::from_str(r#"{"probation": 100, "sample": 0.2}"#).unwrap();
        let p = Policy::default().with(&o);
        assert_eq!((p.probation, p.sample, p.agreement), (100, 0.2, 1));
        assert!(p.validate().is_ok());
        assert!(serde_json::from_str::<PolicyOverride>(r#"{"smaple": 1}"#).is_err());
        for bad in [
            r#"{"sample": 1.5}"#,
            r#"{"sample": -0.1}"#,
            r#"{"agreement": 0}"#,
            r#"{"tolerance": -1}"#,
        ] {
            let o: PolicyOverride = serde_json::from_str(bad).unwrap();
            assert!(Policy::default().with(&o).validate().is_err(), "{bad}");
        }
        let cfg = crate::Config {
            verify_tenants: [("acme".to_owned(), o)].into(),
            ..crate::Config::default()
        };
        assert_eq!(cfg.verify_policy("acme").probation, 100);
        assert_eq!(cfg.verify_policy("other").probation, 32);
    }
}
