//! Model files from a URL: downloaded with a timeout, progress and cancellation, checked by
//! SHA-256, kept in the Cache API so a reload does not download them again (and evicted when the
//! engine refuses them), then installed in a [`LocalEngine`].

use sha2::{Digest, Sha256};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use crate::cancel::{Cancel, Deadline};
use crate::engine_port::LocalEngine;
use crate::error::{js_message, WorkerError};

const MODEL_CACHE: &str = "ternflow-models";

/// SHA-256 of `bytes`, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
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

/// A model file's bytes and where they came from.
#[derive(Debug)]
pub struct Fetched {
    /// The file.
    pub bytes: Vec<u8>,
    /// `true`: from the Cache API; `false`: downloaded (not stored yet: see [`store_model`]).
    pub from_cache: bool,
}

/// How a model download runs.
pub struct FetchOptions<'a> {
    /// The whole download's limit, ms (`0`: none).
    pub timeout_ms: u64,
    /// The page's cancellation, if it can cancel.
    pub cancel: Option<&'a Cancel>,
    /// Called as bytes arrive: `(loaded, total)` (`total` from `Content-Length`, if sent).
    pub on_progress: &'a dyn Fn(u64, Option<u64>),
}

impl std::fmt::Debug for FetchOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchOptions")
            .field("timeout_ms", &self.timeout_ms)
            .finish_non_exhaustive()
    }
}

/// Fetches a model file: from the Cache API when it holds a copy with the right checksum, else
/// from the network, streamed (progress as it arrives). Nothing is stored here: the caller
/// stores the bytes with [`store_model`] only once the engine has loaded them, so a 404 page, a
/// dev server's HTML or a truncated file never lands in the cache.
///
/// # Errors
/// [`WorkerError::HttpStatus`] for a non-2xx answer, [`WorkerError::Unreachable`],
/// [`WorkerError::Timeout`], [`WorkerError::Aborted`], or [`WorkerError::ModelChecksum`].
pub async fn fetch_model(
    url: &str,
    sha256: Option<&str>,
    opts: &FetchOptions<'_>,
) -> Result<Fetched, WorkerError> {
    let cache = cache_storage().await;
    if let Some(cache) = &cache {
        if let Ok(hit) = JsFuture::from(cache.match_with_str(url)).await {
            if let Ok(resp) = hit.dyn_into::<web_sys::Response>() {
                let bytes = response_bytes(&resp).await?;
                match sha256 {
                    Some(want) if !sha256_hex(&bytes).eq_ignore_ascii_case(want) => {
                        // A stale or corrupt copy: drop it and download again.
                        evict_model(url).await;
                    }
                    _ => {
                        let n = bytes.len() as u64;
                        (opts.on_progress)(n, Some(n));
                        return Ok(Fetched {
                            bytes,
                            from_cache: true,
                        });
                    }
                }
            }
        }
    }
    let bytes = download(url, opts).await?;
    if let Some(want) = sha256 {
        let got = sha256_hex(&bytes);
        if !got.eq_ignore_ascii_case(want) {
            return Err(WorkerError::ModelChecksum {
                expected: want.to_owned(),
                actual: got,
            });
        }
    }
    Ok(Fetched {
        bytes,
        from_cache: false,
    })
}

/// `GET url`, the body read chunk by chunk under one deadline.
async fn download(url: &str, opts: &FetchOptions<'_>) -> Result<Vec<u8>, WorkerError> {
    if let Some(c) = opts.cancel {
        c.check(&format!("GET {url}"))?;
    }
    let deadline = Deadline::new(opts.timeout_ms);
    deadline.attach(opts.cancel);
    let fail = |e: JsValue| -> WorkerError {
        if deadline.timed_out() {
            WorkerError::Timeout {
                url: url.to_owned(),
                ms: deadline.ms(),
            }
        } else if opts.cancel.is_some_and(|c| c.is_cancelled()) {
            WorkerError::Aborted(format!("GET {url}"))
        } else {
            WorkerError::Unreachable {
                url: url.to_owned(),
                message: js_message(&e),
            }
        }
    };
    let init = web_sys::RequestInit::new();
    if let Some(s) = deadline.signal() {
        init.set_signal(Some(&s));
    }
    let scope: web_sys::WorkerGlobalScope = js_sys::global().unchecked_into();
    let resp: web_sys::Response = JsFuture::from(scope.fetch_with_str_and_init(url, &init))
        .await
        .map_err(fail)?
        .unchecked_into();
    if !resp.ok() {
        return Err(WorkerError::HttpStatus {
            url: url.to_owned(),
            status: resp.status(),
        });
    }
    let total = resp
        .headers()
        .get("content-length")
        .ok()
        .flatten()
        .and_then(|v| v.trim().parse::<u64>().ok());
    let Some(body) = resp.body() else {
        return Ok(Vec::new());
    };
    let reader: web_sys::ReadableStreamDefaultReader = body.get_reader().unchecked_into();
    let mut bytes = Vec::with_capacity(total.unwrap_or(0).min(256 << 20) as usize);
    (opts.on_progress)(0, total);
    loop {
        let chunk = JsFuture::from(reader.read()).await.map_err(fail)?;
        let done = js_sys::Reflect::get(&chunk, &JsValue::from_str("done"))
            .map(|d| d.is_truthy())
            .unwrap_or(true);
        if done {
            break;
        }
        let value = js_sys::Reflect::get(&chunk, &JsValue::from_str("value"))?;
        bytes.extend_from_slice(&js_sys::Uint8Array::new(&value).to_vec());
        (opts.on_progress)(bytes.len() as u64, total);
    }
    Ok(bytes)
}

/// Stores a model that loaded, so a reload does not download it again.
pub async fn store_model(url: &str, bytes: &[u8]) {
    if let Some(cache) = cache_storage().await {
        let mut copy = bytes.to_vec();
        if let Ok(r) = web_sys::Response::new_with_opt_u8_array(Some(&mut copy)) {
            let _ = JsFuture::from(cache.put_with_str(url, &r)).await;
        }
    }
}

/// Drops the cached copy of `url` (one that failed to load, or a stale one).
pub async fn evict_model(url: &str) {
    if let Some(cache) = cache_storage().await {
        let _ = JsFuture::from(cache.delete_with_str(url)).await;
    }
}

/// Fetches, loads and (when it loaded) caches the model at `url`; resolves to its model id. A
/// copy that fails to load is evicted from the cache.
///
/// # Errors
/// As [`fetch_model`], or [`WorkerError::BadModel`] naming the URL.
pub async fn load_model_from(
    engine: &LocalEngine,
    url: &str,
    sha256: Option<&str>,
    opts: &FetchOptions<'_>,
) -> Result<String, WorkerError> {
    let fetched = fetch_model(url, sha256, opts).await?;
    let from_cache = fetched.from_cache;
    let bytes = fetched.bytes;
    let refused = match engine.install(&bytes).await {
        Ok(id) => {
            if !from_cache {
                store_model(url, &bytes).await;
            }
            return Ok(id);
        }
        Err(WorkerError::ModelRefused(m)) => m,
        Err(WorkerError::Engine(e)) => e.to_string(),
        Err(e) => return Err(e),
    };
    evict_model(url).await;
    Err(WorkerError::BadModel {
        url: url.to_owned(),
        message: refused,
    })
}
