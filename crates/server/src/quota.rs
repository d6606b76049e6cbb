//! Per-tenant quotas an operator sets (`ternflow serve --tenant-*` for every tenant,
//! `--tenant-quotas FILE` per tenant): how much of the server one tenant may hold or spend.
//! They apply to the tenants of signed tokens; the `default` tenant is the operator's own.
//!
//! | quota | what it bounds | beyond it |
//! |---|---|---|
//! | `max_queue` | jobs pending (ready, delayed, leased) | enqueue: 429 `quota_exceeded` |
//! | `max_workers` | rows in the tenant's worker table | a new worker name: 429 `quota_exceeded` |
//! | `embed_tokens_per_min` | `POST /v1/embed` cost, all the tenant's tokens together | 429 `quota_exceeded` with `Retry-After` |
//! | `max_cache_bytes` | live remote-cache entries (key bytes + 4 × dimensions each) | `PUT /v1/cache`: 429 `quota_exceeded`; an ack's write-through is skipped (the ack stands) |

use serde::Deserialize;

/// A tenant's quotas (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Quotas {
    /// Most jobs pending at once.
    pub max_queue: u64,
    /// Most workers in the tenant's table.
    pub max_workers: usize,
    /// Embed budget per minute (token estimate: a text costs `1 + bytes / 4`).
    pub embed_tokens_per_min: u32,
    /// Most bytes of live remote-cache entries ([`entry_bytes`] each).
    pub max_cache_bytes: u64,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            max_queue: 1_000_000,
            max_workers: 1_000,
            embed_tokens_per_min: 200_000,
            max_cache_bytes: 1 << 30,
        }
    }
}

/// One tenant's override of the server's [`Quotas`] (each field it names replaces the
/// server's), as a value of the JSON object `--tenant-quotas FILE` holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaOverride {
    /// [`Quotas::max_queue`].
    pub max_queue: Option<u64>,
    /// [`Quotas::max_workers`].
    pub max_workers: Option<usize>,
    /// [`Quotas::embed_tokens_per_min`].
    pub embed_tokens_per_min: Option<u32>,
    /// [`Quotas::max_cache_bytes`].
    pub max_cache_bytes: Option<u64>,
}

impl Quotas {
    /// These quotas with `o`'s fields in place of their own.
    #[must_use]
    pub fn with(&self, o: &QuotaOverride) -> Quotas {
        Quotas {
            max_queue: o.max_queue.unwrap_or(self.max_queue),
            max_workers: o.max_workers.unwrap_or(self.max_workers),
            embed_tokens_per_min: o.embed_tokens_per_min.unwrap_or(self.embed_tokens_per_min),
            max_cache_bytes: o.max_cache_bytes.unwrap_or(self.max_cache_bytes),
        }
    }

    /// Every quota at least 1 (a zero would refuse everything: say so by not serving the
    /// tenant instead).
    ///
    /// # Errors
    /// The quota that is zero.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_queue == 0 {
            return Err("max_queue must be at least 1".into());
        }
        if self.max_workers == 0 {
            return Err("max_workers must be at least 1".into());
        }
        if self.embed_tokens_per_min == 0 {
            return Err("embed_tokens_per_min must be at least 1".into());
        }
        if self.max_cache_bytes == 0 {
            return Err("max_cache_bytes must be at least 1".into());
        }
        Ok(())
    }
}

/// What one cache entry counts against `max_cache_bytes`: its key's bytes and 4 bytes a
/// dimension (what every store keeps of it, less its fixed-size fields).
#[must_use]
pub fn entry_bytes(key: &str, dims: usize) -> u64 {
    (key.len() + 4 * dims) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_and_costs() {
        let o: QuotaOverride = serde_json::from_str(r#"{"max_queue": 10}"#).unwrap();
        let q = Quotas::default().with(&o);
        assert_eq!(q.max_queue, 10);
        assert_eq!(q.max_workers, Quotas::default().max_workers);
        assert!(serde_json::from_str::<QuotaOverride>(r#"{"max_qeueu": 1}"#).is_err());
        assert!(Quotas::default()
            .with(&QuotaOverride {
                max_workers: Some(0),
                ..Default::default()
            })
            .validate()
            .is_err());
    }
}
