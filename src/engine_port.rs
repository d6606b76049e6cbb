//! The in-wasm engine as the pipeline's [`Embedder`], and model loading from bytes or a URL
//! (cached with the Cache API so a reload does not download it again; checked by SHA-256).

use std::cell::RefCell;
use std::rc::Rc;

use sha2::{Digest, Sha256};
use ternflow_core::ports::Embedder;
use ternflow_core::{Error, Result};
use ternflow_engine::Engine;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use crate::error::WorkerError;

const MODEL_CACHE: &str = "ternflow-models";

/// The engine slot: empty until a model is loaded. Clones share the slot.
#[derive(Debug, Clone, Default)]
pub struct LocalEngine {
    slot: Rc<RefCell<Option<Engine>>>,
    /// Test hook: when set, every embed fails (an engine that cannot run).
    fail: Rc<std::cell::Cell<bool>>,
}

impl LocalEngine {
    /// An empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    /// Loads a TERN v1 model from bytes, replacing any loaded one; returns its model id.
    ///
    /// # Errors
    /// [`WorkerError::Engine`] when the file is not a valid model.
    pub fn load(&self, bytes: &[u8]) -> Result<String, WorkerError> {
        let engine = Engine::from_bytes(bytes)?;
        let id = engine.model_id().to_owned();
        *self.slot.borrow_mut() = Some(engine);
        Ok(id)
    }

    /// Drops the loaded model.
    pub fn unload(&self) {
        *self.slot.borrow_mut() = None;
    }

    /// Makes every embed fail (`true`) or work again (`false`): a stand-in for an engine that
    /// traps, used by the fallback tests.
    pub fn set_failing(&self, fail: bool) {
        self.fail.set(fail);
    }

    /// Runs `f` on the loaded engine.
    pub fn with<T>(&self, f: impl FnOnce(&mut Engine) -> T) -> Option<T> {
        self.slot.borrow_mut().as_mut().map(f)
    }
}

impl Embedder for LocalEngine {
    fn model_id(&self) -> Option<String> {
        self.slot.borrow().as_ref().map(|e| e.model_id().to_owned())
    }

    async fn embed(&self, text: &str, _trace: &str) -> Result<Vec<f32>> {
        if self.fail.get() {
            return Err(Error::Engine("engine failing (test hook)".into()));
        }
        self.with(|e| e.embed(text))
            .ok_or_else(|| Error::Engine("no model loaded".into()))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of `bytes`, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

async fn cache_storage() -> Option<web_sys::Cache> {
    let caches = js_sys::Reflect::get(&js_sys::global(), &JsValue::from_str("caches")).ok()?;
    let caches: web_sys::CacheStorage = caches.dyn_into().ok()?;
    let cache = JsFuture::from(caches.open(MODEL_CACHE)).await.ok()?;
    cache.dyn_into().ok()
}

async fn response_bytes(resp: &web_sys::Response) -> Result<Vec<u8>, WorkerError> {
    let buf = JsFuture::from(resp.array_buffer()?).await?;
    Ok(js_sys::Uint8Array::new(&buf).to_vec())
}

/// Fetches a model file, from the Cache API when it holds a copy with the right checksum, else
/// from the network (then stores it in the cache). `sha256` (hex), when given, must match.
///
/// # Errors
/// Network failures, a non-2xx answer, or a checksum mismatch.
pub async fn fetch_model(url: &str, sha256: Option<&str>) -> Result<Vec<u8>, WorkerError> {
    let cache = cache_storage().await;
    if let Some(cache) = &cache {
        if let Ok(hit) = JsFuture::from(cache.match_with_str(url)).await {
            if let Ok(resp) = hit.dyn_into::<web_sys::Response>() {
                let bytes = response_bytes(&resp).await?;
                match sha256 {
                    Some(want) if !sha256_hex(&bytes).eq_ignore_ascii_case(want) => {
                        // A stale or corrupt copy: drop it and download again.
                        let _ = JsFuture::from(cache.delete_with_str(url)).await;
                    }
                    _ => return Ok(bytes),
                }
            }
        }
    }
    let resp = gloo_net::http::Request::get(url)
        .send()
        .await
        .map_err(|e| WorkerError::Core(Error::Unreachable(e.to_string())))?;
    if !resp.ok() {
        return Err(WorkerError::Js(format!(
            "GET {url}: HTTP {}",
            resp.status()
        )));
    }
    let bytes = resp
        .binary()
        .await
        .map_err(|e| WorkerError::Js(e.to_string()))?;
    if let Some(want) = sha256 {
        let got = sha256_hex(&bytes);
        if !got.eq_ignore_ascii_case(want) {
            return Err(WorkerError::ModelChecksum {
                expected: want.to_owned(),
                actual: got,
            });
        }
    }
    if let Some(cache) = &cache {
        let mut copy = bytes.clone();
        if let Ok(r) = web_sys::Response::new_with_opt_u8_array(Some(&mut copy)) {
            let _ = JsFuture::from(cache.put_with_str(url, &r)).await;
        }
    }
    Ok(bytes)
}
