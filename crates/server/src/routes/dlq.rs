//! `GET /v1/dlq` and `POST /v1/dlq/{id}/redrive` (each redrive an audit line: who, which job).

use serde::Deserialize;
use ternflow_core::protocol::{DlqList, JobStatus};

use axum::Extension;

use crate::error::{Error, Result};
use crate::extract::{Json, Path, Query};
use crate::identity::Identity;
use crate::queue::{publish_depth, valid_id};
use crate::tenants::Ctx;

#[derive(Debug, Deserialize)]
pub(crate) struct ListQuery {
    limit: Option<usize>,
}

pub(crate) async fn list(state: Ctx, Query(q): Query<ListQuery>) -> Result<Json<DlqList>> {
    let limit = q.limit.unwrap_or(100).min(1_000);
    Ok(Json(DlqList {
        entries: state.store.dlq(limit).await?,
    }))
}

pub(crate) async fn redrive(
    state: Ctx,
    caller: Option<Extension<Identity>>,
    Path(id): Path<String>,
) -> Result<Json<JobStatus>> {
    valid_id(&id)?;
    if !state.store.redrive(&id, state.now()).await? {
        return Err(Error::NotFound(format!("no dead letter {id}")));
    }
    tracing::warn!(target: "ternflow::audit", tenant = %state.tenant, by = caller.as_ref().map_or("-", |Extension(c)| &*c.sub),
        job = %id, "dead letter redriven");
    state.metrics.add(|c| &c.jobs_redriven, 1);
    publish_depth(&state).await;
    state
        .store
        .status(&id)
        .await?
        .map(Json)
        .ok_or_else(|| Error::no_job(&id))
}
