//! [`Engine`]: a loaded model, its tokenizer and the buffers of one forward pass.

use crate::error::{Error, Result};
use crate::format::Config;
use crate::forward::{forward, Scratch};
use crate::kernels::Kernel;
use crate::loader::{load, load_owned};
use crate::math::l2_normalize;
use crate::model::Weights;
use crate::tokenizer::Tokenizer;
use crate::window::{accumulate, chunks, id_limit, kept, Counter, EmbedInfo, EmbedOptions};

/// A Ternlight model ready to embed text.
///
/// Calls take `&mut self` because they reuse one set of buffers: a warm [`Engine::embed_into`]
/// allocates nothing. `Engine` is `Send`; share one between threads behind a `Mutex`, or give
/// each thread its own.
#[derive(Debug, Clone)]
pub struct Engine {
    weights: Weights,
    tokenizer: Tokenizer,
    kernel: Kernel,
    scratch: Scratch,
    norm: String,
    ids: Vec<u32>,
    /// One window's `[CLS] … [SEP]` and its vector, for texts past one pass.
    window: Vec<u32>,
    window_vec: Vec<f32>,
    model_id: String,
}

impl Engine {
    /// Loads a TERN v1 file with the bundled BERT uncased vocabulary ([`crate::BUNDLED_VOCAB`]).
    ///
    /// # Errors
    /// Any [`Error`] the file or the vocabulary/model pairing causes; see
    /// [`Engine::from_bytes_with_vocab`].
    pub fn from_bytes(model: &[u8]) -> Result<Self> {
        Self::from_bytes_with_vocab(model, crate::BUNDLED_VOCAB)
    }

    /// Loads a TERN v1 file with the vocabulary in `vocab_text` (`vocab.txt` format).
    ///
    /// # Errors
    /// The loader's errors ([`Error::BadMagic`], [`Error::Truncated`],
    /// [`Error::ChecksumMismatch`], …), or [`Error::Vocab`] when the vocabulary lacks a special
    /// token or has more entries than the model's `vocab_size`.
    pub fn from_bytes_with_vocab(model: &[u8], vocab_text: &str) -> Result<Self> {
        Self::with_weights(load(model)?, vocab_text)
    }

    /// [`Engine::from_bytes`] for a file handed over by value: the embedding table is used in
    /// place instead of being copied (less memory and a faster load, e.g. from wasm).
    ///
    /// # Errors
    /// As [`Engine::from_bytes_with_vocab`].
    pub fn from_vec(model: Vec<u8>) -> Result<Self> {
        Self::from_vec_with_vocab(model, crate::BUNDLED_VOCAB)
    }

    /// [`Engine::from_vec`] with the vocabulary in `vocab_text`.
    ///
    /// # Errors
    /// As [`Engine::from_bytes_with_vocab`].
    pub fn from_vec_with_vocab(model: Vec<u8>, vocab_text: &str) -> Result<Self> {
        Self::with_weights(load_owned(model)?, vocab_text)
    }

    fn with_weights(weights: Weights, vocab_text: &str) -> Result<Self> {
        let tokenizer = Tokenizer::from_vocab(vocab_text)?;
        if u64::from(tokenizer.max_id()) >= u64::from(weights.config.vocab_size) {
            return Err(Error::Vocab(format!(
                "the vocabulary has {} entries, the model only {} embedding rows",
                tokenizer.len(),
                weights.config.vocab_size
            )));
        }
        let scratch = Scratch::new(&weights);
        let max_ids = usize::from(weights.config.max_seq_len);
        Ok(Self {
            model_id: hex::encode(&weights.sha256[..8]),
            scratch,
            tokenizer,
            kernel: Kernel::best(),
            norm: String::with_capacity(1024),
            ids: Vec::with_capacity(max_ids),
            window: Vec::with_capacity(max_ids),
            window_vec: vec![0.0; usize::from(weights.config.output_dim)],
            weights,
        })
    }

