//! The model's weights as the forward pass uses them: laid out once at load time.
//!
//! Ternary matrices are unpacked to one `i8` per weight (−1, 0, +1), each row padded with zeros to a
//! multiple of [`ROW_ALIGN`] so that every SIMD kernel reads whole vectors; where the best kernel
//! reads row pairs (wasm `simd128`, x86-64 AVX2), then packed two rows per `i16` instead
//! ([`crate::kernels::pack_pairs`]). Q, K and V share one matrix of `3·D` rows (they read the
//! same quantised input), each row carrying its own scale.

use crate::format::{Config, EmbeddingFormat};

/// Rows of an unpacked ternary matrix (and quantised activations) are padded to this many elements.
pub const ROW_ALIGN: usize = 32;

/// Rounds `n` up to a multiple of [`ROW_ALIGN`].
#[must_use]
pub fn padded(n: usize) -> usize {
    n.div_ceil(ROW_ALIGN) * ROW_ALIGN
}

/// A BitLinear layer: ternary weights `[rows × cols]`, a scale and a bias per output row.
#[derive(Debug, Clone)]
pub struct BitMatrix {
    /// Output rows.
    pub rows: usize,
    /// Input columns (before padding).
    pub cols: usize,
    /// Row stride in `w`: `padded(cols)`.
    pub stride: usize,
    /// `rows × stride` weights in {−1, 0, +1}, zero padded; empty once laid out as [`Self::pairs`].
    pub w: Vec<i8>,
    /// The same weights as row pairs ([`crate::kernels::pack_pairs`]) where the best kernel reads
    /// them ([`crate::kernels::Kernel::reads_pairs`]); empty elsewhere.
    pub pairs: Vec<i16>,
    /// The matrix's `w_scale`, per row (Q, K, V rows keep their own matrix's scale).
    pub w_scale: Vec<f32>,
    /// `1 / w_scale`, per row (the forward pass multiplies).
    pub inv_w_scale: Vec<f32>,
    /// Bias per row (zero where the file has none).
    pub bias: Vec<f32>,
}

impl BitMatrix {
    /// Lays the weights out as [`BitMatrix::pairs`] (dropping the one-per-weight copy) when the
    /// best kernel here reads pairs ([`crate::kernels::Kernel::reads_pairs`]).
    #[must_use]
    pub fn with_pairs(self) -> Self {
        if crate::kernels::Kernel::best().reads_pairs() {
            self.into_pairs()
        } else {
            self
        }
    }

    /// Lays the weights out as [`BitMatrix::pairs`], whatever this build's kernel reads.
    #[must_use]
    pub fn into_pairs(mut self) -> Self {
        self.pairs = crate::kernels::pack_pairs(&self.w, self.rows, self.stride);
        self.w = Vec::new();
        self
    }

    /// Lays the weights out for `kernel`: row pairs where it reads them
    /// ([`crate::kernels::Kernel::reads_pairs`]), one `i8` per weight elsewhere. The weights
    /// are the same either way ([`crate::kernels::unpack_pairs`] inverts
    /// [`crate::kernels::pack_pairs`] exactly).
    pub fn lay_out_for(&mut self, kernel: crate::kernels::Kernel) {
        if kernel.reads_pairs() && self.pairs.is_empty() {
            self.pairs = crate::kernels::pack_pairs(&self.w, self.rows, self.stride);
            self.w = Vec::new();
        } else if !kernel.reads_pairs() && self.w.is_empty() {
            self.w = crate::kernels::unpack_pairs(&self.pairs, self.rows, self.stride);
            self.pairs = Vec::new();
        }
    }
}

/// The token embedding table, kept in its file encoding and decoded one row at a time.
#[derive(Debug, Clone)]
pub struct Embeddings {
    /// Storage format.
    pub format: EmbeddingFormat,
    /// Row length `D`.
    pub dim: usize,
    /// Holds the codes as in the file at `codes_at..codes_at + codes_len`: either a copy of just
    /// the codes, or (loaded with [`crate::loader::load_owned`]) the whole file, so that a model
    /// handed over by value is not copied again. Empty for fp32 tables.
    pub data: Vec<u8>,
    /// Offset of the codes in `data`.
    pub codes_at: usize,
    /// Length of the codes.
    pub codes_len: usize,
    /// fp32 tables only: `V·D` values.
    pub values: Vec<f32>,
    /// Quantised tables only: one scale per row.
    pub scales: Vec<f32>,
}

