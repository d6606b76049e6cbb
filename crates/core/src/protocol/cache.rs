//! The remote cache (`/v1/cache/{key}`) and the locks that fence its writes (`/v1/locks/{key}`).

use serde::{Deserialize, Serialize};

use super::{Provenance, Vector};

/// A remote cache entry (`GET /v1/cache/{key}` response; `PUT` conflict body).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CacheEntry {
    /// Model that produced the vector.
    pub model_id: String,
    /// The vector.
    pub vector: Vector,
    /// Fence of the lock holder that wrote it.
    pub fence: u64,
    /// Expiry (TTL with jitter applied).
    pub expires_at: u64,
    /// Who wrote it (admins only; see [`Provenance`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<Provenance>,
}

/// `PUT /v1/cache/{key}` body. Refused with 409 when the stored entry has a newer fence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CachePut {
    /// Model that produced the vector.
    pub model_id: String,
    /// The vector.
    pub vector: Vector,
    /// The writer's fence (from its lock grant).
    pub fence: u64,
    /// Requested TTL; the server clamps it and adds jitter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// The text the vector embeds: the server checks that it hashes to the key and may
    /// recompute the vector (required from workers the server verifies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The writing worker's name (recorded in the entry's provenance; optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
}

/// `POST /v1/locks/{key}` body (may be empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LockRequest {
    /// Requested TTL; the server clamps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

/// A lock grant (acquire and renew responses).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LockGrant {
    /// Random token; renew and release must present it.
    pub token: String,
    /// Fencing number; pass it to `PUT /v1/cache/{key}`.
    pub fence: u64,
    /// The lock frees itself at this time unless renewed.
    pub expires_at: u64,
}

/// `POST /v1/locks/{key}/renew` and `DELETE /v1/locks/{key}` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LockToken {
    /// The grant's token.
    pub token: String,
    /// New TTL (renew only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}