    /// The model's shape.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.weights.config
    }

    /// First 16 hex digits of the SHA-256 of the whole model file.
    #[must_use]
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// Length of every output vector.
    #[must_use]
    pub fn output_dim(&self) -> usize {
        usize::from(self.weights.config.output_dim)
    }

    /// The kernel in use.
    #[must_use]
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Switches kernel, laying the weights out for it (row pairs or one `i8` per weight), so
    /// the kernel named is the one that runs. Every kernel gives bit-identical vectors
    /// (`docs/engine.md`, the determinism invariant; `tests/determinism.rs`).
    pub fn set_kernel(&mut self, kernel: Kernel) {
        for l in &mut self.weights.layers {
            l.lay_out_for(kernel);
        }
        self.kernel = kernel;
    }

    /// The tokenizer.
    #[must_use]
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Token ids of `text`: `[CLS] … [SEP]`, at most `max_seq_len` of them.
    #[must_use]
    pub fn tokenize(&self, text: &str) -> Vec<u32> {
        self.tokenizer
            .encode(text, usize::from(self.weights.config.max_seq_len))
    }

    /// The L2-normalised embedding of the whole of `text` (see [`crate::window`] for texts past
    /// one pass).
    #[must_use]
    pub fn embed(&mut self, text: &str) -> Vec<f32> {
        let mut out = vec![0.0; self.output_dim()];
        self.embed_into(text, &mut out);
        out
    }

    /// [`Engine::embed`] into `out[..output_dim]` without allocating (once warm).
    ///
    /// # Panics
    /// When `out` is shorter than [`Engine::output_dim`].
    pub fn embed_into(&mut self, text: &str, out: &mut [f32]) {
        self.embed_with(text, EmbedOptions::default(), out);
    }

    /// [`Engine::embed_into`] with `options` (at most `max_tokens` content ids), saying what the
    /// vector covers: ids embedded, windows pooled, whether ids were dropped.
    ///
    /// # Panics
    /// When `out` is shorter than [`Engine::output_dim`].
    pub fn embed_with(&mut self, text: &str, options: EmbedOptions, out: &mut [f32]) -> EmbedInfo {
        assert!(out.len() >= self.output_dim(), "output buffer too short");
        let width = self.window_width();
        let (content, truncated) = self.encode(text, options);
        if content <= width {
            forward(
                &self.weights,
                self.kernel,
                &self.ids,
                &mut self.scratch,
                out,
            );
            return EmbedInfo {
                tokens: content,
                chunks: 1,
                truncated,
            };
        }
        let (cls, sep) = (self.ids[0], self.ids[content + 1]);
        let out = &mut out[..self.output_dim()];
        out.fill(0.0);
        let mut chunks = 0;
        for part in self.ids[1..=content].chunks(width) {
            self.window.clear();
            self.window.push(cls);
            self.window.extend_from_slice(part);
            self.window.push(sep);
            forward(
                &self.weights,
                self.kernel,
                &self.window,
                &mut self.scratch,
                &mut self.window_vec,
            );
            accumulate(out, &self.window_vec, part.len());
            chunks += 1;
        }
        l2_normalize(out);
        EmbedInfo {
            tokens: content,
            chunks,
            truncated,
        }
    }

    /// What [`Engine::embed_with`] would cover of `text` with `options`, from its word pieces
    /// alone (no forward pass): a cached vector's text is described without embedding it again.
    pub fn info(&mut self, text: &str, options: EmbedOptions) -> EmbedInfo {
        let (content, truncated) = self.encode(text, options);
        EmbedInfo {
            tokens: content,
            chunks: chunks(content, self.window_width()),
            truncated,
        }
    }

    /// A [`Counter`] for this model: [`Engine::info`] without the engine (its own copy of the
    /// vocabulary), for another thread.
    #[must_use]
    pub fn counter(&self) -> Counter {
        Counter {
            tokenizer: self.tokenizer.clone(),
            width: self.window_width(),
        }
    }

    /// Content ids one forward pass takes (`max_seq_len` less `[CLS]` and `[SEP]`).
    fn window_width(&self) -> usize {
        usize::from(self.weights.config.max_seq_len)
            .saturating_sub(2)
            .max(1)
    }

    /// Tokenizes `text` into `self.ids` (`[CLS] … [SEP]`, cut at `options.max_tokens` content
    /// ids): the content ids kept, and whether any were dropped.
    fn encode(&mut self, text: &str, options: EmbedOptions) -> (usize, bool) {
        self.tokenizer
            .encode_into(text, id_limit(options), &mut self.norm, &mut self.ids);
        let content = self.ids.len() - 2;
        let (keep, truncated) = kept(content, options);
        if truncated {
            let sep = self.ids[content + 1];
            self.ids.truncate(keep + 1);
            self.ids.push(sep);
        }
        (keep, truncated)
    }

    /// [`Engine::embed_into`] of the first window only (`[CLS]`, 126 word pieces, `[SEP]`), adding
    /// each stage's time to `profile`.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn embed_profiled(
        &mut self,
        text: &str,
        out: &mut [f32],
        profile: &mut crate::profile::Profile,
    ) {
        use crate::forward::{Stage, Stages};
        assert!(out.len() >= self.output_dim(), "output buffer too short");
        let max_ids = usize::from(self.weights.config.max_seq_len);
        profile.start();
        self.tokenizer
            .encode_into(text, max_ids, &mut self.norm, &mut self.ids);
        profile.end(Stage::Tokenize);
        crate::forward::forward_marked(
            &self.weights,
            self.kernel,
            &self.ids,
            &mut self.scratch,
            out,
            profile,
        );
        profile.embeds += 1;
        profile.tokens += self.ids.len() as u64;
    }

    /// The embedding of already tokenized input.
    ///
    /// # Errors
    /// [`Error::InvalidIds`] when `ids` is empty, longer than `max_seq_len`, or holds an id not
    /// below `vocab_size`.
    pub fn embed_ids(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        let c = &self.weights.config;
        if ids.is_empty() || ids.len() > usize::from(c.max_seq_len) {
            return Err(Error::InvalidIds(format!(
                "{} ids (expected 1..={})",
                ids.len(),
                c.max_seq_len
            )));
        }
        if let Some(bad) = ids.iter().find(|&&i| i >= c.vocab_size) {
            return Err(Error::InvalidIds(format!(
                "id {bad} is not below vocab_size {}",
                c.vocab_size
            )));
        }
        let mut out = vec![0.0; self.output_dim()];
        forward(&self.weights, self.kernel, ids, &mut self.scratch, &mut out);
        Ok(out)
    }

    /// Embeddings of several texts, in order.
    #[must_use]
    pub fn embed_batch(&mut self, texts: &[&str]) -> Vec<Vec<f32>> {
        texts.iter().map(|t| self.embed(t)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_is_send() {
        fn send<T: Send>() {}
        send::<Engine>();
    }
}
