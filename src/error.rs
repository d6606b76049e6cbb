//! The root crate's one error enum. Converted to `JsError` / an error message only at the
//! `#[wasm_bindgen]` and `postMessage` boundaries.

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
    /// IndexedDB failed.
    #[error(transparent)]
    Idb(#[from] crate::idb::IdbError),
    /// A JS call threw.
    #[error("js: {0}")]
    Js(String),
    /// The page sent a message that is not a `ToWorker`.
    #[error("bad message: {0}")]
    BadMessage(String),
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
        match self {
            WorkerError::Core(e) => e.code().to_owned(),
            WorkerError::Engine(_) => "bad_model".into(),
            WorkerError::Idb(_) => "indexeddb".into(),
            WorkerError::Js(_) => "js".into(),
            WorkerError::BadMessage(_) => "bad_message".into(),
            WorkerError::ModelChecksum { .. } => "model_checksum".into(),
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
