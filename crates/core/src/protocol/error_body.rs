//! The error body every non-2xx response carries.

use serde::{Deserialize, Serialize};

use super::CacheEntry;

/// The error body every non-2xx response carries: `{ "error": { "code", "message" } }`, plus
/// what a conflict has to say: the stored cache `entry` of a refused `PUT` (`stale_fence`), and
/// the current holder's `expires_at` of a `lock_held`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
    /// `stale_fence`: the newer entry that is stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<CacheEntry>,
    /// `lock_held`: when the current holder's lock runs out (unless renewed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
}

/// Inside [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ErrorDetail {
    /// Machine-readable code (`bad_request`, `lease_lost`, `queue_full`, …).
    pub code: String,
    /// Human-readable detail.
    pub message: String,
}