impl Embeddings {
    /// The quantised codes (empty for fp32).
    #[must_use]
    pub fn codes(&self) -> &[u8] {
        &self.data[self.codes_at..self.codes_at + self.codes_len]
    }

    /// Writes row `id` (value = code × row scale) into `out[..dim]`.
    pub fn row_into(&self, id: usize, out: &mut [f32]) {
        let d = self.dim;
        let out = &mut out[..d];
        let codes = self.codes();
        match self.format {
            EmbeddingFormat::Fp32 => out.copy_from_slice(&self.values[id * d..(id + 1) * d]),
            EmbeddingFormat::Int8 => {
                let s = self.scales[id];
                for (o, &c) in out.iter_mut().zip(&codes[id * d..(id + 1) * d]) {
                    *o = f32::from(c as i8) * s;
                }
            }
            EmbeddingFormat::Ternary => {
                let s = self.scales[id];
                let bytes = &codes[id * d / 4..(id + 1) * d / 4];
                for (o4, &b) in out.chunks_exact_mut(4).zip(bytes) {
                    for (k, o) in o4.iter_mut().enumerate() {
                        *o = f32::from(ternary_code(b >> (2 * k))) * s;
                    }
                }
            }
            EmbeddingFormat::Int4 => {
                let s = self.scales[id];
                let bytes = &codes[id * d / 2..(id + 1) * d / 2];
                for (o2, &b) in out.chunks_exact_mut(2).zip(bytes) {
                    o2[0] = f32::from(int4_code(b)) * s;
                    o2[1] = f32::from(int4_code(b >> 4)) * s;
                }
            }
        }
    }
}

/// The value of a 2-bit ternary code in the low bits of `b` (`00`=0, `01`=+1, `10`=−1; the
/// reserved `11` is rejected at load time and reads as 0 here).
#[inline]
#[must_use]
pub fn ternary_code(b: u8) -> i8 {
    match b & 3 {
        1 => 1,
        2 => -1,
        _ => 0,
    }
}

/// The two's-complement value of the low nibble of `b`.
#[inline]
#[must_use]
pub fn int4_code(b: u8) -> i8 {
    (((b & 0x0F) << 4) as i8) >> 4
}

/// One transformer layer.
#[derive(Debug, Clone)]
pub struct Layer {
    /// Attention pre-LN weight and bias.
    pub ln1_w: Vec<f32>,
    /// Attention pre-LN bias.
    pub ln1_b: Vec<f32>,
    /// Q, K and V stacked: `3·D` rows.
    pub qkv: BitMatrix,
    /// Attention output projection.
    pub out: BitMatrix,
    /// FFN pre-LN weight.
    pub ln2_w: Vec<f32>,
    /// FFN pre-LN bias.
    pub ln2_b: Vec<f32>,
    /// FFN up projection `[F × D]`.
    pub fc1: BitMatrix,
    /// FFN down projection `[D × F]`.
    pub fc2: BitMatrix,
}

impl Layer {
    /// Lays every matrix out for `kernel` ([`BitMatrix::lay_out_for`]).
    pub fn lay_out_for(&mut self, kernel: crate::kernels::Kernel) {
        for m in [&mut self.qkv, &mut self.out, &mut self.fc1, &mut self.fc2] {
            m.lay_out_for(kernel);
        }
    }
}

/// Everything the forward pass reads.
#[derive(Debug, Clone)]
pub struct Weights {
    /// SHA-256 of the whole file (trailer included); its first 8 bytes, hex, are the model id.
    pub sha256: [u8; 32],
    /// The header.
    pub config: Config,
    /// Token embeddings.
    pub embeddings: Embeddings,
    /// Transformer layers.
    pub layers: Vec<Layer>,
    /// Final LN weight.
    pub lnf_w: Vec<f32>,
    /// Final LN bias.
    pub lnf_b: Vec<f32>,
    /// Projection `[O × D]`, fp32 row-major.
    pub proj_w: Vec<f32>,
    /// Projection bias `[O]`.
    pub proj_b: Vec<f32>,
}
