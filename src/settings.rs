//! The page's `config` object: the pipeline's [`Config`] plus this adapter's own settings
//! (timeouts of the HTTP client, the in-memory cache's byte bound), with unknown keys refused so
//! that a typo does not pass silently.

use ternflow_core::Config;

use crate::error::WorkerError;

/// Settings of this adapter (not of the pipeline) that `config` may carry.
#[derive(Debug, Clone, Copy)]
pub struct AdapterConfig {
    /// Limit of one request to the server, ms (a claim adds its long-poll wait).
    pub request_timeout_ms: u64,
    /// Limit of a whole model download, ms.
    pub model_timeout_ms: u64,
    /// Byte bound of the in-memory cache (the edge's only local tier; the hot tier in front of
    /// IndexedDB is at most [`HOT_BYTES`](crate::local::HOT_BYTES) of it).
    pub memory_cache_bytes: usize,
    /// Whether the model runs in an engine worker of its own (where the worker can start one),
    /// so embeds never hold the thread the pipeline's network and IndexedDB work runs on.
    pub engine_worker: bool,
}

const ADAPTER_KEYS: [&str; 4] = [
    "requestTimeoutMs",
    "modelTimeoutMs",
    "memoryCacheBytes",
    "engineWorker",
];

impl Default for AdapterConfig {
    fn default() -> Self {
        AdapterConfig {
            request_timeout_ms: 30_000,
            model_timeout_ms: 120_000,
            memory_cache_bytes: ternflow_core::cache::mem_local::DEFAULT_MAX_BYTES,
            engine_worker: true,
        }
    }
}

/// Splits the page's `config` into the pipeline's [`Config`] and the adapter's settings,
/// refusing keys that no setting has (a typo would otherwise pass silently).
pub fn parse_config(v: Option<serde_json::Value>) -> Result<(Config, AdapterConfig), WorkerError> {
    let mut adapter = AdapterConfig::default();
    let Some(mut v) = v else {
        return Ok((Config::default(), adapter));
    };
    let known = serde_json::to_value(Config::default())
        .map_err(|e| WorkerError::BadConfig(e.to_string()))?;
    let serde_json::Value::Object(obj) = &mut v else {
        return Err(WorkerError::BadConfig("expected an object".into()));
    };
    for key in ADAPTER_KEYS {
        if let Some(x) = obj.remove(key) {
            if key == "engineWorker" {
                adapter.engine_worker = x
                    .as_bool()
                    .ok_or_else(|| WorkerError::BadConfig(format!("`{key}` must be a boolean")))?;
                continue;
            }
            let n = x
                .as_u64()
                .ok_or_else(|| WorkerError::BadConfig(format!("`{key}` must be a whole number")))?;
            match key {
                "requestTimeoutMs" => adapter.request_timeout_ms = n,
                "modelTimeoutMs" => adapter.model_timeout_ms = n,
                _ => adapter.memory_cache_bytes = usize::try_from(n).unwrap_or(usize::MAX),
            }
        }
    }
    unknown_keys(obj, &known, "")?;
    let cfg = serde_json::from_value(v).map_err(|e| WorkerError::BadConfig(e.to_string()))?;
    Ok((cfg, adapter))
}

fn unknown_keys(
    given: &serde_json::Map<String, serde_json::Value>,
    known: &serde_json::Value,
    prefix: &str,
) -> Result<(), WorkerError> {
    for (k, v) in given {
        let Some(kv) = known.get(k) else {
            let mut names: Vec<&str> = known
                .as_object()
                .map(|o| o.keys().map(String::as_str).collect())
                .unwrap_or_default();
            if prefix.is_empty() {
                names.extend(ADAPTER_KEYS);
            }
            return Err(WorkerError::BadConfig(format!(
                "unknown key `{prefix}{k}` (known: {})",
                names.join(", ")
            )));
        };
        if let (serde_json::Value::Object(g), true) = (v, kv.is_object()) {
            unknown_keys(g, kv, &format!("{prefix}{k}."))?;
        }
    }
    Ok(())
}
