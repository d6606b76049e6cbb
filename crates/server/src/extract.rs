//! Extractors whose rejections are the protocol's JSON error body, never axum's plain text:
//! [`Json`] (400 `bad_json`, 413 `too_large`, 400 `bad_content_type`, 408 `body_timeout`),
//! [`OptionalJson`] (the same, where an empty body means the defaults), [`Path`] (400
//! `bad_path`) and [`Query`] (400 `bad_query`).

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use std::time::Duration;

use crate::error::Error;
use crate::state::AppState;
use ternflow_core::ErrorCode;

/// JSON body extractor and response wrapper.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T> FromRequest<AppState> for Json<T>
where
    axum::Json<T>: FromRequest<AppState, Rejection = JsonRejection>,
{
    type Rejection = Error;

    /// Reads the body within `body_timeout_ms` (408 `body_timeout` after it: a client that
    /// stalls mid-body holds no handler forever).
    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let limit = Duration::from_millis(state.config.body_timeout_ms);
        match tokio::time::timeout(limit, axum::Json::<T>::from_request(req, state)).await {
            Ok(Ok(axum::Json(v))) => Ok(Json(v)),
            Ok(Err(rej)) => Err(map_rejection(rej)),
            Err(_) => Err(Error::RequestTimeout(
                "the request body did not arrive in time".to_owned(),
            )),
        }
    }
}

fn map_rejection(rej: JsonRejection) -> Error {
    if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return Error::too_large(
            ErrorCode::TooLarge,
            "request body is larger than the server's limit",
        );
    }
    match rej {
        JsonRejection::MissingJsonContentType(_) => Error::bad_request(
            ErrorCode::BadContentType,
            "expected `Content-Type: application/json`",
        ),
        JsonRejection::JsonSyntaxError(e) => Error::bad_request(ErrorCode::BadJson, e.body_text()),
        JsonRejection::JsonDataError(e) => Error::bad_request(ErrorCode::BadJson, e.body_text()),
        other => Error::bad_request(ErrorCode::BadJson, other.body_text()),
    }
}

/// An optional JSON body: empty (or only whitespace) means `T::default()`, with or without a
/// `Content-Type`; anything else is taken as [`Json`] takes a body (`application/json`, read
/// within `body_timeout_ms`, the same rejections).
#[derive(Debug, Clone, Copy, Default)]
pub struct OptionalJson<T>(pub T);

/// Whether `Content-Type` says JSON (`application/json` or `application/…+json`, any
/// parameters), as axum's `Json` decides.
fn is_json(req: &Request) -> bool {
    req.headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .is_some_and(|m| {
            m == "application/json" || (m.starts_with("application/") && m.ends_with("+json"))
        })
}

impl<T: serde::de::DeserializeOwned + Default> FromRequest<AppState> for OptionalJson<T> {
    type Rejection = Error;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let json = is_json(&req);
        let limit = Duration::from_millis(state.config.body_timeout_ms);
        let body = match tokio::time::timeout(limit, axum::body::Bytes::from_request(req, state))
            .await
        {
            Ok(Ok(b)) => b,
            Ok(Err(rej)) if rej.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(Error::too_large(
                    ErrorCode::TooLarge,
                    "request body is larger than the server's limit",
                ))
            }
            Ok(Err(rej)) => return Err(Error::bad_request(ErrorCode::BadBody, rej.body_text())),
            Err(_) => {
                return Err(Error::RequestTimeout(
                    "the request body did not arrive in time".to_owned(),
                ))
            }
        };
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(T::default()));
        }
        if !json {
            return Err(Error::bad_request(
                ErrorCode::BadContentType,
                "expected `Content-Type: application/json`",
            ));
        }
        serde_json::from_slice(&body)
            .map(OptionalJson)
            .map_err(|e| Error::bad_request(ErrorCode::BadJson, e.to_string()))
    }
}

impl<T: serde::Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// Path parameters; a value that does not decode (`/v1/jobs/%FF`) is 400 `bad_path`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Path<T>(pub T);

impl<T, S> FromRequestParts<S> for Path<T>
where
    axum::extract::Path<T>: FromRequestParts<S, Rejection = PathRejection>,
    S: Send + Sync,
{
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(Path(v)),
            Err(rej) => Err(Error::bad_request(ErrorCode::BadPath, rej.body_text())),
        }
    }
}

/// Query parameters; a value that does not parse (`?limit=abc`) is 400 `bad_query`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    axum::extract::Query<T>: FromRequestParts<S, Rejection = QueryRejection>,
    S: Send + Sync,
{
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(Query(v)),
            Err(rej) => Err(Error::bad_request(ErrorCode::BadQuery, rej.body_text())),
        }
    }
}
