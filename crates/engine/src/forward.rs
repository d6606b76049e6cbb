//! The forward pass: token ids → one L2-normalised vector.
//!
//! Pre-LN transformer (eps 1e-5), every linear layer but the final projection a BitLinear:
//! parameter-free LN (eps 1e-5) → `s = 128 / max(max|x|, 1e-5)` →
//! `q = clamp(round(x·s), −128, 127)` with `round` = round half away from zero ([`f32::round`]) →
//! `acc = Σ q·w` (exact `i32`) → `y = (acc + bias) / (w_scale · s)`.
//! Attention is `softmax(QKᵀ/√d_head)·V` over all tokens; the FFN is fc1 → exact-erf GELU → fc2.
//! Then final LN, mean pool over every token (`[CLS]` and `[SEP]` included), the fp32 projection
//! and L2 normalisation (`e / max(‖e‖, 1e-12)`).
//!
//! All buffers live in [`Scratch`], sized at construction for up to 128 tokens (grown once for
//! models that accept more): a warm call allocates nothing (`tests/no_alloc.rs`). Attention is in
//! [`crate::attention`], the integer products in [`crate::kernels`].

use crate::attention::attention;
use crate::kernels::{scalar, Kernel};
use crate::math::{gelu, max_abs, round_half_away, small_int, sum_lanes, sum_sq_dev};
use crate::model::{padded, BitMatrix, Weights};

const LN_EPS: f32 = 1e-5;

/// Reusable buffers for one forward pass of up to `max_seq_len` tokens.
#[derive(Debug, Clone)]
pub struct Scratch {
    x: Vec<f32>,
    h: Vec<f32>,
    qkv: Vec<f32>,
    ctx: Vec<f32>,
    ff: Vec<f32>,
    q: Vec<i16>,
    inv_s: Vec<f32>,
    acc: Vec<i32>,
    scores: Vec<f32>,
    pooled: Vec<f32>,
    tmp: Vec<f32>,
    kt: Vec<f32>,
}

impl Scratch {
    /// Buffers for `w`'s shape, sized for up to 128 tokens (they grow on demand, once, for
    /// models that accept more).
    #[must_use]
    pub fn new(w: &Weights) -> Self {
        let mut s = Self {
            x: Vec::new(),
            h: Vec::new(),
            qkv: Vec::new(),
            ctx: Vec::new(),
            ff: Vec::new(),
            q: Vec::new(),
            inv_s: Vec::new(),
            acc: Vec::new(),
            scores: Vec::new(),
            pooled: Vec::new(),
            tmp: Vec::new(),
            kt: Vec::new(),
        };
        s.reserve(w, usize::from(w.config.max_seq_len).min(128));
        s
    }

    /// Makes every buffer large enough for `t` tokens.
    fn reserve(&mut self, w: &Weights, t: usize) {
        if self.inv_s.len() >= t {
            return;
        }
        let c = &w.config;
        let d = usize::from(c.d_model);
        let f = usize::from(c.ffn_dim);
        self.x.resize(t * d, 0.0);
        self.h.resize(t * d, 0.0);
        self.qkv.resize(t * 3 * d, 0.0);
        self.ctx.resize(t * d, 0.0);
        self.ff.resize(t * f, 0.0);
        self.q.resize(t * padded(d.max(f)), 0);
        self.inv_s.resize(t, 0.0);
        self.acc.resize(t * (3 * d).max(f), 0);
        self.scores.resize(4 * t, 0.0);
        self.pooled.resize(d, 0.0);
        self.tmp.resize(d.max(f), 0.0);
        self.kt.resize(t * d, 0.0);
    }
}

/// Layer norm of one row into `out`, with optional weight and bias.
#[cfg_attr(target_arch = "x86_64", inline(always))] // into the AVX2 copy of the pass
fn layer_norm(x: &[f32], w: Option<(&[f32], &[f32])>, out: &mut [f32]) {
    let n = x.len() as f32;
    let mean = sum_lanes(x) / n;
    let var = sum_sq_dev(x, mean) / n;
    let inv = 1.0 / (var + LN_EPS).sqrt();
    let out = &mut out[..x.len()];
    match w {
        Some((g, b)) => {
            let (g, b) = (&g[..x.len()], &b[..x.len()]);
            for i in 0..x.len() {
                out[i] = (x[i] - mean) * inv * g[i] + b[i];
            }
        }
        None => {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = (v - mean) * inv;
            }
        }
    }
}

/// Parameter-free LN and absmax quantisation of one row; returns `1/s`.
#[cfg_attr(target_arch = "x86_64", inline(always))] // into the AVX2 copy of the pass
fn quantize_row(x: &[f32], tmp: &mut [f32], q: &mut [i16]) -> f32 {
    let n = x.len();
    layer_norm(x, None, &mut tmp[..n]);
    let max = max_abs(&tmp[..n]);
    let s = 128.0 / if max > 1e-5 { max } else { 1e-5 };
    for (qi, &v) in q[..n].iter_mut().zip(&tmp[..n]) {
        *qi = small_int(round_half_away(v * s).clamp(-128.0, 127.0));
    }
    q[n..].fill(0);
    1.0 / s
}

