//! Long texts: a text whose ids do not fit one forward pass (`max_seq_len`: `[CLS]`, up to
//! `max_seq_len − 2` content ids, `[SEP]`) is embedded whole as overlapping windows of content ids,
//! each run as its own `[CLS] … [SEP]` sequence, their vectors pooled into one.
//!
//! The windowing and the pooling were chosen by measurement against the teacher on 556 held-out
//! paragraphs of 150–1 000 tokens (`train/long_texts.py`; figures in `docs/engine.md`, "Long
//! texts"): back-to-back windows of 126 content ids ([`OVERLAP`] 0: overlaps of 32 and 63 ids
//! measured lower against the teacher), pooled as the mean of the window vectors weighted by
//! their content ids (a short last window counts for what it holds), renormalised. A text that
//! fits one window takes the single-pass path unchanged, bit for bit.
//!
//! The pooling is plain `f32` arithmetic in a fixed order (windows in text order), so every
//! kernel and target still gives the same bits (the server verifies long texts too).

/// Content ids two consecutive windows share.
pub const OVERLAP: usize = 0;

/// How much of a text to embed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EmbedOptions {
    /// Content ids (word pieces, `[CLS]`/`[SEP]` not counted) to embed at most; the rest of the
    /// text is dropped and [`EmbedInfo::truncated`] set. `None`: the whole text.
    pub max_tokens: Option<usize>,
}

/// What an embed covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EmbedInfo {
    /// Content ids embedded.
    pub tokens: usize,
    /// Forward passes pooled (1 for a text that fits one window).
    pub chunks: usize,
    /// Whether content ids past [`EmbedOptions::max_tokens`] were dropped.
    pub truncated: bool,
}

/// The windows `[start, end)` over `n` content ids, `width` at most each, consecutive ones sharing
/// `overlap` ids (`overlap < width`); one window when `n ≤ width`.
pub fn spans(n: usize, width: usize, overlap: usize) -> impl Iterator<Item = (usize, usize)> {
    assert!(width > overlap, "a window must advance");
    let step = width - overlap;
    let mut start = Some(0);
    std::iter::from_fn(move || {
        let s = start?;
        let e = (s + width).min(n);
        start = (e < n).then_some(s + step);
        Some((s, e))
    })
}

/// Adds window vector `v` of `ids` content ids to the running sum `acc` (windows in text order).
pub(crate) fn accumulate(acc: &mut [f32], v: &[f32], ids: usize) {
    let w = ids as f32;
    for (a, x) in acc.iter_mut().zip(v) {
        *a += w * x;
    }
}

/// L2-normalises the weighted sum, like a single pass's output.
pub(crate) fn finish(out: &mut [f32]) {
    let norm = out.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
    for v in out.iter_mut() {
        *v /= norm;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_cover_every_id_with_the_overlap() {
        assert_eq!(spans(0, 126, 32).collect::<Vec<_>>(), vec![(0, 0)]);
        assert_eq!(spans(126, 126, 32).collect::<Vec<_>>(), vec![(0, 126)]);
        assert_eq!(
            spans(127, 126, 32).collect::<Vec<_>>(),
            vec![(0, 126), (94, 127)]
        );
        assert_eq!(
            spans(300, 126, 0).collect::<Vec<_>>(),
            vec![(0, 126), (126, 252), (252, 300)]
        );
        for overlap in [0, 32, 63] {
            for n in [127, 220, 221, 500, 4000] {
                let s: Vec<_> = spans(n, 126, overlap).collect();
                assert_eq!(s[0].0, 0);
                assert_eq!(s.last().unwrap().1, n);
                for w in s.windows(2) {
                    assert_eq!(
                        w[0].1 - w[1].0,
                        overlap,
                        "consecutive windows share {overlap} ids"
                    );
                    assert!(w[1].1 > w[0].1, "every window adds ids");
                }
                assert!(s.iter().all(|&(a, b)| b - a <= 126 && b > a));
            }
        }
    }
}
