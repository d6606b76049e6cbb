//! The root crate's one error enum. Converted to `JsError` / an error message only at the
//! `#[wasm_bindgen]` and `postMessage` boundaries.
//!
//! Every variant has a stable `code` (see [`WorkerError::code`]); the npm package's
//! `TernflowError.code` union in `www/index.d.ts` lists them.

/// What can fail in the browser adapter.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The pipeline failed (see [`ternflow_core::Error::is_retryable`]).
    #[error(transparent)]
    Core(#[from] ternflow_core::Error),
    /// The model file is not a valid TERN v1 model.
    #[error("model: {0}")]
    Engine(#[from] ternflow_engine::Error),
    /// The model at `url` is not a valid TERN v1 model (HTML from a dev server, a truncated
    /// download, another format). Permanent for these bytes.
    #[error("model {url}: {message}")]
    BadModel {
        /// Where it came from.
        url: String,
        /// What the engine found.
        message: String,
    },
    /// The engine worker's engine refused the model (its message). Permanent for these bytes.
    #[error("model: {0}")]
    ModelRefused(String),
    /// A download answered with a non-2xx status (code `http_<status>`).
    #[error("GET {url}: HTTP {status}")]
    HttpStatus {
        /// What was fetched.
        url: String,
        /// The status.
        status: u16,
    },
    /// A download did not reach the server (DNS, connection refused, CORS).
    #[error("GET {url}: unreachable: {message}")]
    Unreachable {
        /// What was fetched.
        url: String,
        /// The platform's message.
        message: String,
    },
    /// A download took longer than its timeout (`modelTimeoutMs`).
    #[error("GET {url}: no complete answer within {ms} ms")]
    Timeout {
        /// What was fetched.
        url: String,
        /// The timeout.
        ms: u64,
    },
    /// The page cancelled the request (its `AbortSignal` fired, or the worker was terminated).
    #[error("aborted: {0}")]
    Aborted(String),
    /// IndexedDB failed.
    #[error(transparent)]
    Idb(#[from] crate::idb::IdbError),
    /// A JS call threw.
    #[error("js: {0}")]
    Js(String),
    /// The page sent a message that is not a `ToWorker`.
    #[error("bad message: {0}")]
    BadMessage(String),
    /// `config` has a key no setting has (a typo), or a value of the wrong type.
    #[error("config: {0}")]
    BadConfig(String),
    /// The downloaded model does not have the expected SHA-256.
    #[error("model checksum mismatch: expected {expected}, got {actual}")]
    ModelChecksum {
        /// What the page asked for.
        expected: String,
        /// What arrived.
        actual: String,
    },
}

impl WorkerError {
    /// A short machine-readable code for the page.
    pub fn code(&self) -> String {
        use ternflow_core::ErrorCode as C;
        let code = match self {
            WorkerError::Core(e) => return e.code().to_owned(),
            WorkerError::HttpStatus { status, .. } => return format!("http_{status}"),
            WorkerError::Engine(_)
            | WorkerError::BadModel { .. }
            | WorkerError::ModelRefused(_) => C::BadModel,
            WorkerError::Unreachable { .. } => C::Unreachable,
            WorkerError::Timeout { .. } => C::Timeout,
            WorkerError::Aborted(_) => C::Aborted,
            WorkerError::Idb(_) => C::Indexeddb,
            WorkerError::Js(_) => C::Js,
            WorkerError::BadMessage(_) => C::BadMessage,
            WorkerError::BadConfig(_) => C::BadConfig,
            WorkerError::ModelChecksum { .. } => C::ModelChecksum,
        };
        code.as_str().to_owned()
    }

    /// Whether trying again later may succeed (a network failure, a timeout, a 5xx / 408 / 429,
    /// or a pipeline error its own [`is_retryable`](ternflow_core::Error::is_retryable) says
    /// so of); a bad model, bad input or a cancellation is permanent.
    pub fn is_retryable(&self) -> bool {
        match self {
            WorkerError::Core(e) => e.is_retryable(),
            WorkerError::Unreachable { .. } | WorkerError::Timeout { .. } | WorkerError::Idb(_) => {
                true
            }
            WorkerError::HttpStatus { status, .. } => {
                *status >= 500 || *status == 408 || *status == 429
            }
            _ => false,
        }
    }

    /// The URL the failure is about, when there is one (a model download).
    pub fn url(&self) -> Option<&str> {
        match self {
            WorkerError::BadModel { url, .. }
            | WorkerError::HttpStatus { url, .. }
            | WorkerError::Unreachable { url, .. }
            | WorkerError::Timeout { url, .. } => Some(url),
            _ => None,
        }
    }
}

impl From<wasm_bindgen::JsValue> for WorkerError {
    fn from(v: wasm_bindgen::JsValue) -> Self {
        WorkerError::Js(js_message(&v))
    }
}

/// The message of a thrown JS value.
pub fn js_message(v: &wasm_bindgen::JsValue) -> String {
    use wasm_bindgen::JsCast;
    if let Some(e) = v.dyn_ref::<js_sys::Error>() {
        return String::from(e.message());
    }
    v.as_string().unwrap_or_else(|| format!("{v:?}"))
}
