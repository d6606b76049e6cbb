//! The in-wasm engine as the pipeline's [`Embedder`]: the engine slot, and where the model runs
//! (an engine worker of its own, or this thread). Getting a model's bytes from a URL is
//! [`crate::model_fetch`]'s.

use std::cell::RefCell;
use std::rc::Rc;

use ternflow_core::ports::Embedder;
use ternflow_core::protocol::TextInfo;
use ternflow_core::{Error, Result};
use ternflow_engine::Engine;
use wasm_bindgen::JsValue;

use crate::engine_worker::{EngineWorker, Gone, LoadError};
use crate::error::WorkerError;

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

    async fn embed(&self, text: &str, trace: &str) -> Result<Vec<f32>> {
        self.embed_with(text, None, trace).await
    }

    async fn embed_with(
        &self,
        text: &str,
        max_tokens: Option<u32>,
        _trace: &str,
    ) -> Result<Vec<f32>> {
        if self.fail.get() {
            return Err(Error::Engine("engine failing (test hook)".into()));
        }
        let worker = self.offload.borrow().as_ref().map(|o| o.worker.clone());
        if let Some(w) = worker {
            match w.embed(text, max_tokens).await {
                Ok(v) => return Ok(v),
                // Nothing is lost: the text is embedded here instead.
                Err(gone) => self.take_back(&w, &gone)?,
            }
        }
        self.with(|e| {
            let mut v = vec![0.0; e.output_dim()];
            e.embed_with(text, options(max_tokens), &mut v);
            v
        })
        .ok_or_else(|| Error::Engine("no model loaded".into()))
    }

    fn cuts(&self) -> bool {
        self.offload.borrow().is_some() || self.slot.borrow().is_some()
    }

    async fn info(&self, texts: &[&str], max_tokens: Option<u32>) -> Option<Vec<TextInfo>> {
        let worker = self.offload.borrow().as_ref().map(|o| o.worker.clone());
        if let Some(w) = worker {
            match w.count(texts, max_tokens).await {
                Ok(info) => return Some(info),
                // Counting is not worth moving the model for: the embeds that follow will.
                Err(_) => return None,
            }
        }
        self.with(|e| {
            texts
                .iter()
                .map(|t| text_info(e.info(t, options(max_tokens))))
                .collect()
        })
    }
}

/// The engine's options for a word-piece limit.
pub(crate) fn options(max_tokens: Option<u32>) -> ternflow_engine::EmbedOptions {
    ternflow_engine::EmbedOptions {
        max_tokens: max_tokens.map(|m| m as usize),
    }
}

/// The engine's account of an embed as the protocol's.
pub(crate) fn text_info(i: ternflow_engine::EmbedInfo) -> TextInfo {
    TextInfo {
        tokens: u32::try_from(i.tokens).unwrap_or(u32::MAX),
        chunks: u32::try_from(i.chunks).unwrap_or(u32::MAX),
        truncated: i.truncated,
    }
}
