//! [`Json`]: axum's JSON extractor with its rejections mapped to the protocol's error body
//! (400 `bad_json`, 413 `too_large`, 415 reported as 400 `bad_content_type`).

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::error::Error;

/// JSON body extractor and response wrapper.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T, S> FromRequest<S> for Json<T>
where
    axum::Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Json(v)),
            Err(rej) => Err(map_rejection(rej)),
        }
    }
}

fn map_rejection(rej: JsonRejection) -> Error {
    if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return Error::too_large(
            "too_large",
            "request body is larger than the server's limit",
        );
    }
    match rej {
        JsonRejection::MissingJsonContentType(_) => Error::bad_request(
            "bad_content_type",
            "expected `Content-Type: application/json`",
        ),
        JsonRejection::JsonSyntaxError(e) => Error::bad_request("bad_json", e.body_text()),
        JsonRejection::JsonDataError(e) => Error::bad_request("bad_json", e.body_text()),
        other => Error::bad_request("bad_json", other.body_text()),
    }
}

impl<T: serde::Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}
