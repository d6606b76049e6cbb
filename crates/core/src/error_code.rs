//! [`ErrorCode`]: every machine-readable `code` ternflow reports, as one closed set — the server's
//! error bodies (`{"error": {"code", "message"}}`) and dead-letter reasons, the worker's errors,
//! and the npm package's own (`TernflowError.code`). The server can only answer with one of these
//! (its error constructors take an [`ErrorCode`]); `TernflowErrorCode` in `www/common.d.ts` lists
//! exactly these, plus `http_<status>` (checked by `crates/core/tests/error_codes.rs`).

use serde::{Deserialize, Serialize};

macro_rules! codes {
    ($( $(#[$doc:meta])* $variant:ident = $text:literal, )*) => {
        /// See the [module docs](self).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $( $(#[$doc])* #[serde(rename = $text)] $variant, )*
        }

        impl ErrorCode {
            /// Every code, in declaration order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// The code as it appears on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $text,)*
                }
            }

            /// The code named `text`, if it is one.
            pub fn parse(text: &str) -> Option<ErrorCode> {
                match text {
                    $($text => Some(ErrorCode::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

codes! {
    // ---- requests the server refuses (400, 413) ----
    /// The body is not what the route takes (JSON of the wrong shape).
    BadBody = "bad_body",
    /// The body is not JSON.
    BadJson = "bad_json",
    /// `Content-Type` is not `application/json`.
    BadContentType = "bad_content_type",
    /// A path parameter is malformed.
    BadPath = "bad_path",
    /// A query parameter is malformed.
    BadQuery = "bad_query",
    /// A job or cache id is malformed.
    BadId = "bad_id",
    /// `delay_ms` is out of range.
    BadDelay = "bad_delay",
    /// `priority` is out of range.
    BadPriority = "bad_priority",
    /// `max` (a claim's batch) is out of range.
    BadMax = "bad_max",
    /// `k` (a search's result count) is out of range.
    BadK = "bad_k",
    /// A worker name is malformed.
    BadWorker = "bad_worker",
    /// A worker session id is malformed.
    BadSession = "bad_session",
    /// A vector is not base64 little-endian `f32`, or has the wrong length.
    BadVector = "bad_vector",
    /// A fence that is not the live lock's.
    BadFence = "bad_fence",
    /// A result that fails the server's checks (shape, norm, the engine's own vector).
    BadResult = "bad_result",
    /// A model file that is not a TERN v1 model; a result or entry of an unknown model.
    BadModel = "bad_model",
    /// A result or cache entry of another model than the job's or key's.
    ModelMismatch = "model_mismatch",
    /// A cache write without the text its key hashes.
    TextRequired = "text_required",
    /// An empty batch.
    EmptyBatch = "empty_batch",
    /// An empty search query.
    EmptyQuery = "empty_query",
    /// A body larger than the server takes.
    TooLarge = "too_large",
    /// A text longer than the limit.
    TextTooLong = "text_too_long",
    /// More items in one batch than the limit.
    BatchTooLarge = "batch_too_large",
    /// The body did not arrive in time (408).
    BodyTimeout = "body_timeout",
    // ---- who is calling (401, 403) ----
    /// No token, or an unknown one.
    Unauthorized = "unauthorized",
    /// A signed token that is expired, not yet valid, badly signed or malformed.
    BadToken = "bad_token",
    /// The token's role may not use this route.
    Forbidden = "forbidden",
    /// The caller's identity is quarantined (a result it sent did not verify).
    Quarantined = "quarantined",
    // ---- what is there (404, 405, 409) ----
    /// No such job, entry, lock or route.
    NotFound = "not_found",
    /// The route does not take this method.
    MethodNotAllowed = "method_not_allowed",
    /// The lease is no longer this caller's.
    LeaseLost = "lease_lost",
    /// A claim under a worker session that its page's hand-back ended; the worker needs a new
    /// session.
    SessionEnded = "session_ended",
    /// A lock someone else holds.
    LockHeld = "lock_held",
    /// A lock that is no longer the caller's.
    LockLost = "lock_lost",
    /// A cache write older than the stored entry.
    StaleFence = "stale_fence",
    /// A result the server holds back until a second worker agrees with it.
    AwaitingAgreement = "awaiting_agreement",
    // ---- load (429, 503) ----
    /// Over a rate limit or a cap; retry after the hint.
    TooManyRequests = "too_many_requests",
    /// The tenant is at one of its quotas.
    QuotaExceeded = "quota_exceeded",
    /// The server cannot serve this now (no model, shutting down).
    Unavailable = "unavailable",
    /// The store failed (Redis down, a full disk).
    StoreUnavailable = "store_unavailable",
    // ---- dead-letter reasons the server writes ----
    /// A lease ran out on its last attempt.
    LeaseExpired = "lease_expired",
    /// A delivery handed back by release past the job's free releases: it counts as an attempt.
    Released = "released",
    // ---- the worker ----
    /// A server (or a model's host) could not be reached.
    Unreachable = "unreachable",
    /// No complete answer within the timeout.
    Timeout = "timeout",
    /// The engine failed on a text.
    EngineFailed = "engine_failed",
    /// The backend fallback is unavailable (breaker open, refused, no server).
    BackendUnavailable = "backend_unavailable",
    /// No model is loaded.
    NoModel = "no_model",
    /// The model does not have the SHA-256 asked for.
    ModelChecksum = "model_checksum",
    /// The local cache failed.
    LocalCache = "local_cache",
    /// IndexedDB failed.
    Indexeddb = "indexeddb",
    /// The server answered something the protocol does not allow.
    Protocol = "protocol",
    /// The worker is stopping.
    Stopped = "stopped",
    /// A request the worker does not understand (a page message, a malformed argument).
    BadRequest = "bad_request",
    /// A page message that is not one of the worker's.
    BadMessage = "bad_message",
    /// An unknown option or `config` key, or a value of the wrong type.
    BadConfig = "bad_config",
    /// A JavaScript exception the worker caught.
    Js = "js",
    // ---- the npm package's glue ----
    /// The wasm could not be compiled or instantiated.
    BadWasm = "bad_wasm",
    /// The worker script could not be loaded, or crashed.
    WorkerFailed = "worker_failed",
    /// `terminate()` was called while the request was pending.
    Terminated = "terminated",
    /// The caller's `AbortSignal` fired.
    Aborted = "aborted",
    /// This entry cannot run here (`EmbeddingWorker` in Node).
    UnsupportedRuntime = "unsupported_runtime",
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_and_is_unique() {
        let mut seen = std::collections::HashSet::new();
        for c in ErrorCode::ALL {
            assert!(seen.insert(c.as_str()), "{c} twice");
            assert_eq!(ErrorCode::parse(c.as_str()), Some(*c));
            let json = serde_json::to_string(c).unwrap();
            assert_eq!(json, format!("\"{c}\""));
            assert_eq!(serde_json::from_str::<ErrorCode>(&json).unwrap(), *c);
        }
        assert_eq!(ErrorCode::parse("http_404"), None);
    }
}
