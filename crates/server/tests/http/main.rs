//! HTTP behaviour through `app(state)` with `oneshot`, one file per route family (one test
//! binary): `auth` (tokens, roles, rate limits, CORS), `jobs` (the queue), `cache` (the
//! remote cache and locks), `embed` (backend inference and the model file), `metrics`, and
//! `contract` (OpenAPI vs the routes and codes; every rejection a JSON error body).

#[path = "../common/mod.rs"]
mod common;

mod auth;
mod cache;
mod contract;
mod embed;
mod jobs;
mod metrics;

use serde_json::{json, Value};
use ternflow_core::codec::encode_vector;

/// One unit vector of the hash embedder's 8 dimensions for every job: these tests are about
/// the queue, so `state_with` turns recomputation off (tests/integrity.rs covers it); the
/// shape checks still apply.
pub(crate) fn vector() -> String {
    encode_vector(&[0.5, 0.5, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0])
}

pub(crate) fn ack_body(token: &str) -> Value {
    json!({"token": token, "result": {"model_id": "00000000deadbeef", "vector": vector(), "source": "engine"}})
}

pub(crate) fn error_code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("<no error body>")
}
