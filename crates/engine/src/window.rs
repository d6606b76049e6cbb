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

/// Ids to tokenize for `options`: all of them, or `[CLS]`, the limit and one id past it (which
/// tells whether the text went on), `[SEP]`.
pub(crate) fn id_limit(options: EmbedOptions) -> usize {
    options
        .max_tokens
        .map_or(usize::MAX, |m| m.saturating_add(3))
}

/// The content ids kept of `content` under `options`, and whether any were dropped.
pub(crate) fn kept(content: usize, options: EmbedOptions) -> (usize, bool) {
    match options.max_tokens {
        Some(m) if content > m => (m, true),
        _ => (content, false),
    }
}

/// Forward passes a text of `tokens` content ids takes, with windows of `width` (1 for an empty
/// text: `[CLS] [SEP]` is one pass).
pub(crate) fn chunks(tokens: usize, width: usize) -> usize {
    tokens.div_ceil(width.max(1)).max(1)
}

/// Says what an embed covers from the text's word pieces alone, without the engine: the
/// tokenizer and the window width, shareable across threads (the server describes a stored
/// job's result with it while its engine thread embeds).
#[derive(Debug, Clone)]
pub struct Counter {
    pub(crate) tokenizer: crate::Tokenizer,
    /// Content ids per window.
    pub(crate) width: usize,
}

impl Counter {
    /// What [`crate::Engine::embed_with`] with `options` covers of `text`.
    #[must_use]
    pub fn info(&self, text: &str, options: EmbedOptions) -> EmbedInfo {
        let (mut norm, mut ids) = (String::new(), Vec::new());
        self.tokenizer
            .encode_into(text, id_limit(options), &mut norm, &mut ids);
        let (tokens, truncated) = kept(ids.len().saturating_sub(2), options);
        EmbedInfo {
            tokens,
            chunks: chunks(tokens, self.width),
            truncated,
        }
    }
}
