//! The engine in a dedicated worker of its own, nested in the pipeline's worker
//! (`www/engine-worker.js`), so that an embed never holds the thread the pipeline's network and
//! IndexedDB callbacks run on: while the engine works on one batch, the pipeline claims the next,
//! reads its cache entries and acks the last one.
//!
//! Texts asked for in the same turn of the event loop travel together, at most
//! [`TEXTS_PER_MESSAGE`] per message (so vectors stream back while a big batch is still being
//! embedded); each message's vectors come back as one transferred `Float32Array`.
//!
//! Messages: [`ToEngine`] and [`FromEngine`] (core's `messages`), read on the other side by the
//! wasm's `engineHandle` ([`crate::engine_entry`]). Before them the factory in `www/worker.js`
//! sends `{type: "init", module}`: the compiled `WebAssembly.Module`, so the wasm is neither
//! fetched nor compiled twice.
//!
//! A worker that errors, breaks, or stays silent for [`DEADLINE_MS`] while it owes an answer is
//! terminated and every text waiting on it is answered with [`Gone`]; its owner
//! ([`crate::engine_port::LocalEngine`]) then embeds on its own thread, so nothing waiting is lost.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use futures_channel::oneshot;
use futures_util::future::{select, Either};
use serde::Serialize;
use ternflow_core::messages::{FromEngine, ToEngine};
use ternflow_core::ports::Clock;
use ternflow_core::protocol::TextInfo;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::clock::BrowserClock;
use crate::error::js_message;

/// Texts per message at most. With a concurrency of 64 or more, two or more messages are in
/// flight, so the engine has the next one queued while the pipeline claims, reads and acks; 64
/// at a concurrency of 64 (the whole window in one message) measured 76–81 % of the bare engine
/// instead of 90–97 % (docs/worker.md).
pub const TEXTS_PER_MESSAGE: usize = 32;
/// How long the engine worker may stay silent while it owes an answer before it is deemed hung,
/// ms, unless [`EngineWorker::spawn`] is given another. Silence, not the wait of one text: a text
/// queued behind a long backlog waits as long as the worker keeps answering the messages before
/// it.
pub const DEADLINE_MS: u64 = 30_000;

/// Why the engine worker cannot answer (it failed to start, threw, or hung): retry elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gone(pub String);

impl std::fmt::Display for Gone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "engine worker: {}", self.0)
    }
}

/// Why a model did not load in the engine worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// The engine rejected the bytes (its message): permanent for these bytes.
    Refused(String),
    /// The worker cannot answer.
    Gone(Gone),
}

/// A model the engine worker holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// Its model id.
    pub model_id: String,
    /// Length of its vectors.
    pub dim: usize,
}

type VectorReply = oneshot::Sender<Result<Vec<f32>, Gone>>;

/// A text asked for this turn: the text, its word-piece limit, where its vector goes.
type Queued = (String, Option<u32>, VectorReply);

enum Waiter {
    Load(oneshot::Sender<Result<Loaded, LoadError>>),
    Embed(Vec<VectorReply>),
    Count(oneshot::Sender<Result<Vec<TextInfo>, Gone>>),
}

struct Inner {
    worker: web_sys::Worker,
    next_id: Cell<u32>,
    waiting: RefCell<HashMap<u32, Waiter>>,
    /// Texts asked for in this turn, not yet posted.
    queued: RefCell<Vec<Queued>>,
    flush_scheduled: Cell<bool>,
    gone: RefCell<Option<Gone>>,
    dim: Cell<usize>,
    /// The engine worker's wasm memory, bytes, as it last reported.
    memory_bytes: Cell<f64>,
    /// When the worker last answered, or was sent work while it owed nothing (ms).
    last_progress: Cell<u64>,
    /// Silence that makes it hung, ms.
    deadline_ms: u64,
}

/// The engine worker (see the [module docs](self)). Dropping it terminates the worker.
pub struct EngineWorker {
    inner: Rc<Inner>,
    _on_message: Closure<dyn FnMut(web_sys::MessageEvent)>,
    _on_error: Closure<dyn FnMut(web_sys::Event)>,
}

impl std::fmt::Debug for EngineWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineWorker")
            .field("waiting", &self.inner.waiting.borrow().len())
            .field("gone", &*self.inner.gone.borrow())
            .finish_non_exhaustive()
    }
}

impl Inner {
    /// Registers a request awaiting its answer; the silence clock starts if none was owed.
    fn expect(&self, id: u32, w: Waiter) {
        let mut waiting = self.waiting.borrow_mut();
        if waiting.is_empty() {
            self.last_progress.set(BrowserClock.now_ms());
        }
        waiting.insert(id, w);
    }

