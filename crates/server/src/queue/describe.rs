//! What a done job's vector covers of its text (word pieces embedded, forwards pooled), counted
//! when a result is read: a function of the text and the model, so nothing is stored and no
//! worker is asked (a worker's claim would be one more untrusted field). The engine's
//! [`Counter`](ternflow_engine::Counter) runs on a blocking thread, not the request's.

use ternflow_core::protocol::{JobState, JobStatus};
use ternflow_engine::EmbedOptions;

use crate::embed::text_info;
use crate::tenants::Ctx;

/// Fills in `info` of each done job in `jobs` whose result is of this server's model (queue jobs
/// are embedded whole: `truncated` is false). Best effort: a store or thread failure leaves
/// `info` out and is logged.
pub(crate) async fn describe(state: &Ctx, jobs: &mut [JobStatus]) {
    let Some(counter) = state.counter.clone() else {
        return;
    };
    let ours = |s: &JobStatus| {
        matches!(&s.state, JobState::Done { result, .. }
            if !result.model_id.is_empty() && *result.model_id == *state.default_model_id)
    };
    let want: Vec<usize> = (0..jobs.len()).filter(|&i| ours(&jobs[i])).collect();
    if want.is_empty() {
        return;
    }
    let ids: Vec<String> = want.iter().map(|&i| jobs[i].id.clone()).collect();
    let texts = match state.store.job_inputs(&ids).await {
        Ok(inputs) => inputs,
        Err(e) => {
            tracing::warn!(error = %e, "job texts for their results' info");
            return;
        }
    };
    let counted = tokio::task::spawn_blocking(move || {
        texts
            .iter()
            .map(|t| {
                t.as_ref()
                    .map(|(text, _)| counter.info(text, EmbedOptions::default()))
            })
            .collect::<Vec<_>>()
    })
    .await;
    let Ok(counted) = counted else {
        tracing::warn!("counting job texts' word pieces failed");
        return;
    };
    for (i, c) in want.into_iter().zip(counted) {
        if let (JobState::Done { info, .. }, Some(c)) = (&mut jobs[i].state, c) {
            *info = Some(text_info(c));
        }
    }
}
