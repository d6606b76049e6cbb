//! Semantic search over the processed corpus: the query is embedded by the server's engine (the
//! model the workers load from `GET /v1/model`, so one vector space), then scored by cosine
//! against the vector of every finished job of that model, read back from the store
//! ([`ResultScan`]). The top `k` come back with their scores.
//!
//! Why on the server rather than in the page: the vectors are already in the store, where one
//! pass scores them; a page would first have to download every vector (1.5 KiB each) and the
//! engine with its model (≈ 7.5 MB) to embed the query.
//!
//! Cost: one scan of the finished jobs per query (on Redis a `SCAN` over every job hash), bounded
//! by [`MAX_SCANNED`]; fine for a dashboard over a corpus of thousands to tens of thousands.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use serde::Serialize;
use ternflow_core::protocol::ResultSource;

use crate::error::Result;
use crate::store::ResultScan;

/// Most finished jobs one query scores.
pub const MAX_SCANNED: usize = 200_000;
/// Jobs read per store page.
const PAGE: usize = 2_000;

/// One hit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    /// Job id.
    pub id: String,
    /// The job's text.
    pub text: String,
    /// Cosine similarity to the query.
    pub score: f32,
    /// Where the job's vector came from.
    pub source: ResultSource,
}

/// What a search found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Found {
    /// The best hits, best first.
    pub hits: Vec<Hit>,
    /// Finished jobs of the query's model that were scored (several may share a text).
    pub scored: usize,
    /// Finished jobs skipped: another model, or another dimension.
    pub skipped: usize,
    /// `true` when [`MAX_SCANNED`] stopped the scan early.
    pub truncated: bool,
}

/// Cosine similarity (0 when either vector is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut dot, mut na, mut nb) = (0.0f32, 0.0f32, 0.0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na.sqrt() * nb.sqrt())
    }
}

/// The `k` finished jobs of `model_id` closest to `query` (already embedded with that model),
/// one per distinct text (the same sentence enqueued twice under two ids is one hit, the one
/// with the higher score, then the smaller id).
///
/// # Errors
/// A store error while scanning.
pub async fn top_k(
    store: &dyn ResultScan,
    model_id: &str,
    query: &[f32],
    k: usize,
) -> Result<Found> {
    let mut best: HashMap<String, Hit> = HashMap::new();
    let mut seen = HashSet::new();
    let (mut scored, mut skipped, mut cursor) = (0, 0, String::new());
    let mut truncated = false;
    loop {
        let page = store.scan_done(&cursor, PAGE).await?;
        for j in page.jobs {
            if !seen.insert(j.id.clone()) {
                continue;
            }
            if j.result.model_id != model_id || j.result.vector.0.len() != query.len() {
                skipped += 1;
                continue;
            }
            scored += 1;
            let hit = Hit {
                score: cosine(query, &j.result.vector.0),
                id: j.id,
                text: j.text,
                source: j.result.source,
            };
            match best.get(&hit.text) {
                Some(b) if better(b, &hit) => {}
                _ => {
                    best.insert(hit.text.clone(), hit);
                }
            }
        }
        match page.next {
            Some(next) if seen.len() < MAX_SCANNED => cursor = next,
            Some(_) => {
                truncated = true;
                break;
            }
            None => break,
        }
    }
    let mut hits: Vec<Hit> = best.into_values().collect();
    hits.sort_by(rank);
    hits.truncate(k);
    Ok(Found {
        hits,
        scored,
        skipped,
        truncated,
    })
}

/// Best first: the higher score, then the smaller id.
fn rank(a: &Hit, b: &Hit) -> Ordering {
    b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id))
}

fn better(a: &Hit, b: &Hit) -> bool {
    rank(a, b) == Ordering::Less
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_of_known_vectors() {
        assert_eq!(cosine(&[1.0, 0.0], &[2.0, 0.0]), 1.0);
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 3.0]), 0.0);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 1.0]), 0.0);
        assert!((cosine(&[1.0, 1.0], &[1.0, 0.0]) - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
    }
}