/// Where a forward pass spends its time, marked as it goes (`ternflow bench --profile`): each
/// mark ends the named stage. Production passes [`NoStages`], which compiles to nothing; the
/// numbers computed are the same either way (the marks only read a clock).
pub trait Stages {
    /// The stage that just ended.
    fn end(&mut self, stage: Stage);
}

/// The stages of one embed, in the order they first run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Normalising and WordPiece-splitting the text.
    Tokenize,
    /// Reading (decoding) the tokens' embedding rows.
    Embed,
    /// The blocks' layer norms (with weights).
    LayerNorm,
    /// BitLinear's activation quantisation (parameter-free LN, absmax, round to `i8`).
    Quantize,
    /// The integer products of the stacked Q/K/V matrix.
    MatmulQkv,
    /// Self-attention (scores, softmax, weighted values).
    Attention,
    /// The integer products of the attention output matrix.
    MatmulOut,
    /// The integer products of the FFN's first matrix.
    MatmulFc1,
    /// GELU.
    Gelu,
    /// The integer products of the FFN's second matrix.
    MatmulFc2,
    /// BitLinear's dequantisation (`(acc + bias) / (w_scale · s)`).
    Dequantize,
    /// The residual additions.
    Residual,
    /// Final layer norm, mean pooling, the projection and L2 normalisation.
    PoolProject,
}

impl Stage {
    /// Every stage, in order.
    pub const ALL: [Stage; 13] = [
        Stage::Tokenize,
        Stage::Embed,
        Stage::LayerNorm,
        Stage::Quantize,
        Stage::MatmulQkv,
        Stage::Attention,
        Stage::MatmulOut,
        Stage::MatmulFc1,
        Stage::Gelu,
        Stage::MatmulFc2,
        Stage::Dequantize,
        Stage::Residual,
        Stage::PoolProject,
    ];

    /// Its name in the profile.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Stage::Tokenize => "tokenize",
            Stage::Embed => "embedding rows",
            Stage::LayerNorm => "layer norms",
            Stage::Quantize => "activation quantisation",
            Stage::MatmulQkv => "matmul Q/K/V",
            Stage::Attention => "attention",
            Stage::MatmulOut => "matmul attention out",
            Stage::MatmulFc1 => "matmul FFN up",
            Stage::Gelu => "GELU",
            Stage::MatmulFc2 => "matmul FFN down",
            Stage::Dequantize => "dequantisation",
            Stage::Residual => "residual adds",
            Stage::PoolProject => "final norm, pool, projection",
        }
    }
}

/// No marks: the production forward pass.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoStages;

impl Stages for NoStages {
    #[inline(always)]
    fn end(&mut self, _: Stage) {}
}

/// BitLinear over `n` rows of `input` (row length `m.cols`): writes `n × m.rows` into `out`.
#[allow(clippy::too_many_arguments)] // the stage marker is the one extra, for the profile
#[cfg_attr(target_arch = "x86_64", inline(always))] // into the AVX2 copy of the pass
fn bit_linear<S: Stages>(
    kernel: Kernel,
    m: &BitMatrix,
    input: &[f32],
    n: usize,
    s: &mut QuantBufs<'_>,
    out: &mut [f32],
    st: &mut S,
    matmul: Stage,
) {
    let (cols, stride, rows) = (m.cols, m.stride, m.rows);
    for t in 0..n {
        s.inv_s[t] = quantize_row(
            &input[t * cols..(t + 1) * cols],
            s.tmp,
            &mut s.q[t * stride..(t + 1) * stride],
        );
    }
    st.end(Stage::Quantize);
    kernel.matmul_matrix(m, s.q, n, s.acc);
    st.end(matmul);
    for t in 0..n {
        let inv_s = s.inv_s[t];
        let acc = &s.acc[t * rows..(t + 1) * rows];
        let o = &mut out[t * rows..(t + 1) * rows];
        // Zipped slices of one length: no bounds check per element, so the loop vectorises
        // inside the AVX2 copy of the pass too (with indexing it did not: 5× slower there).
        let (bias, inv_w) = (&m.bias[..rows], &m.inv_w_scale[..rows]);
        for (((o, &a), &b), &iw) in o.iter_mut().zip(acc).zip(bias).zip(inv_w) {
            *o = (a as f32 + b) * (iw * inv_s);
        }
    }
    st.end(Stage::Dequantize);
}

/// The quantisation buffers of [`Scratch`], borrowed apart from the float ones.
struct QuantBufs<'a> {
    q: &'a mut [i16],
    inv_s: &'a mut [f32],
    acc: &'a mut [i32],
    tmp: &'a mut [f32],
}

