//! The browser's adapters, assembled: which type implements each port of the pipeline, and how
//! a pipeline is built from them. The message dispatch that uses it is [`crate::worker`].

use ternflow_core::messages::ServerOptions;
use ternflow_core::ports::Clock;
use ternflow_core::{Adapters, Config, Pipeline, Ports};

use crate::clock::BrowserClock;
use crate::engine_port::LocalEngine;
use crate::error::WorkerError;
use crate::http::{HttpClient, TokenSource};
use crate::local::AnyLocal;

/// The browser's adapter types.
#[derive(Debug)]
pub struct Browser;

impl Ports for Browser {
    type Source = HttpClient;
    type Local = AnyLocal;
    type Remote = HttpClient;
    type Locks = HttpClient;
    type Engine = LocalEngine;
    type Backend = HttpClient;
    type Clock = BrowserClock;
}

/// A pipeline over the browser adapters: the server client (queue, remote cache, locks,
/// backend), IndexedDB where there is one (else memory) under a memory layer of `max_bytes`, the
/// engine, the browser clock. `tokens` renews a token the server refuses as expired.
///
/// # Errors
/// When IndexedDB exists but cannot be opened.
pub async fn pipeline(
    server: Option<&ServerOptions>,
    engine: LocalEngine,
    cfg: Config,
    db_name: &str,
    max_local_entries: u32,
    max_bytes: usize,
    tokens: Option<TokenSource>,
) -> Result<Pipeline<Browser>, WorkerError> {
    let mut cfg = cfg;
    if cfg.seed == 0 {
        // Entropy from the platform: workers started in the same millisecond (several tabs, or
        // a fleet of isolates) must not share jitter or trace ids.
        cfg.seed =
            (js_sys::Math::random() * 9_007_199_254_740_992.0) as u64 ^ BrowserClock.now_ms();
    }
    if cfg.worker_id.is_empty() {
        // Each worker its own name, so snapshots and attempt histories tell workers apart.
        cfg.worker_id = format!(
            "w-{:08x}",
            (js_sys::Math::random() * 4_294_967_296.0) as u64
        );
    }
    let client = crate::http::client(
        server.map(|s| s.url.as_str()),
        server.map_or("", |s| s.token.as_str()),
        &cfg.worker_id,
    );
    client.set_claim_model(ternflow_core::ports::Embedder::model_id(&engine));
    if let Some(t) = tokens {
        client.set_token_source(t);
    }
    let local = AnyLocal::open(db_name, max_local_entries, max_bytes).await?;
    Ok(Pipeline::new(
        Adapters {
            source: client.clone(),
            local,
            remote: client.clone(),
            locks: client.clone(),
            engine,
            backend: client,
            clock: BrowserClock,
        },
        cfg,
    ))
}
