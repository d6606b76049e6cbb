//! `#[wasm_bindgen]` surface of the Ternlight engine, for the worker and the benchmarks.
//!
//! A thin wrapper: errors become `JsError` here and nowhere else.

use wasm_bindgen::prelude::*;

use ternflow_engine::{EmbedOptions, Engine};

/// A loaded Ternlight model (JS name `TernflowEngine`).
#[wasm_bindgen]
#[derive(Debug)]
pub struct TernflowEngine {
    inner: Engine,
}

#[wasm_bindgen]
impl TernflowEngine {
    /// Loads a TERN v1 file with the bundled BERT uncased vocabulary. The bytes are copied into
    /// wasm memory once and the embedding table is used in place there.
    ///
    /// # Errors
    /// A `JsError` carrying the engine's message when the file is not a valid TERN v1 model.
    #[wasm_bindgen(constructor)]
    pub fn new(model: Vec<u8>) -> Result<TernflowEngine, JsError> {
        Ok(Self {
            inner: Engine::from_vec(model)?,
        })
    }

    /// Loads a TERN v1 file with the vocabulary text of a `vocab.txt`.
    ///
    /// # Errors
    /// As [`TernflowEngine::new`], or when the vocabulary does not fit the model.
    #[wasm_bindgen(js_name = withVocab)]
    pub fn with_vocab(model: Vec<u8>, vocab: &str) -> Result<TernflowEngine, JsError> {
        Ok(Self {
            inner: Engine::from_vec_with_vocab(model, vocab)?,
        })
    }

    /// The L2-normalised embedding of the whole of `text` (a new `Float32Array`); a text past one
    /// window (126 word pieces) is embedded as windows whose vectors are pooled.
    pub fn embed(&mut self, text: &str) -> Vec<f32> {
        self.inner.embed(text)
    }

    /// [`TernflowEngine::embed`] of at most `maxTokens` word pieces (none: the whole text), with
    /// what the vector covers: `{ vector: Float32Array, tokens, chunks, truncated }`.
    #[wasm_bindgen(js_name = embedDetailed)]
    pub fn embed_detailed(&mut self, text: &str, max_tokens: Option<u32>) -> EmbedDetailed {
        let mut vector = vec![0.0; self.inner.output_dim()];
        let options = EmbedOptions {
            max_tokens: max_tokens.map(|m| m as usize),
        };
        let info = self.inner.embed_with(text, options, &mut vector);
        EmbedDetailed {
            vector,
            tokens: info.tokens as u32,
            chunks: info.chunks as u32,
            truncated: info.truncated,
        }
    }

    /// The embeddings of many texts in one call (no JS crossing per text): one `Float32Array`
    /// of `texts.length × outputDim` values, text after text.
    #[wasm_bindgen(js_name = embedBatch)]
    pub fn embed_batch(&mut self, texts: Vec<String>) -> Vec<f32> {
        let dim = self.inner.output_dim();
        let mut out = vec![0.0; texts.len() * dim];
        for (t, slot) in texts.iter().zip(out.chunks_exact_mut(dim)) {
            self.inner.embed_into(t, slot);
        }
        out
    }

    /// Token ids of `text`.
    pub fn tokenize(&self, text: &str) -> Vec<u32> {
        self.inner.tokenize(text)
    }

    /// First 16 hex digits of the model file's SHA-256.
    #[wasm_bindgen(getter, js_name = modelId)]
    pub fn model_id(&self) -> String {
        self.inner.model_id().to_string()
    }

    /// Length of every vector.
    #[wasm_bindgen(getter, js_name = outputDim)]
    pub fn output_dim(&self) -> usize {
        self.inner.output_dim()
    }

    /// The integer kernel in use (`simd128` in a SIMD build).
    #[wasm_bindgen(getter)]
    pub fn kernel(&self) -> String {
        self.inner.kernel().name().to_string()
    }
}

/// One text's vector and what it covers ([`TernflowEngine::embedDetailed`]).
#[wasm_bindgen]
#[derive(Debug)]
pub struct EmbedDetailed {
    vector: Vec<f32>,
    /// Word pieces embedded.
    pub tokens: u32,
    /// Windows pooled (1 for a text that fits one).
    pub chunks: u32,
    /// Whether word pieces past `maxTokens` were dropped.
    pub truncated: bool,
}

#[wasm_bindgen]
impl EmbedDetailed {
    /// The L2-normalised vector (a new `Float32Array`).
    #[wasm_bindgen(getter)]
    pub fn vector(&self) -> Vec<f32> {
        self.vector.clone()
    }
}

/// Bytes of wasm linear memory in use by this module.
#[wasm_bindgen(js_name = wasmMemoryBytes)]
pub fn wasm_memory_bytes() -> f64 {
    (core::arch::wasm32::memory_size(0) * 65536) as f64
}

/// Runs the engine's kernel self-test (every kernel of this build against the scalar reference,
/// exact integer equality) and returns how many comparisons passed.
///
/// # Errors
/// A `JsError` describing the first mismatch.
#[wasm_bindgen(js_name = engineSelfTest)]
pub fn engine_self_test(seed: u32, cases: u32) -> Result<u32, JsError> {
    ternflow_engine::kernels::self_test(u64::from(seed), cases as usize)
        .map(|n| n as u32)
        .map_err(|e| JsError::new(&e))
}
