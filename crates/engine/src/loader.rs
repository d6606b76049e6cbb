//! Reads a TERN v1 file into [`Weights`]: sizes first, then the SHA-256 trailer, then the values.
//!
//! Every read is bounds-checked and every size is computed with checked arithmetic, so any byte
//! string either loads or yields an [`Error`]; nothing here panics.

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::format::{Config, EmbeddingFormat, HEADER_LEN, TRAILER_LEN};
use crate::model::{padded, BitMatrix, Embeddings, Layer, Weights};

/// The sections of a file with this configuration, in order, with their sizes in bytes.
/// `None` when the total does not fit in `usize` (possible on 32-bit targets with absurd headers);
/// sizes are computed in `u64`, so no intermediate product overflows.
pub(crate) fn layout(c: &Config) -> Option<Vec<(String, usize)>> {
    let v = u64::from(c.vocab_size);
    let d = u64::from(c.d_model);
    let f = u64::from(c.ffn_dim);
    let o = u64::from(c.output_dim);
    let mut s: Vec<(String, u64)> = vec![("header".into(), HEADER_LEN as u64)];
    match c.embedding_format {
        EmbeddingFormat::Fp32 => s.push(("embeddings".into(), v * d * 4)),
        fmt => {
            let codes = match fmt {
                EmbeddingFormat::Int8 => v * d,
                EmbeddingFormat::Ternary => v * d / 4,
                _ => v * d / 2,
            };
            s.push(("embedding codes".into(), codes));
            s.push(("embedding scales".into(), v * 4));
        }
    }
    let mat = |s: &mut Vec<(String, u64)>, name: String, rows: u64, cols: u64, bias: bool| {
        s.push((format!("{name} weights"), rows * cols / 4));
        s.push((format!("{name} w_scale"), 4));
        if bias {
            s.push((format!("{name} bias"), rows * 4));
        }
    };
    for l in 0..c.n_layers {
        s.push((format!("layer {l} ln1 weight"), d * 4));
        s.push((format!("layer {l} ln1 bias"), d * 4));
        for m in ["Wq", "Wk", "Wv"] {
            mat(&mut s, format!("layer {l} {m}"), d, d, false);
        }
        mat(&mut s, format!("layer {l} Wout"), d, d, true);
        s.push((format!("layer {l} ln2 weight"), d * 4));
        s.push((format!("layer {l} ln2 bias"), d * 4));
        mat(&mut s, format!("layer {l} fc1"), f, d, true);
        mat(&mut s, format!("layer {l} fc2"), d, f, true);
    }
    s.push(("final ln weight".into(), d * 4));
    s.push(("final ln bias".into(), d * 4));
    s.push(("projection weights".into(), o * d * 4));
    s.push(("projection bias".into(), o * 4));
    s.push(("SHA-256 trailer".into(), TRAILER_LEN as u64));
    let total: u64 = s.iter().map(|(_, n)| n).sum();
    usize::try_from(total).ok()?;
    Some(s.into_iter().map(|(w, n)| (w, n as usize)).collect())
}

/// Bytes hashed per call of [`hash_chunk`].
const HASH_CHUNK: usize = 1 << 14;

/// One hashing step, kept out of line: in a wasm engine a function that is called many times
/// gets tiered up to optimised code after a few calls, while one long-running call would stay in
/// the baseline compiler's code for the whole 7.5 MB.
#[inline(never)]
fn hash_chunk(hasher: &mut Sha256, chunk: &[u8]) {
    hasher.update(chunk);
}

/// Ternary byte → its four weights (`00`=0, `01`=+1, `10`=−1; `11` reads 0 and is caught by
/// [`has_reserved_code`]).
static TERNARY_LUT: [[i8; 4]; 256] = {
    let mut t = [[0i8; 4]; 256];
    let mut b = 0;
    while b < 256 {
        let mut k = 0;
        while k < 4 {
            t[b][k] = match (b >> (2 * k)) & 3 {
                1 => 1,
                2 => -1,
                _ => 0,
            };
            k += 1;
        }
        b += 1;
    }
    t
};

