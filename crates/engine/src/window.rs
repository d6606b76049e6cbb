//! Long texts: a text whose ids do not fit one forward pass (`max_seq_len`: `[CLS]`, up to
//! `max_seq_len − 2` content ids, `[SEP]`) is embedded whole as back-to-back windows of content ids,
//! each run as its own `[CLS] … [SEP]` sequence, their vectors pooled into one.
//!
//! The windowing and the pooling were chosen by measurement against the teacher on 556 held-out
//! paragraphs of 150–1 000 tokens (`train/long_texts.py`; figures in `docs/engine.md`, "Long
//! texts"): back-to-back windows of 126 content ids (`chunks` of the ids: overlaps of 32 and 63 ids
//! measured lower against the teacher), pooled as the mean of the window vectors weighted by
//! their content ids (a short last window counts for what it holds), renormalised. A text that
//! fits one window takes the single-pass path unchanged, bit for bit.
//!
//! The pooling is plain `f32` arithmetic in a fixed order (windows in text order), so every
//! kernel and target still gives the same bits (the server verifies long texts too).

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

/// Adds window vector `v` of `ids` content ids to the running sum `acc` (windows in text order).
pub(crate) fn accumulate(acc: &mut [f32], v: &[f32], ids: usize) {
    let w = ids as f32;
    for (a, x) in acc.iter_mut().zip(v) {
        *a += w * x;
    }
}