    fn id(&self) -> u32 {
        let id = self.next_id.get().wrapping_add(1);
        self.next_id.set(id);
        id
    }

    fn post(&self, msg: &JsValue, transfer: Option<&js_sys::Array>) -> Result<(), Gone> {
        let r = match transfer {
            Some(t) => self.worker.post_message_with_transfer(msg, t),
            None => self.worker.post_message(msg),
        };
        r.map_err(|e| Gone(format!("postMessage: {}", js_message(&e))))
    }

    /// Terminates the worker and answers everything waiting on it with `why`.
    fn kill(&self, why: Gone) {
        if self.gone.borrow().is_none() {
            self.worker.terminate();
            *self.gone.borrow_mut() = Some(why.clone());
        }
        // The first reason stands; whatever still waits (a late flush) is answered with it.
        let why = self.gone.borrow().clone().unwrap_or(why);
        let waiting: Vec<Waiter> = self.waiting.borrow_mut().drain().map(|(_, w)| w).collect();
        let queued: Vec<Queued> = self.queued.borrow_mut().drain(..).collect();
        for w in waiting {
            match w {
                Waiter::Load(tx) => {
                    let _ = tx.send(Err(LoadError::Gone(why.clone())));
                }
                Waiter::Count(tx) => {
                    let _ = tx.send(Err(why.clone()));
                }
                Waiter::Embed(txs) => {
                    for tx in txs {
                        let _ = tx.send(Err(why.clone()));
                    }
                }
            }
        }
        for (_, _, tx) in queued {
            let _ = tx.send(Err(why.clone()));
        }
    }

    /// Posts the texts queued this turn, [`TEXTS_PER_MESSAGE`] per message (texts of one
    /// word-piece limit in a message, in the order asked).
    fn flush(&self) {
        self.flush_scheduled.set(false);
        if let Some(g) = self.gone.borrow().clone() {
            self.kill(g);
            return;
        }
        let queued: Vec<Queued> = self.queued.borrow_mut().drain(..).collect();
        let mut rest = queued.into_iter().peekable();
        while let Some((_, max_tokens, _)) = rest.peek() {
            let max_tokens = *max_tokens;
            let mut texts = Vec::new();
            let mut replies = Vec::new();
            while texts.len() < TEXTS_PER_MESSAGE {
                match rest.next_if(|(_, m, _)| *m == max_tokens) {
                    Some((t, _, tx)) => {
                        texts.push(t);
                        replies.push(tx);
                    }
                    None => break,
                }
            }
            let id = self.id();
            let msg = to_js(&ToEngine::Embed {
                id,
                texts,
                max_tokens,
            });
            self.expect(id, Waiter::Embed(replies));
            if let Err(g) = self.post(&msg, None) {
                self.kill(g);
                return;
            }
        }
    }

    fn receive(&self, data: &JsValue) {
        self.last_progress.set(BrowserClock.now_ms());
        // The vectors (a typed array) are taken off before serde reads the rest: an internally
        // tagged enum would buffer them number by number.
        let vectors = js_sys::Reflect::get(data, &"vectors".into()).ok();
        if let Some(o) = data.dyn_ref::<js_sys::Object>() {
            let _ = js_sys::Reflect::delete_property(o, &"vectors".into());
        }
        let msg = match serde_wasm_bindgen::from_value::<FromEngine>(data.clone()) {
            Ok(msg) => msg,
            Err(e) => return self.kill(Gone(format!("not an engine reply: {e}"))),
        };
        let (id, waiter) = match &msg {
            FromEngine::Broken { message } => return self.kill(Gone(message.clone())),
            FromEngine::Loaded {
                id, memory_bytes, ..
            }
            | FromEngine::Embedded { id, memory_bytes } => {
                self.memory_bytes.set(*memory_bytes);
                (*id, self.waiting.borrow_mut().remove(id))
            }
            FromEngine::Refused { id, .. } | FromEngine::Counted { id, .. } => {
                (*id, self.waiting.borrow_mut().remove(id))
            }
        };
        let Some(waiter) = waiter else {
            return;
        };
        match (msg, waiter) {
            (FromEngine::Loaded { model_id, dim, .. }, Waiter::Load(tx)) => {
                self.dim.set(dim as usize);
                let _ = tx.send(Ok(Loaded {
                    model_id,
                    dim: dim as usize,
                }));
            }
            (FromEngine::Refused { message, .. }, Waiter::Load(tx)) => {
                let _ = tx.send(Err(LoadError::Refused(message)));
            }
            (FromEngine::Embedded { .. }, Waiter::Embed(txs)) => {
                let all = vectors
                    .and_then(|v| v.dyn_into::<js_sys::Float32Array>().ok())
                    .map(|a| a.to_vec())
                    .unwrap_or_default();
                let dim = self.dim.get();
                if dim == 0 || all.len() != dim * txs.len() {
                    let why = Gone(format!(
                        "answered {} values for {} texts of dimension {dim}",
                        all.len(),
                        txs.len()
                    ));
                    for tx in txs {
                        let _ = tx.send(Err(why.clone()));
                    }
                    self.kill(why);
                    return;
                }
                for (tx, v) in txs.into_iter().zip(all.chunks_exact(dim)) {
                    let _ = tx.send(Ok(v.to_vec()));
                }
            }
            (FromEngine::Counted { info, .. }, Waiter::Count(tx)) => {
                let _ = tx.send(Ok(info));
            }
            (other, _) => self.kill(Gone(format!("unexpected answer {other:?} to request {id}"))),
        }
    }
}

