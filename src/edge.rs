//! The edge handler's HTTP entry: `handleHttp(method, body)` answers one request with the
//! embedding handler's contract (`ternflow_core::http_handler`, the same as the WASI handler's)
//! over the pipeline `init` built. `www/edge/handler.mjs` only moves the request's method and
//! bytes in and the status and JSON body out.

use ternflow_core::http_handler::{self, Reply};
use wasm_bindgen::prelude::*;

use crate::state::pipeline;

/// Answers one request: resolves to `{status, body}` (`body` a `Uint8Array` of JSON).
#[wasm_bindgen(js_name = handleHttp)]
pub async fn handle_http(method: String, body: Vec<u8>) -> JsValue {
    let reply = match pipeline() {
        Ok(p) => http_handler::respond(&p, &method, &body).await,
        Err(e) => http_handler::error(503, &e.code(), &e.to_string()),
    };
    to_js(&reply)
}

/// The largest request body the contract takes (`http_handler::MAX_BODY_BYTES`): the JS refuses
/// a body that declares more before reading it.
#[wasm_bindgen(js_name = maxBodyBytes)]
pub fn max_body_bytes() -> u32 {
    http_handler::MAX_BODY_BYTES as u32
}

/// `{status, body}` for `reply`; also how the JS handler writes its own setup failures, so every
/// error body has one shape.
#[wasm_bindgen(js_name = httpError)]
pub fn http_error(status: u16, code: &str, message: &str) -> JsValue {
    to_js(&http_handler::error(status, code, message))
}

fn to_js(reply: &Reply) -> JsValue {
    let o = js_sys::Object::new();
    // Setting a property on a fresh plain object cannot fail.
    let _ = js_sys::Reflect::set(&o, &"status".into(), &JsValue::from(reply.status));
    let _ = js_sys::Reflect::set(
        &o,
        &"body".into(),
        &js_sys::Uint8Array::from(reply.body.as_slice()).into(),
    );
    o.into()
}
