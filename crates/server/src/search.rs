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
use std::collections::{BinaryHeap, HashSet};

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
    /// Finished jobs of the query's model that were scored.
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

/// A heap entry ordered so that the *worst* hit is on top (a min-heap of the best `k`).
struct Worst(Hit);

impl PartialEq for Worst {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Worst {}
impl PartialOrd for Worst {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Worst {
    fn cmp(&self, o: &Self) -> Ordering {
        o.0.score
            .total_cmp(&self.0.score)
            .then_with(|| self.0.id.cmp(&o.0.id))
    }
}

/// The `k` finished jobs of `model_id` closest to `query` (already embedded with that model).
///
/// # Errors
/// A store error while scanning.
pub async fn top_k(
    store: &dyn ResultScan,
    model_id: &str,
    query: &[f32],
    k: usize,
) -> Result<Found> {
    let mut heap = BinaryHeap::with_capacity(k + 1);
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
            let score = cosine(query, &j.result.vector.0);
            heap.push(Worst(Hit {
                id: j.id,
                text: j.text,
                score,
                source: j.result.source,
            }));
            if heap.len() > k {
                heap.pop();
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
    let mut hits: Vec<Hit> = heap.into_iter().map(|w| w.0).collect();
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id)));
    Ok(Found {
        hits,
        scored,
        skipped,
        truncated,
    })
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