/// `msg` as a JS object.
fn to_js(msg: &ToEngine) -> JsValue {
    msg.serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .unwrap_or(JsValue::NULL)
}

/// Waits for `rx`; when the worker has owed answers for its deadline without giving any, it is
/// deemed hung.
async fn answer<T>(inner: &Rc<Inner>, rx: oneshot::Receiver<T>, what: &str) -> Option<T> {
    let mut rx = rx;
    loop {
        let silent = BrowserClock
            .now_ms()
            .saturating_sub(inner.last_progress.get());
        let timer = BrowserClock.sleep(inner.deadline_ms.saturating_sub(silent).max(1));
        futures_util::pin_mut!(timer);
        match select(rx, timer).await {
            Either::Left((Ok(v), _)) => return Some(v),
            Either::Left((Err(_), _)) => return None,
            Either::Right(((), pending)) => {
                let silent = BrowserClock
                    .now_ms()
                    .saturating_sub(inner.last_progress.get());
                if silent >= inner.deadline_ms {
                    inner.kill(Gone(format!(
                        "no answer for {} ms while waiting for {what}",
                        inner.deadline_ms
                    )));
                    return None;
                }
                rx = pending;
            }
        }
    }
}

impl EngineWorker {
    /// Starts an engine worker with `factory` (a JS function returning a `Worker` that has been
    /// sent its `init` message: `www/worker.js` passes one), deemed hung after `deadline_ms` of
    /// silence while it owes an answer.
    ///
    /// # Errors
    /// [`Gone`] when the factory throws or returns something that is not a `Worker`.
    pub fn spawn(factory: &js_sys::Function, deadline_ms: u64) -> Result<Self, Gone> {
        let worker = factory
            .call0(&JsValue::UNDEFINED)
            .map_err(|e| Gone(format!("could not be started: {}", js_message(&e))))?
            .dyn_into::<web_sys::Worker>()
            .map_err(|_| Gone("the factory did not return a Worker".into()))?;
        let inner = Rc::new(Inner {
            worker,
            next_id: Cell::new(0),
            waiting: RefCell::default(),
            queued: RefCell::default(),
            flush_scheduled: Cell::new(false),
            gone: RefCell::new(None),
            dim: Cell::new(0),
            memory_bytes: Cell::new(0.0),
            last_progress: Cell::new(BrowserClock.now_ms()),
            deadline_ms,
        });
        let weak = Rc::downgrade(&inner);
        let on_message =
            Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
                if let Some(i) = weak.upgrade() {
                    i.receive(&e.data());
                }
            });
        let weak = Rc::downgrade(&inner);
        // A script that fails to load fires a plain `Event`, an exception an `ErrorEvent`.
        let on_error = Closure::<dyn FnMut(web_sys::Event)>::new(move |e: web_sys::Event| {
            e.prevent_default();
            if let Some(i) = weak.upgrade() {
                let m = e
                    .dyn_ref::<web_sys::ErrorEvent>()
                    .map(web_sys::ErrorEvent::message)
                    .unwrap_or_default();
                i.kill(Gone(if m.is_empty() {
                    "failed to start (is engine-worker.js served, as JavaScript?)".into()
                } else {
                    format!("failed: {m}")
                }));
            }
        });
        inner
            .worker
            .set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        inner
            .worker
            .set_onerror(Some(on_error.as_ref().unchecked_ref()));
        Ok(EngineWorker {
            inner,
            _on_message: on_message,
            _on_error: on_error,
        })
    }

    /// The engine worker's wasm memory as it last reported (after a load, after each message),
    /// bytes.
    pub fn memory_bytes(&self) -> f64 {
        self.inner.memory_bytes.get()
    }

    /// Why the worker cannot answer, once it cannot.
    pub fn gone(&self) -> Option<Gone> {
        self.inner.gone.borrow().clone()
    }

    /// Loads a model (a copy of `bytes` is transferred); resolves to its id and dimension.
    ///
    /// # Errors
    /// [`LoadError::Refused`] with the engine's message when the bytes are not a valid model;
    /// [`LoadError::Gone`] when the worker cannot answer.
    pub async fn load(&self, bytes: &js_sys::Uint8Array) -> Result<Loaded, LoadError> {
        if let Some(g) = self.gone() {
            return Err(LoadError::Gone(g));
        }
        let copy = js_sys::Uint8Array::new(&bytes.buffer())
            .slice(bytes.byte_offset(), bytes.byte_offset() + bytes.length());
        let id = self.inner.id();
        let (tx, rx) = oneshot::channel();
        self.inner.expect(id, Waiter::Load(tx));
        // The bytes travel as a transferred ArrayBuffer, set over the serde message's empty
        // `bytes` (the engine side reads either): the model is never copied into this worker's
        // wasm memory.
        let msg = to_js(&ToEngine::Load {
            id,
            bytes: Vec::new(),
        });
        let _ = js_sys::Reflect::set(&msg, &"bytes".into(), &copy.buffer());
        let transfer = js_sys::Array::of1(&copy.buffer());
        if let Err(g) = self.inner.post(&msg, Some(&transfer)) {
            self.inner.kill(g.clone());
            return Err(LoadError::Gone(g));
        }
        match answer(&self.inner, rx, "a model load").await {
            Some(r) => r,
            None => Err(LoadError::Gone(
                self.gone().unwrap_or(Gone("stopped".into())),
            )),
        }
    }

    /// The vector of at most `max_tokens` word pieces of `text` (`None`: whole; L2-normalised, as
    /// the engine's own `embed_with`).
    ///
    /// # Errors
    /// [`Gone`] when the worker cannot answer.
    pub async fn embed(&self, text: &str, max_tokens: Option<u32>) -> Result<Vec<f32>, Gone> {
        if let Some(g) = self.gone() {
            return Err(g);
        }
        let (tx, rx) = oneshot::channel();
        self.inner
            .queued
            .borrow_mut()
            .push((text.to_owned(), max_tokens, tx));
        if !self.inner.flush_scheduled.replace(true) {
            let inner = self.inner.clone();
            // Runs once the current turn's other jobs have queued their texts too.
            wasm_bindgen_futures::spawn_local(async move { inner.flush() });
        }
        match answer(&self.inner, rx, "an embed").await {
            Some(r) => r,
            None => Err(self.gone().unwrap_or(Gone("stopped".into()))),
        }
    }

    /// What embedding each of `texts` with `max_tokens` covers (one message; word pieces
    /// counted, no forward pass).
    ///
    /// # Errors
    /// [`Gone`] when the worker cannot answer.
    pub async fn count(
        &self,
        texts: &[&str],
        max_tokens: Option<u32>,
    ) -> Result<Vec<TextInfo>, Gone> {
        if let Some(g) = self.gone() {
            return Err(g);
        }
        let id = self.inner.id();
        let (tx, rx) = oneshot::channel();
        self.inner.expect(id, Waiter::Count(tx));
        let msg = to_js(&ToEngine::Count {
            id,
            texts: texts.iter().map(|t| (*t).to_owned()).collect(),
            max_tokens,
        });
        if let Err(g) = self.inner.post(&msg, None) {
            self.inner.kill(g.clone());
            return Err(g);
        }
        match answer(&self.inner, rx, "a count").await {
            Some(r) => r,
            None => Err(self.gone().unwrap_or(Gone("stopped".into()))),
        }
    }

    /// Terminates the worker now; whatever waits on it is answered with [`Gone`].
    pub fn terminate(&self, why: &str) {
        self.inner.kill(Gone(why.to_owned()));
    }
}

impl Drop for EngineWorker {
    fn drop(&mut self) {
        self.inner.kill(Gone("dropped".into()));
        self.inner.worker.set_onmessage(None);
        self.inner.worker.set_onerror(None);
    }
}