/// Whether any 2-bit code in `bytes` is the reserved `11`.
pub(crate) fn has_reserved_code(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .fold(0u8, |acc, &b| acc | (b & (b >> 1) & 0x55))
        != 0
}

/// Unpacks one packed ternary row into `dst` (`dst.len() == 4 * src.len()`).
#[inline(never)]
fn unpack_row(src: &[u8], dst: &mut [i8]) {
    for (d4, &b) in dst.chunks_exact_mut(4).zip(src) {
        d4.copy_from_slice(&TERNARY_LUT[usize::from(b)]);
    }
}

/// Sequential reader over the content (header and body, trailer excluded).
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let available = self.bytes.len() - self.pos;
        if n > available {
            return Err(Error::Truncated {
                what: what.into(),
                offset: self.pos,
                needed: n,
                available,
            });
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn f32s(&mut self, n: usize, what: &str) -> Result<Vec<f32>> {
        let raw = self.take(n * 4, what)?;
        let v: Vec<f32> = raw
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if v.iter().any(|x| !x.is_finite()) {
            return Err(Error::BadValue(format!("{what}: NaN or infinity")));
        }
        Ok(v)
    }

    /// A packed ternary `[rows × cols]` matrix, its `w_scale` and (optionally) its bias.
    fn bit_matrix(
        &mut self,
        rows: usize,
        cols: usize,
        bias: bool,
        what: &str,
    ) -> Result<BitMatrix> {
        let packed = self.take(rows * cols / 4, &format!("{what} weights"))?;
        let scale = self.f32s(1, &format!("{what} w_scale"))?[0];
        if scale == 0.0 {
            return Err(Error::BadValue(format!("{what} w_scale is 0")));
        }
        let bias = if bias {
            self.f32s(rows, &format!("{what} bias"))?
        } else {
            vec![0.0; rows]
        };
        if has_reserved_code(packed) {
            return Err(Error::ReservedTernaryCode(what.into()));
        }
        let stride = padded(cols);
        let mut w = vec![0i8; rows * stride];
        for (r, row) in packed.chunks_exact(cols / 4).enumerate() {
            unpack_row(row, &mut w[r * stride..r * stride + cols]);
        }
        Ok(BitMatrix {
            rows,
            cols,
            stride,
            w,
            pairs: Vec::new(),
            w_scale: vec![scale; rows],
            inv_w_scale: vec![1.0 / scale; rows],
            bias,
        })
    }
}

/// Stacks matrices with the same column count into one (rows concatenated).
fn stack(parts: Vec<BitMatrix>) -> BitMatrix {
    let mut it = parts.into_iter();
    let mut acc = it.next().expect("stack of at least one matrix");
    for m in it {
        acc.rows += m.rows;
        acc.w.extend_from_slice(&m.w);
        acc.w_scale.extend_from_slice(&m.w_scale);
        acc.inv_w_scale.extend_from_slice(&m.inv_w_scale);
        acc.bias.extend_from_slice(&m.bias);
    }
    acc
}

/// Parses a whole TERN v1 file; the embedding codes are copied out of `bytes`.
///
/// # Errors
/// Any [`Error`] but [`Error::Vocab`]: bad header, wrong size, checksum mismatch, reserved ternary
/// codes, non-finite floats or zero weight scales.
pub fn load(bytes: &[u8]) -> Result<Weights> {
    let mut w = parse(bytes)?;
    let e = &mut w.embeddings;
    e.data = bytes[e.codes_at..e.codes_at + e.codes_len].to_vec();
    e.codes_at = 0;
    Ok(w)
}

/// [`load`] for a file handed over by value: the embedding codes stay where they are in it (no
/// second copy of the largest section).
///
/// # Errors
/// As [`load`].
pub fn load_owned(bytes: Vec<u8>) -> Result<Weights> {
    let mut w = parse(&bytes)?;
    if w.embeddings.codes_len > 0 {
        w.embeddings.data = bytes;
    }
    Ok(w)
}

