//! The crate's one error type, and its mapping to the protocol's error body and status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ternflow_core::protocol::{CacheEntry, ErrorBody, ErrorDetail};
use ternflow_core::ErrorCode;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong serving a request. Each variant maps to one HTTP status and a
/// `{ "error": { "code", "message" } }` body; the detail of internal failures is logged, not sent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// 400: the request is malformed or breaks a limit that is not about size.
    #[error("{message}")]
    BadRequest {
        /// Machine-readable code.
        code: ErrorCode,
        /// Detail.
        message: String,
    },
    /// 401: no token, or an unknown one.
    #[error("missing or unknown bearer token")]
    Unauthorized,
    /// 401: a signed token that is expired, not yet valid, badly signed or malformed.
    #[error("{0}")]
    BadToken(String),
    /// 403: the caller may not use this route; the message says what it needs.
    #[error("{0}")]
    Forbidden(String),
    /// 403: the caller's identity is quarantined (a result it sent did not verify).
    #[error("{0}")]
    Quarantined(String),
    /// 404.
    #[error("{0}")]
    NotFound(String),
    /// 405: the route exists but not with this method.
    #[error("this route does not accept that method")]
    MethodNotAllowed,
    /// 409: lease lost, stale token, lock held, older or foreign fence. `entry` and
    /// `expires_at` go into the [`ErrorBody`] (the stored cache entry of a refused `PUT`, the
    /// holder's expiry of a held lock); `retry_after_s` sets `Retry-After`.
    #[error("{message}")]
    Conflict {
        /// Machine-readable code.
        code: ErrorCode,
        /// Detail.
        message: String,
        /// `stale_fence`: the stored entry.
        entry: Option<Box<CacheEntry>>,
        /// `lock_held`: when the holder's lock runs out.
        expires_at: Option<u64>,
        /// `Retry-After` hint in seconds.
        retry_after_s: Option<u64>,
    },
    /// 413: body, text or batch too large.
    #[error("{message}")]
    TooLarge {
        /// Machine-readable code (`too_large`, `text_too_long`, `batch_too_large`).
        code: ErrorCode,
        /// Detail.
        message: String,
    },
    /// 408: the request (its body) did not arrive in time.
    #[error("{0}")]
    RequestTimeout(String),
    /// 429: a queue is full, or the token is over a limit; retry after the hint.
    #[error("{message}")]
    TooManyRequests {
        /// Detail.
        message: String,
        /// `Retry-After` in seconds.
        retry_after_s: u64,
    },
    /// 429 `quota_exceeded`: the tenant is at one of its quotas (`crate::quota`); retry after
    /// the hint (a budget refills), or once it holds less.
    #[error("{message}")]
    QuotaExceeded {
        /// Detail.
        message: String,
        /// `Retry-After` in seconds.
        retry_after_s: u64,
    },
    /// 503: the server cannot serve this now (no model loaded, shutting down). Transient.
    #[error("{0}")]
    Unavailable(String),
    /// 503: the store failed (Redis down, disk error). Transient: retry with backoff.
    #[error("store error: {0}")]
    Store(String),
}

impl Error {
    /// A 400 with `code`.
    pub fn bad_request(code: ErrorCode, message: impl Into<String>) -> Self {
        Error::BadRequest {
            code,
            message: message.into(),
        }
    }

    /// The 404 for a job id the store does not know.
    pub fn no_job(id: &str) -> Self {
        Error::NotFound(format!("no job {id}"))
    }

    /// A 413 with `code`.
    pub fn too_large(code: ErrorCode, message: impl Into<String>) -> Self {
        Error::TooLarge {
            code,
            message: message.into(),
        }
    }

    /// A plain 409 with `code`.
    pub fn conflict(code: ErrorCode, message: impl Into<String>) -> Self {
        Error::Conflict {
            code,
            message: message.into(),
            entry: None,
            expires_at: None,
            retry_after_s: None,
        }
    }

    /// A 400 for an ack of a batch refused with `code` (one of the result checks' codes).
    pub fn refused(code: &str, message: String) -> Self {
        let code = match ErrorCode::parse(code) {
            Some(c @ (ErrorCode::ModelMismatch | ErrorCode::BadModel | ErrorCode::BadId)) => c,
            _ => ErrorCode::BadResult,
        };
        Error::BadRequest { code, message }
    }

    /// Whether retrying the same request later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::TooManyRequests { .. }
                | Error::QuotaExceeded { .. }
                | Error::RequestTimeout(_)
                | Error::Unavailable(_)
                | Error::Store(_)
        )
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Error::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Error::Unauthorized | Error::BadToken(_) => StatusCode::UNAUTHORIZED,
            Error::Forbidden(_) | Error::Quarantined(_) => StatusCode::FORBIDDEN,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Error::Conflict { .. } => StatusCode::CONFLICT,
            Error::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Error::TooManyRequests { .. } | Error::QuotaExceeded { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            Error::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Error::Unavailable(_) | Error::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The body's `code`.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::BadRequest { code, .. }
            | Error::Conflict { code, .. }
            | Error::TooLarge { code, .. } => *code,
            Error::Unauthorized => ErrorCode::Unauthorized,
            Error::BadToken(_) => ErrorCode::BadToken,
            Error::Forbidden(_) => ErrorCode::Forbidden,
            Error::Quarantined(_) => ErrorCode::Quarantined,
            Error::NotFound(_) => ErrorCode::NotFound,
            Error::MethodNotAllowed => ErrorCode::MethodNotAllowed,
            Error::TooManyRequests { .. } => ErrorCode::TooManyRequests,
            Error::QuotaExceeded { .. } => ErrorCode::QuotaExceeded,
            Error::RequestTimeout(_) => ErrorCode::BodyTimeout,
            Error::Unavailable(_) => ErrorCode::Unavailable,
            Error::Store(_) => ErrorCode::StoreUnavailable,
        }
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = match &self {
            Error::Store(detail) => {
                tracing::warn!(%detail, "store error");
                "the store is unavailable; retry with backoff".to_owned()
            }
            other => other.to_string(),
        };
        let mut body = ErrorBody {
            error: ErrorDetail {
                code: self.code().as_str().to_owned(),
                message,
            },
            entry: None,
            expires_at: None,
        };
        let retry_after = match self {
            Error::Conflict {
                entry,
                expires_at,
                retry_after_s,
                ..
            } => {
                body.entry = entry.map(|e| *e);
                body.expires_at = expires_at;
                retry_after_s
            }
            Error::TooManyRequests { retry_after_s, .. }
            | Error::QuotaExceeded { retry_after_s, .. } => Some(retry_after_s),
            Error::Unavailable(_) | Error::Store(_) => Some(1),
            _ => None,
        };
        let mut resp = (status, Json(body)).into_response();
        if let Some(s) = retry_after {
            if let Ok(v) = HeaderValue::from_str(&s.max(1).to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        resp
    }
}