/// Runs the model on `ids` (1 ≤ len ≤ `max_seq_len`, every id < `vocab_size`) and writes the
/// L2-normalised output vector into `out[..output_dim]`.
pub fn forward(w: &Weights, kernel: Kernel, ids: &[u32], sc: &mut Scratch, out: &mut [f32]) {
    forward_marked(w, kernel, ids, sc, out, &mut NoStages);
}

/// [`forward`], marking the end of every stage on `st`. With an x86-64 SIMD kernel the whole
/// pass (norms, quantisation, attention, GELU, dequantisation; the integer products are the
/// kernel's own) runs compiled for AVX2 ([`forward_avx2`]): the same IEEE operations in the same
/// order, eight lanes instead of four and `roundps` instead of a `truncf` call, so the vectors
/// are bit-identical (`tests/determinism.rs`).
pub fn forward_marked<S: Stages>(
    w: &Weights,
    kernel: Kernel,
    ids: &[u32],
    sc: &mut Scratch,
    out: &mut [f32],
    st: &mut S,
) {
    #[cfg(target_arch = "x86_64")]
    if kernel.is_x86_simd() {
        // SAFETY: an x86 SIMD kernel is only constructed after run-time detection of AVX2
        // (`Kernel::best`, `Kernel::available`).
        return unsafe { forward_avx2(w, kernel, ids, sc, out, st) };
    }
    forward_body(w, kernel, ids, sc, out, st);
}

/// [`forward_body`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn forward_avx2<S: Stages>(
    w: &Weights,
    kernel: Kernel,
    ids: &[u32],
    sc: &mut Scratch,
    out: &mut [f32],
    st: &mut S,
) {
    forward_body(w, kernel, ids, sc, out, st);
}

#[cfg_attr(target_arch = "x86_64", inline(always))] // into the AVX2 copy of the pass
fn forward_body<S: Stages>(
    w: &Weights,
    kernel: Kernel,
    ids: &[u32],
    sc: &mut Scratch,
    out: &mut [f32],
    st: &mut S,
) {
    let c = &w.config;
    let d = usize::from(c.d_model);
    let f = usize::from(c.ffn_dim);
    let n = ids.len();
    let heads = usize::from(c.n_heads);
    sc.reserve(w, n);
    let Scratch {
        x,
        h,
        qkv,
        ctx,
        ff,
        q,
        inv_s,
        acc,
        scores,
        pooled,
        tmp,
        kt,
    } = sc;
    let mut qb = QuantBufs { q, inv_s, acc, tmp };
    for (t, &id) in ids.iter().enumerate() {
        w.embeddings
            .row_into(id as usize, &mut x[t * d..(t + 1) * d]);
    }
    st.end(Stage::Embed);
    for layer in &w.layers {
        // Attention block.
        for t in 0..n {
            layer_norm(
                &x[t * d..(t + 1) * d],
                Some((&layer.ln1_w, &layer.ln1_b)),
                &mut h[t * d..(t + 1) * d],
            );
        }
        st.end(Stage::LayerNorm);
        bit_linear(kernel, &layer.qkv, h, n, &mut qb, qkv, st, Stage::MatmulQkv);
        attention(qkv, n, d, heads, kt, scores, ctx);
        st.end(Stage::Attention);
        bit_linear(kernel, &layer.out, ctx, n, &mut qb, h, st, Stage::MatmulOut);
        for (xi, hi) in x[..n * d].iter_mut().zip(&h[..n * d]) {
            *xi += hi;
        }
        st.end(Stage::Residual);
        // FFN block.
        for t in 0..n {
            layer_norm(
                &x[t * d..(t + 1) * d],
                Some((&layer.ln2_w, &layer.ln2_b)),
                &mut h[t * d..(t + 1) * d],
            );
        }
        st.end(Stage::LayerNorm);
        bit_linear(kernel, &layer.fc1, h, n, &mut qb, ff, st, Stage::MatmulFc1);
        for v in ff[..n * f].iter_mut() {
            *v = gelu(*v);
        }
        st.end(Stage::Gelu);
        bit_linear(kernel, &layer.fc2, ff, n, &mut qb, h, st, Stage::MatmulFc2);
        for (xi, hi) in x[..n * d].iter_mut().zip(&h[..n * d]) {
            *xi += hi;
        }
        st.end(Stage::Residual);
    }
    // Final LN and mean pool.
    pooled.fill(0.0);
    for t in 0..n {
        layer_norm(
            &x[t * d..(t + 1) * d],
            Some((&w.lnf_w, &w.lnf_b)),
            &mut h[..d],
        );
        for (p, v) in pooled.iter_mut().zip(&h[..d]) {
            *p += v;
        }
    }
    let inv_n = 1.0 / n as f32;
    for p in pooled.iter_mut() {
        *p *= inv_n;
    }
    let o = usize::from(c.output_dim);
    let out = &mut out[..o];
    for (r, v) in out.iter_mut().enumerate() {
        *v = scalar::dot_f32(&w.proj_w[r * d..(r + 1) * d], pooled) + w.proj_b[r];
    }
    crate::math::l2_normalize(out);
    st.end(Stage::PoolProject);
}