/// Checks and parses everything; the embedding codes are only located (`codes_at`, `codes_len`
/// index into `bytes`) and `data` is left empty for the caller to fill.
fn parse(bytes: &[u8]) -> Result<Weights> {
    let config = Config::parse_header(bytes)?;
    let sections = layout(&config).ok_or_else(|| {
        Error::InconsistentDims("the file size implied by the header overflows".into())
    })?;
    let total: usize = sections.iter().map(|(_, n)| n).sum();
    if bytes.len() < total {
        let mut offset = 0usize;
        for (what, n) in &sections {
            if offset + n > bytes.len() {
                return Err(Error::Truncated {
                    what: what.clone(),
                    offset,
                    needed: *n,
                    available: bytes.len() - offset,
                });
            }
            offset += n;
        }
    }
    if bytes.len() > total {
        return Err(Error::TrailingBytes(bytes.len() - total));
    }
    let (content, trailer) = bytes.split_at(total - TRAILER_LEN);
    let mut hasher = Sha256::new();
    for chunk in content.chunks(HASH_CHUNK) {
        hash_chunk(&mut hasher, chunk);
    }
    let mut whole = hasher.clone();
    let digest = hasher.finalize();
    if digest.as_slice() != trailer {
        return Err(Error::ChecksumMismatch {
            expected: hex::encode(trailer),
            actual: hex::encode(digest),
        });
    }

    let mut cur = Cursor {
        bytes: content,
        pos: HEADER_LEN,
    };
    let v = config.vocab_size as usize;
    let d = usize::from(config.d_model);
    let f = usize::from(config.ffn_dim);
    let o = usize::from(config.output_dim);
    let fmt = config.embedding_format;
    let embeddings = if fmt == EmbeddingFormat::Fp32 {
        Embeddings {
            format: fmt,
            dim: d,
            data: Vec::new(),
            codes_at: 0,
            codes_len: 0,
            values: cur.f32s(v * d, "embeddings")?,
            scales: Vec::new(),
        }
    } else {
        let codes_at = cur.pos;
        let codes = cur.take(fmt.code_bytes(v, d), "embedding codes")?;
        if fmt == EmbeddingFormat::Ternary && has_reserved_code(codes) {
            return Err(Error::ReservedTernaryCode("embeddings".into()));
        }
        Embeddings {
            format: fmt,
            dim: d,
            data: Vec::new(),
            codes_at,
            codes_len: codes.len(),
            values: Vec::new(),
            scales: cur.f32s(v, "embedding scales")?,
        }
    };
    let mut layers = Vec::with_capacity(usize::from(config.n_layers));
    for l in 0..config.n_layers {
        let ln1_w = cur.f32s(d, &format!("layer {l} ln1 weight"))?;
        let ln1_b = cur.f32s(d, &format!("layer {l} ln1 bias"))?;
        let wq = cur.bit_matrix(d, d, false, &format!("layer {l} Wq"))?;
        let wk = cur.bit_matrix(d, d, false, &format!("layer {l} Wk"))?;
        let wv = cur.bit_matrix(d, d, false, &format!("layer {l} Wv"))?;
        let out = cur.bit_matrix(d, d, true, &format!("layer {l} Wout"))?;
        let ln2_w = cur.f32s(d, &format!("layer {l} ln2 weight"))?;
        let ln2_b = cur.f32s(d, &format!("layer {l} ln2 bias"))?;
        let fc1 = cur.bit_matrix(f, d, true, &format!("layer {l} fc1"))?;
        let fc2 = cur.bit_matrix(d, f, true, &format!("layer {l} fc2"))?;
        layers.push(Layer {
            ln1_w,
            ln1_b,
            qkv: stack(vec![wq, wk, wv]).with_pairs(),
            out: out.with_pairs(),
            ln2_w,
            ln2_b,
            fc1: fc1.with_pairs(),
            fc2: fc2.with_pairs(),
        });
    }
    let lnf_w = cur.f32s(d, "final ln weight")?;
    let lnf_b = cur.f32s(d, "final ln bias")?;
    let proj_w = cur.f32s(o * d, "projection weights")?;
    let proj_b = cur.f32s(o, "projection bias")?;
    debug_assert_eq!(cur.pos, content.len());
    whole.update(trailer);
    Ok(Weights {
        sha256: whole.finalize().into(),
        config,
        embeddings,
        layers,
        lnf_w,
        lnf_b,
        proj_w,
        proj_b,
    })
}
