//! The engine worker's entry: `www/engine-worker.js` hands every message after `init` to
//! `engineHandle`, which reads it as a [`ToEngine`] and answers a [`FromEngine`]. The worker holds
//! one engine (the last model loaded).

use std::cell::RefCell;

use serde::Serialize;
use ternflow_core::messages::{FromEngine, ToEngine};
use ternflow_engine::Engine;
use wasm_bindgen::prelude::*;

use crate::engine_api::wasm_memory_bytes;

thread_local! {
    static ENGINE: RefCell<Option<Engine>> = const { RefCell::new(None) };
}

/// Answers one message of the pipeline's worker. An `embedded` reply carries its vectors as one
/// `Float32Array` (`vectors`) for the caller to transfer. A trap (the wasm is then unusable)
/// throws; the JS answers `broken` for it.
#[wasm_bindgen(js_name = engineHandle)]
pub fn engine_handle(msg: JsValue) -> JsValue {
    let reply = match serde_wasm_bindgen::from_value::<ToEngine>(msg) {
        Err(e) => FromEngine::Broken {
            message: format!("not an engine message: {e}"),
        },
        Ok(ToEngine::Load { id, bytes }) => match Engine::from_vec(bytes) {
            Ok(engine) => {
                let reply = FromEngine::Loaded {
                    id,
                    model_id: engine.model_id().to_string(),
                    dim: engine.output_dim() as u32,
                    memory_bytes: wasm_memory_bytes(),
                };
                ENGINE.with(|e| *e.borrow_mut() = Some(engine));
                reply
            }
            Err(e) => FromEngine::Refused {
                id,
                message: e.to_string(),
            },
        },
        Ok(ToEngine::Embed {
            id,
            texts,
            max_tokens,
        }) => {
            let options = crate::engine_port::options(max_tokens);
            let vectors = ENGINE.with(|e| {
                e.borrow_mut().as_mut().map(|engine| {
                    let dim = engine.output_dim();
                    let mut out = vec![0.0; texts.len() * dim];
                    for (t, slot) in texts.iter().zip(out.chunks_exact_mut(dim)) {
                        engine.embed_with(t, options, slot);
                    }
                    out
                })
            });
            match vectors {
                Some(v) => {
                    let reply = to_js(&FromEngine::Embedded {
                        id,
                        memory_bytes: wasm_memory_bytes(),
                    });
                    let array = js_sys::Float32Array::from(v.as_slice());
                    let _ = js_sys::Reflect::set(&reply, &"vectors".into(), &array);
                    return reply;
                }
                None => FromEngine::Broken {
                    message: "embed before any model was loaded".into(),
                },
            }
        }
        Ok(ToEngine::Count {
            id,
            texts,
            max_tokens,
        }) => {
            let options = crate::engine_port::options(max_tokens);
            let info = ENGINE.with(|e| {
                e.borrow_mut().as_mut().map(|engine| {
                    texts
                        .iter()
                        .map(|t| crate::engine_port::text_info(engine.info(t, options)))
                        .collect()
                })
            });
            match info {
                Some(info) => FromEngine::Counted { id, info },
                None => FromEngine::Broken {
                    message: "count before any model was loaded".into(),
                },
            }
        }
    };
    to_js(&reply)
}

fn to_js(reply: &FromEngine) -> JsValue {
    reply
        .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .unwrap_or(JsValue::NULL)
}
