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

use crate::cancel::{Cancel, Deadline};
use crate::engine_worker::{EngineWorker, Gone, LoadError};
use crate::error::{js_message, WorkerError};

const MODEL_CACHE: &str = "ternflow-models";

/// The engine slot: empty until a model is loaded. Clones share the slot.
///
/// The model runs in an engine worker of its own (see [`crate::engine_worker`]) when a worker
/// factory was given ([`LocalEngine::set_worker_factory`]: `www/worker.js` does) and the worker
/// starts; else, or once that worker failed, on this thread.
#[derive(Debug, Clone, Default)]
pub struct LocalEngine {
    slot: Rc<RefCell<Option<Engine>>>,
    /// The engine worker running the model, while it runs in one.
    offload: Rc<RefCell<Option<Offload>>>,
    /// Starts an engine worker; `None`: the model runs on this thread.
    factory: Rc<RefCell<Option<js_sys::Function>>>,
    /// Silence after which an engine worker is deemed hung, ms (`None`: the default).
    deadline_ms: Rc<std::cell::Cell<Option<u64>>>,
    /// Test hook: when set, every embed fails (an engine that cannot run).
    fail: Rc<std::cell::Cell<bool>>,
}

#[derive(Debug)]
struct Offload {
    worker: Rc<EngineWorker>,
    model_id: String,
    /// The model file, kept outside wasm memory: should the worker fail, this thread loads it.
    bytes: js_sys::Uint8Array,
}

/// Where the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineThread {
    /// No model is loaded.
    None,
    /// In the engine worker.
    Worker,
    /// On this thread.
    Inline,
}

impl LocalEngine {
    /// An empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    /// Lets models loaded with [`LocalEngine::install`] run in a worker made by `factory` (a JS
    /// function returning a `Worker` running `www/engine-worker.js`); `None`: on this thread.
    pub fn set_worker_factory(&self, factory: Option<js_sys::Function>) {
        *self.factory.borrow_mut() = factory;
    }

    /// How long an engine worker started from now on may stay silent while it owes an answer
    /// before it is deemed hung and the model moves to this thread, ms (default
    /// [`DEADLINE_MS`](crate::engine_worker::DEADLINE_MS)).
    pub fn set_worker_deadline_ms(&self, ms: u64) {
        self.deadline_ms.set(Some(ms));
    }

    /// Loads a TERN v1 model from bytes on this thread, replacing any loaded one; returns its
    /// model id.
    ///
    /// # Errors
    /// [`WorkerError::Engine`] when the file is not a valid model.
    pub fn load(&self, bytes: &[u8]) -> Result<String, WorkerError> {
        let engine = Engine::from_bytes(bytes)?;
        let id = engine.model_id().to_owned();
        self.set(engine);
        Ok(id)
    }

    /// Loads a TERN v1 model, replacing any loaded one: in the engine worker when there is a
    /// factory (a worker that cannot start or answer leaves the model on this thread), else on
    /// this thread. Returns its model id.
    ///
    /// # Errors
    /// [`WorkerError::ModelRefused`] (engine worker) or [`WorkerError::Engine`] (this thread)
    /// when the file is not a valid model.
    pub async fn install(&self, bytes: &[u8]) -> Result<String, WorkerError> {
        let factory = self.factory.borrow().clone();
        let Some(factory) = factory else {
            return self.load(bytes);
        };
        let current = self.offload.borrow().as_ref().map(|o| o.worker.clone());
        let worker = match current.filter(|w| w.gone().is_none()) {
            Some(w) => Ok(w),
            None => EngineWorker::spawn(
                &factory,
                self.deadline_ms
                    .get()
                    .unwrap_or(crate::engine_worker::DEADLINE_MS),
            )
            .map(Rc::new),
        };
        let gone = match worker {
            Ok(worker) => {
                let kept = js_sys::Uint8Array::from(bytes);
                match worker.load(&kept).await {
                    Ok(loaded) => {
                        let id = loaded.model_id.clone();
                        *self.slot.borrow_mut() = None;
                        *self.offload.borrow_mut() = Some(Offload {
                            worker,
                            model_id: loaded.model_id,
                            bytes: kept,
                        });
                        return Ok(id);
                    }
                    Err(LoadError::Refused(m)) => return Err(WorkerError::ModelRefused(m)),
                    Err(LoadError::Gone(g)) => g,
                }
            }
            Err(g) => g,
        };
        warn(&format!("{gone}; the model runs on the pipeline's thread"));
        self.load(bytes)
    }

