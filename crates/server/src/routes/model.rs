//! `GET /v1/model`: the model file this server embeds with, so workers can load exactly the model
//! their backend fallback runs (same vector space). Public, like the npm package that ships one.

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::error::Error;
use crate::state::AppState;

/// Serves the model file with its model id and an `ETag`; 304 when the client has it already.
pub(crate) async fn get(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let Some(file) = state.model_file.clone() else {
        return Error::NotFound("this server has no model file (start it with --model)".into())
            .into_response();
    };
    let etag = format!("\"{}\"", state.default_model_id);
    let etag_value = HeaderValue::from_str(&etag).unwrap_or(HeaderValue::from_static("\"\""));
    if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes())
    {
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, etag_value)]).into_response();
    }
    let id = HeaderValue::from_str(&state.default_model_id).unwrap_or(HeaderValue::from_static(""));
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            ),
            (header::ETAG, etag_value),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (header::HeaderName::from_static("x-ternflow-model-id"), id),
        ],
        axum::body::Bytes::from_owner(file),
    )
        .into_response()
}
