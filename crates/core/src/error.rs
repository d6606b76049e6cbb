//! The one error type of `ternflow-core`, shared by the pipeline and the adapters that implement
//! its traits.
//!
//! Every variant says whether retrying can help ([`Error::is_retryable`]): the retry loop asks the
//! error, never a string. Permanent errors end a job in the dead-letter queue with
//! [`Error::code`] as the reason.

/// What went wrong while carrying a job or a text through the pipeline.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server could not be reached (network error, connection refused, timeout).
    /// Transient: retry with backoff.
    #[error("server unreachable: {0}")]
    Unreachable(String),
    /// The server answered with an error status. 5xx, 408 and 429 are transient, other 4xx are not.
    #[error("http {status} {code}: {message}")]
    Http {
        /// HTTP status.
        status: u16,
        /// The protocol's error code (`bad_request`, `queue_full`, …).
        code: String,
        /// The server's message.
        message: String,
        /// The server's `Retry-After`, in milliseconds, when it sent one.
        retry_after_ms: Option<u64>,
    },
    /// The job's lease was lost (expired and given to someone else, or a stale token). Not retried
    /// here: the server re-delivers the job to whoever holds it now.
    #[error("lease lost on job {0}")]
    LeaseLost(String),
    /// The engine failed on this text (or is not loaded). Triggers the backend fallback.
    #[error("engine: {0}")]
    Engine(String),
    /// The backend fallback is refusing calls for now (breaker open or rate limited). Transient.
    #[error("backend unavailable: {0}")]
    BackendUnavailable(String),
    /// The job itself is bad (empty or oversized text, unknown model): retrying cannot help.
    #[error("bad job ({code}): {message}")]
    BadJob {
        /// Machine-readable reason (`text_too_long`, `model_mismatch`, `no_model`).
        code: crate::ErrorCode,
        /// Detail.
        message: String,
    },
    /// A local store (IndexedDB, Cache API) failed. Never fatal for a job: the pipeline carries on
    /// without the local cache.
    #[error("local cache: {0}")]
    LocalCache(String),
    /// A response could not be decoded. Permanent: the peer speaks another protocol.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The worker is stopping.
    #[error("stopped")]
    Stopped,
}

impl Error {
    /// Whether trying the same operation again later can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Unreachable(_) | Error::BackendUnavailable(_) => true,
            Error::Http { status, .. } => *status >= 500 || *status == 408 || *status == 429,
            Error::Engine(_) | Error::LocalCache(_) => true,
            Error::LeaseLost(_) | Error::BadJob { .. } | Error::Protocol(_) | Error::Stopped => {
                false
            }
        }
    }

    /// A short machine-readable code, used as the nack / dead-letter reason and in metrics.
    pub fn code(&self) -> &str {
        use crate::ErrorCode as C;
        match self {
            Error::Unreachable(_) => C::Unreachable.as_str(),
            Error::Http { code, .. } => code,
            Error::LeaseLost(_) => C::LeaseLost.as_str(),
            Error::Engine(_) => C::EngineFailed.as_str(),
            Error::BackendUnavailable(_) => C::BackendUnavailable.as_str(),
            Error::BadJob { code, .. } => code.as_str(),
            Error::LocalCache(_) => C::LocalCache.as_str(),
            Error::Protocol(_) => C::Protocol.as_str(),
            Error::Stopped => C::Stopped.as_str(),
        }
    }

    /// How long the peer asked us to wait before retrying, if it said.
    pub fn retry_after_ms(&self) -> Option<u64> {
        match self {
            Error::Http { retry_after_ms, .. } => *retry_after_ms,
            _ => None,
        }
    }

    /// The error as the protocol's [`JobError`](crate::protocol::JobError) for a nack.
    pub fn to_job_error(&self) -> crate::protocol::JobError {
        crate::protocol::JobError {
            code: self.code().to_owned(),
            message: self.to_string(),
            retryable: self.is_retryable(),
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16) -> Error {
        Error::Http {
            status,
            code: "x".into(),
            message: String::new(),
            retry_after_ms: None,
        }
    }

    #[test]
    fn transient_and_permanent_are_told_apart() {
        assert!(Error::Unreachable("refused".into()).is_retryable());
        assert!(http(503).is_retryable());
        assert!(http(429).is_retryable());
        assert!(!http(400).is_retryable());
        assert!(!http(413).is_retryable());
        assert!(!Error::LeaseLost("j".into()).is_retryable());
        let bad = Error::BadJob {
            code: crate::ErrorCode::TextTooLong,
            message: "9000 bytes".into(),
        };
        assert!(!bad.is_retryable());
        let je = bad.to_job_error();
        assert_eq!((je.code.as_str(), je.retryable), ("text_too_long", false));
    }
}