    /// Makes `engine` the loaded one (on this thread).
    pub fn set(&self, engine: Engine) {
        *self.offload.borrow_mut() = None;
        *self.slot.borrow_mut() = Some(engine);
    }

    /// Drops the loaded model.
    pub fn unload(&self) {
        *self.offload.borrow_mut() = None;
        *self.slot.borrow_mut() = None;
    }

    /// Where the model runs now.
    pub fn thread(&self) -> EngineThread {
        if self.offload.borrow().is_some() {
            EngineThread::Worker
        } else if self.slot.borrow().is_some() {
            EngineThread::Inline
        } else {
            EngineThread::None
        }
    }

    /// The engine worker's wasm memory, bytes, while the model runs in one.
    pub fn worker_memory_bytes(&self) -> Option<f64> {
        self.offload
            .borrow()
            .as_ref()
            .map(|o| o.worker.memory_bytes())
    }

    /// Terminates the engine worker, as if it had crashed (the next embed moves the model to this
    /// thread; the tests use it); `false` when there is none.
    pub fn kill_worker(&self) -> bool {
        match self.offload.borrow().as_ref() {
            Some(o) => {
                o.worker.terminate("terminated on request");
                true
            }
            None => false,
        }
    }

    /// Makes every embed fail (`true`) or work again (`false`): a stand-in for an engine that
    /// traps, used by the fallback tests.
    pub fn set_failing(&self, fail: bool) {
        self.fail.set(fail);
    }

    /// Runs `f` on the engine loaded on this thread (`None` while there is none, or while the model
    /// runs in the engine worker).
    pub fn with<T>(&self, f: impl FnOnce(&mut Engine) -> T) -> Option<T> {
        self.slot.borrow_mut().as_mut().map(f)
    }

    /// The engine worker failed (`gone`): load its model on this thread, once.
    fn take_back(&self, worker: &Rc<EngineWorker>, gone: &Gone) -> Result<(), Error> {
        let offload = self
            .offload
            .borrow_mut()
            .take_if(|o| Rc::ptr_eq(&o.worker, worker));
        if let Some(o) = offload {
            warn(&format!("{gone}; the model moves to the pipeline's thread"));
            let engine = Engine::from_vec(o.bytes.to_vec())
                .map_err(|e| Error::Engine(format!("reloading after {gone}: {e}")))?;
            *self.slot.borrow_mut() = Some(engine);
        }
        Ok(())
    }
}

fn warn(msg: &str) {
    web_sys::console::warn_1(&JsValue::from_str(&format!("ternflow: {msg}")));
}

impl Embedder for LocalEngine {
    fn model_id(&self) -> Option<String> {
        if let Some(o) = self.offload.borrow().as_ref() {
            return Some(o.model_id.clone());
        }
        self.slot.borrow().as_ref().map(|e| e.model_id().to_owned())
    }

    async fn embed(&self, text: &str, _trace: &str) -> Result<Vec<f32>> {
        if self.fail.get() {
            return Err(Error::Engine("engine failing (test hook)".into()));
        }
        let worker = self.offload.borrow().as_ref().map(|o| o.worker.clone());
        if let Some(w) = worker {
            match w.embed(text).await {
                Ok(v) => return Ok(v),
                // Nothing is lost: the text is embedded here instead.
                Err(gone) => self.take_back(&w, &gone)?,
            }
        }
        self.with(|e| e.embed(text))
            .ok_or_else(|| Error::Engine("no model loaded".into()))
    }
}

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
