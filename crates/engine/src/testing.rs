//! Random valid TERN v1 files, for tests, fuzzing and benchmarks.
//!
//! [`generate`] writes a file of any shape and embedding format whose values are scaled like a
//! trained model's (unit-variance activations, every ternary code used), so that the forward pass
//! exercises realistic ranges. The same seed always gives the same bytes.

use sha2::{Digest, Sha256};

use crate::format::{Config, EmbeddingFormat, TRAILER_LEN};

/// A small deterministic PRNG (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }
}

/// The shape of the public Ternlight base model (d384, 2 layers, 6 heads, ffn 1536, 384 outputs,
/// BERT vocabulary, 128 ids).
#[must_use]
pub fn base_config(embedding_format: EmbeddingFormat) -> Config {
    Config {
        embedding_format,
        vocab_size: 30522,
        d_model: 384,
        n_layers: 2,
        n_heads: 6,
        ffn_dim: 1536,
        output_dim: 384,
        max_seq_len: 128,
    }
}

/// A tiny shape for fast tests (BERT vocabulary so the bundled tokenizer fits).
#[must_use]
pub fn tiny_config(embedding_format: EmbeddingFormat) -> Config {
    Config {
        embedding_format,
        vocab_size: 30522,
        d_model: 32,
        n_layers: 2,
        n_heads: 4,
        ffn_dim: 64,
        output_dim: 24,
        max_seq_len: 128,
    }
}

struct Writer {
    out: Vec<u8>,
    rng: Rng,
}

impl Writer {
    fn f32(&mut self, v: f32) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    fn f32s(&mut self, n: usize, lo: f32, hi: f32) {
        for _ in 0..n {
            let v = self.rng.uniform(lo, hi);
            self.f32(v);
        }
    }

    fn ternary_bytes(&mut self, n: usize) {
        for _ in 0..n {
            let mut b = 0u8;
            for k in 0..4 {
                b |= (self.rng.below(3) as u8) << (2 * k);
            }
            self.out.push(b);
        }
    }

    fn bit_matrix(&mut self, rows: usize, cols: usize, bias: bool) {
        self.ternary_bytes(rows * cols / 4);
        let scale = (cols as f32 * 2.0 / 3.0).sqrt();
        let s = self.rng.uniform(0.8 * scale, 1.2 * scale);
        self.f32(s);
        if bias {
            self.f32s(rows, -20.0, 20.0);
        }
    }

    fn ln(&mut self, d: usize) {
        self.f32s(d, 0.9, 1.1);
        self.f32s(d, -0.05, 0.05);
    }
}

/// A valid TERN v1 file (SHA-256 trailer included) for `config`, filled from `seed`.
///
/// # Panics
/// When `config` fails [`Config::validate`].
#[must_use]
pub fn generate(config: &Config, seed: u64) -> Vec<u8> {
    config.validate().expect("generate needs a valid config");
    let v = config.vocab_size as usize;
    let d = usize::from(config.d_model);
    let f = usize::from(config.ffn_dim);
    let o = usize::from(config.output_dim);
    let mut w = Writer {
        out: config.header_bytes().to_vec(),
        rng: Rng::new(seed),
    };
    match config.embedding_format {
        EmbeddingFormat::Fp32 => w.f32s(v * d, -0.5, 0.5),
        EmbeddingFormat::Int8 => {
            for _ in 0..v * d {
                let c = w.rng.below(255) as i32 - 127;
                w.out.push(c as i8 as u8);
            }
            w.f32s(v, 0.5 / 127.0, 1.5 / 127.0);
        }
        EmbeddingFormat::Ternary => {
            w.ternary_bytes(v * d / 4);
            w.f32s(v, 0.2, 0.6);
        }
        EmbeddingFormat::Int4 => {
            for _ in 0..v * d / 2 {
                let b = w.rng.next_u64() as u8;
                w.out.push(b);
            }
            w.f32s(v, 0.5 / 7.0, 1.5 / 7.0);
        }
    }
    for _ in 0..config.n_layers {
        w.ln(d);
        for _ in 0..3 {
            w.bit_matrix(d, d, false);
        }
        w.bit_matrix(d, d, true);
        w.ln(d);
        w.bit_matrix(f, d, true);
        w.bit_matrix(d, f, true);
    }
    w.ln(d);
    let p = 1.0 / (d as f32).sqrt();
    w.f32s(o * d, -p, p);
    w.f32s(o, -0.05, 0.05);
    let digest = Sha256::digest(&w.out);
    w.out.extend_from_slice(&digest);
    w.out
}

/// Replaces the last 32 bytes of `file` with the SHA-256 of the bytes before them, so that a
/// mutated file gets past the checksum and reaches the deeper checks.
pub fn resign(file: &mut [u8]) {
    if file.len() < TRAILER_LEN {
        return;
    }
    let n = file.len() - TRAILER_LEN;
    let digest = Sha256::digest(&file[..n]);
    file[n..].copy_from_slice(&digest);
}
