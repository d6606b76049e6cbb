//! `GET /v1/quarantine`, `DELETE /v1/quarantine/{sub}` (admin): quarantined worker identities,
//! and lifting one; and the gate that refuses a quarantined identity's worker requests.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::extract::{Json, Path};
use crate::identity::Identity;
use crate::integrity::verifier;
use crate::state::AppState;
use crate::tenants::Ctx;
use ternflow_core::ErrorCode;

/// Most quarantined identities listed.
const MAX_LISTED: usize = 1_000;

/// One quarantined identity.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Quarantined {
    sub: String,
    since: u64,
    reason: String,
}

/// `GET /v1/quarantine` response.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct QuarantineList {
    quarantined: Vec<Quarantined>,
}

pub(crate) async fn list(state: Ctx) -> Result<Json<QuarantineList>> {
    let q = state.store.quarantined(MAX_LISTED).await?;
    Ok(Json(QuarantineList {
        quarantined: q
            .into_iter()
            .map(|(sub, q)| Quarantined {
                sub,
                since: q.at,
                reason: q.reason,
            })
            .collect(),
    }))
}

pub(crate) async fn lift(state: Ctx, Path(sub): Path<String>) -> Result<StatusCode> {
    // Checked before it reaches the audit log: no newlines or escapes from the path.
    if !crate::integrity::is_writer_id(&sub) {
        return Err(Error::bad_request(
            ErrorCode::BadId,
            "a worker identity is 1–128 characters of [A-Za-z0-9._:@-]",
        ));
    }
    if verifier::lift(&state, &sub).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(Error::NotFound(format!("{sub} is not quarantined")))
    }
}

/// Middleware on the worker routes (after the auth gate): 403 `quarantined` for a quarantined
/// identity.
pub(crate) async fn gate(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> std::result::Result<Response, Error> {
    if let Some(c) = req.extensions().get::<Identity>() {
        let ctx = Ctx::for_caller(&state, c).await?;
        verifier::admit(&ctx, &c.sub).await?;
    }
    Ok(next.run(req).await)
}
