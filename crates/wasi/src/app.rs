//! The pipeline over the WASI adapters: the `wasi:http` client for the queue, the remote cache,
//! the locks and the backend; core's in-memory cache ([`MemLocal`]) as the local level; the
//! engine inside; `wasi:clocks` for time. Shared by the worker and the HTTP handler.

use std::time::Instant;

use sha2::{Digest, Sha256};
use ternflow_core::cache::mem_local::MemLocal;
use ternflow_core::ports::Embedder;
use ternflow_core::{Adapters, Pipeline, Ports};

use crate::clock::WasiClock;
use crate::engine::InWasmEngine;
use crate::http::{HttpClient, WasiHttp};
use crate::settings::{ModelSource, Settings};

/// The WASI adapter types.
#[derive(Debug)]
pub struct Wasi;

impl Ports for Wasi {
    type Source = HttpClient;
    type Local = MemLocal;
    type Remote = HttpClient;
    type Locks = HttpClient;
    type Engine = InWasmEngine;
    type Backend = HttpClient;
    type Clock = WasiClock;
}

/// What starting an instance did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Started {
    /// The worker's name.
    pub worker: String,
    /// The engine's model id (none in a backend-only build).
    pub model_id: Option<String>,
    /// Whether this build carries the engine.
    pub engine: bool,
    /// Size of the model file loaded, bytes.
    pub model_bytes: usize,
    /// Linear memory before the model was loaded, bytes.
    pub memory_before_model: usize,
    /// Linear memory once ready, bytes.
    pub memory_bytes: usize,
    /// Time from the start of [`build`] to ready (model read and loaded), ms.
    pub init_ms: f64,
}

/// Bytes of this instance's linear memory.
pub fn memory_bytes() -> usize {
    core::arch::wasm32::memory_size(0) * 65_536
}

#[cfg(feature = "p2")]
fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    wstd::rand::get_random_bytes(&mut b);
    u64::from_le_bytes(b)
}

#[cfg(feature = "p3")]
fn random_u64() -> u64 {
    wasip3::random::random::get_random_u64()
}

/// Builds the pipeline from `settings`, loading the model (unless backend-only).
///
/// # Errors
/// A message when the model cannot be read, fetched, checked or loaded.
pub async fn build(settings: &Settings, worker: &str) -> Result<(Pipeline<Wasi>, Started), String> {
    let t0 = Instant::now();
    let mut cfg = settings.config.clone();
    if cfg.seed == 0 {
        cfg.seed = random_u64();
    }
    if cfg.worker_id.is_empty() {
        cfg.worker_id = format!("{worker}-{:08x}", random_u64() as u32);
    }
    let client = HttpClient::new(
        WasiHttp::new(
            settings.server.as_deref(),
            &settings.token,
            settings.request_timeout_ms,
        ),
        &cfg.worker_id,
    );
    let engine = InWasmEngine::default();
    let memory_before_model = memory_bytes();
    let mut model_bytes = 0;
    if InWasmEngine::BUILT_IN {
        let bytes = match &settings.model {
            ModelSource::File(path) => {
                std::fs::read(path).map_err(|e| format!("model {path}: {e}"))?
            }
            ModelSource::Url(url) => client
                .download(url)
                .await
                .map_err(|e| format!("model {url}: {e}"))?,
            ModelSource::None => {
                return Err(
                    "no model: set TERNFLOW_MODEL, TERNFLOW_MODEL_URL or TERNFLOW_SERVER".into(),
                )
            }
        };
        if let Some(want) = &settings.model_sha256 {
            let got: String = Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            if &got != want {
                return Err(format!("model checksum: expected {want}, got {got}"));
            }
        }
        model_bytes = bytes.len();
        engine.load(bytes)?;
    }
    client.set_claim_model(engine.model_id());
    let started = Started {
        worker: cfg.worker_id.clone(),
        model_id: engine.model_id(),
        engine: InWasmEngine::BUILT_IN,
        model_bytes,
        memory_before_model,
        memory_bytes: memory_bytes(),
        init_ms: t0.elapsed().as_secs_f64() * 1e3,
    };
    let p = Pipeline::new(
        Adapters {
            source: client.clone(),
            local: MemLocal::new(settings.local_bytes, settings.local_entries),
            remote: client.clone(),
            locks: client.clone(),
            engine,
            backend: client,
            clock: WasiClock,
        },
        cfg,
    );
    Ok((p, started))
}
