//! What the worker sends the page: replies and events ([`FromWorker`]) as JS values, posted with
//! `postMessage` where there is a page (a dedicated worker's scope; nothing in an edge isolate).
//!
//! Every message goes through serde except `Embedded`, whose vectors travel as `Float32Array`s:
//! `postMessage` then copies one buffer per vector instead of cloning hundreds of numbers, and
//! the page gets typed arrays directly. Its shape is `FromWorker::Embedded`'s, with a `settle`
//! request's failed texts as `{error: {code, message, retryable}}` items.

use serde::Serialize;
use ternflow_core::messages::{Embedding, FromWorker};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::error::WorkerError;

/// `msg` as a JS value.
pub(crate) fn to_js(msg: &FromWorker) -> JsValue {
    if let FromWorker::Embedded { id, embeddings } = msg {
        return items_to_js(*id, embeddings.iter().map(Ok));
    }
    msg.serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .unwrap_or(JsValue::NULL)
}

/// Posts `msg` to the page (nothing where there is no page).
pub(crate) fn post(msg: &FromWorker) {
    if let Ok(scope) = js_sys::global().dyn_into::<web_sys::DedicatedWorkerGlobalScope>() {
        let _ = scope.post_message(&to_js(msg));
    }
}

/// Posts a progress event for request `id`.
pub(crate) fn post_progress(id: u32, phase: &str, loaded: u64, total: Option<u64>) {
    post(&FromWorker::Progress {
        id,
        phase: phase.to_owned(),
        loaded,
        total,
    });
}

/// The `error` reply for request `id`.
pub(crate) fn error_to_js(id: u32, e: &WorkerError) -> JsValue {
    to_js(&FromWorker::Error {
        id,
        code: e.code(),
        message: e.to_string(),
        retryable: e.is_retryable(),
        url: e.url().map(str::to_owned),
    })
}

/// `Embedded` with one item per text: `{vector, source, info?}`, or `{error: {code, message,
/// retryable}}` for a text that failed (`settle`).
pub(crate) fn items_to_js<'a>(
    id: u32,
    items: impl ExactSizeIterator<Item = Result<&'a Embedding, &'a WorkerError>>,
) -> JsValue {
    let set = |o: &js_sys::Object, k: &str, v: &JsValue| {
        // Setting a property on a fresh plain object cannot fail.
        let _ = js_sys::Reflect::set(o, &JsValue::from_str(k), v);
    };
    let list = js_sys::Array::new_with_length(items.len() as u32);
    for (i, item) in items.enumerate() {
        let o = js_sys::Object::new();
        match item {
            Ok(e) => {
                set(
                    &o,
                    "vector",
                    &js_sys::Float32Array::from(e.vector.as_slice()).into(),
                );
                let source = serde_json::to_value(e.source)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                set(&o, "source", &JsValue::from_str(&source));
                if let Some(i) = e.info {
                    let info = js_sys::Object::new();
                    set(&info, "tokens", &JsValue::from(i.tokens));
                    set(&info, "chunks", &JsValue::from(i.chunks));
                    set(&info, "truncated", &JsValue::from_bool(i.truncated));
                    set(&o, "info", &info.into());
                }
            }
            Err(e) => {
                let err = js_sys::Object::new();
                set(&err, "code", &JsValue::from_str(&e.code()));
                set(&err, "message", &JsValue::from_str(&e.to_string()));
                set(&err, "retryable", &JsValue::from_bool(e.is_retryable()));
                set(&o, "error", &err.into());
            }
        }
        list.set(i as u32, o.into());
    }
    let o = js_sys::Object::new();
    set(&o, "type", &JsValue::from_str("embedded"));
    set(&o, "id", &JsValue::from(id));
    set(&o, "embeddings", &list.into());
    o.into()
}
