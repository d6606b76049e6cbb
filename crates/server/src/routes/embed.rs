//! `POST /v1/embed`: backend inference, batched across clients. The most expensive route, so
//! it has budgets of its own besides the request rate: each signed token and each tenant may
//! spend so many units a minute (core's `http_handler::embed_units`: about a unit per token), and
//! beyond that gets 429 `quota_exceeded` with `Retry-After`.

use std::time::Instant;

use axum::extract::Extension;
use ternflow_core::http_handler::embed_units;
use ternflow_core::protocol::{EmbedRequest, EmbedResponse, Vector};

use crate::error::{Error, Result};
use crate::extract::Json;
use crate::identity::Identity;
use crate::tenants::Ctx;
use ternflow_core::ErrorCode;

pub(crate) async fn embed(
    state: Ctx,
    Extension(caller): Extension<Identity>,
    Json(req): Json<EmbedRequest>,
) -> Result<Json<EmbedResponse>> {
    let Some(batcher) = state.embed.clone() else {
        return Err(Error::Unavailable(
            "no model is loaded on this server (start it with --model FILE)".to_owned(),
        ));
    };
    let cfg = &state.config;
    if req.texts.is_empty() {
        return Err(Error::bad_request(
            ErrorCode::EmptyBatch,
            "no texts to embed",
        ));
    }
    if req.texts.len() > cfg.max_embed_texts {
        return Err(Error::too_large(
            ErrorCode::BatchTooLarge,
            format!("at most {} texts per request", cfg.max_embed_texts),
        ));
    }
    if req.max_tokens == Some(0) {
        return Err(Error::bad_request(
            ErrorCode::BadRequest,
            "max_tokens must be at least 1",
        ));
    }
    if req.texts.iter().any(|t| t.len() > cfg.max_text_bytes) {
        return Err(Error::too_large(
            ErrorCode::TextTooLong,
            format!("texts are limited to {} bytes", cfg.max_text_bytes),
        ));
    }
    let cost = embed_units(&req.texts);
    let tenant_budget = cfg.quotas_of(&state.tenant).embed_tokens_per_min;
    if let Err(e) = state
        .limits
        .spend_embed(state.store.as_ref(), &caller, tenant_budget, cost)
        .await
    {
        state.usage.add(|c| &c.quota_refused, 1);
        state.metrics.add(|c| &c.embed_rejected, 1);
        return Err(e);
    }
    let n = req.texts.len() as u64;
    let started = Instant::now();
    let (vectors, info) = match batcher.embed_with(req.texts, req.max_tokens).await {
        Ok(v) => v,
        Err(e @ Error::TooManyRequests { .. }) => {
            state.metrics.add(|c| &c.embed_rejected, 1);
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    state.metrics.add(|c| &c.embed_requests, 1);
    state.metrics.add(|c| &c.embed_texts, n);
    state.usage.add(|c| &c.embed_texts, n);
    state.usage.add(|c| &c.embed_tokens, u64::from(cost));
    tracing::debug!(
        texts = n,
        ms = started.elapsed().as_millis() as u64,
        "embedded"
    );
    Ok(Json(EmbedResponse {
        model_id: batcher.model_id().to_owned(),
        vectors: vectors.into_iter().map(Vector).collect(),
        info: info.unwrap_or_default(),
    }))
}
