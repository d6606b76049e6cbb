//! Multi-head self-attention over one sequence: `softmax(QKᵀ/√d_head)·V` per head, no mask.
//!
//! Written as two small register-blocked products so that they vectorise: scores for 4 queries ×
//! 8 keys at a time against Kᵀ (each key vector load serves four queries), and the weighted sum of
//! V for 4 queries × 8 output columns at a time (each V load serves four queries). Sums run in
//! plain order over `d_head` / the keys; the softmax uses [`crate::math::exp`].

use crate::math::{exp, max, sum_lanes};

/// Queries per block.
const QB: usize = 4;
/// Keys (scores) or output columns (context) per block.
const CB: usize = 8;

/// Attention for `n` tokens whose stacked projections are `qkv` (`n × 3d`: Q, K, V), writing the
/// per-head context into `ctx` (`n × d`). `kt` needs `n·d` floats, `scores` `4·n`. Inlined into
/// the forward pass on x86-64, so that its AVX2 copy (forward.rs) covers attention too.
#[cfg_attr(target_arch = "x86_64", inline(always))]
pub fn attention(
    qkv: &[f32],
    n: usize,
    d: usize,
    heads: usize,
    kt: &mut [f32],
    scores: &mut [f32],
    ctx: &mut [f32],
) {
    let dh = d / heads;
    let row = 3 * d;
    let scale = 1.0 / (dh as f32).sqrt();
    for hd in 0..heads {
        let (qo, ko, vo) = (hd * dh, d + hd * dh, 2 * d + hd * dh);
        // Kᵀ of this head: `dh` rows of `n` keys.
        for j in 0..n {
            for (e, &v) in qkv[j * row + ko..j * row + ko + dh].iter().enumerate() {
                kt[e * n + j] = v;
            }
        }
        let mut i0 = 0;
        while i0 < n {
            let m = (n - i0).min(QB);
            let sc = &mut scores[..m * n];
            match m {
                4 => scores_block::<4>(qkv, row, qo + i0 * row, dh, kt, n, sc),
                3 => scores_block::<3>(qkv, row, qo + i0 * row, dh, kt, n, sc),
                2 => scores_block::<2>(qkv, row, qo + i0 * row, dh, kt, n, sc),
                _ => scores_block::<1>(qkv, row, qo + i0 * row, dh, kt, n, sc),
            }
            for s in sc.chunks_exact_mut(n) {
                let mx = max(s);
                for v in s.iter_mut() {
                    *v = exp((*v - mx) * scale);
                }
                let inv = 1.0 / sum_lanes(s);
                for v in s.iter_mut() {
                    *v *= inv;
                }
            }
            let out = i0 * d + qo;
            match m {
                4 => context_block::<4>(sc, qkv, row, vo, n, dh, ctx, out, d),
                3 => context_block::<3>(sc, qkv, row, vo, n, dh, ctx, out, d),
                2 => context_block::<2>(sc, qkv, row, vo, n, dh, ctx, out, d),
                _ => context_block::<1>(sc, qkv, row, vo, n, dh, ctx, out, d),
            }
            i0 += m;
        }
    }
}

/// Raw scores `q_r · k_j` (unscaled) of `M` consecutive queries (the first at `qkv[q0..]`, rows
/// `row` apart) against all `n` keys in `kt`, into `out` (`M × n`).
#[inline(always)]
fn scores_block<const M: usize>(
    qkv: &[f32],
    row: usize,
    q0: usize,
    dh: usize,
    kt: &[f32],
    n: usize,
    out: &mut [f32],
) {
    let q = |r: usize, e: usize| qkv[q0 + r * row + e];
    let mut j0 = 0;
    while j0 + CB <= n {
        let mut acc = [[0f32; CB]; M];
        for e in 0..dh {
            let k: &[f32; CB] = kt[e * n + j0..e * n + j0 + CB]
                .try_into()
                .unwrap_or(&[0.0; CB]);
            for (r, a) in acc.iter_mut().enumerate() {
                let qv = q(r, e);
                for c in 0..CB {
                    a[c] += qv * k[c];
                }
            }
        }
        for (r, a) in acc.iter().enumerate() {
            out[r * n + j0..r * n + j0 + CB].copy_from_slice(a);
        }
        j0 += CB;
    }
    for j in j0..n {
        for r in 0..M {
            let mut s = 0f32;
            for e in 0..dh {
                s += q(r, e) * kt[e * n + j];
            }
            out[r * n + j] = s;
        }
    }
}

/// `ctx[out + r·d + e] = Σ_j p[r·n + j] · V[j][e]` for `M` queries, V rows at `qkv[vo + j·row..]`.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // the block's coordinates; a struct would hide the hot path
fn context_block<const M: usize>(
    p: &[f32],
    qkv: &[f32],
    row: usize,
    vo: usize,
    n: usize,
    dh: usize,
    ctx: &mut [f32],
    out: usize,
    d: usize,
) {
    let mut e0 = 0;
    while e0 + CB <= dh {
        let mut acc = [[0f32; CB]; M];
        for j in 0..n {
            let at = j * row + vo + e0;
            let v: &[f32; CB] = qkv[at..at + CB].try_into().unwrap_or(&[0.0; CB]);
            for (r, a) in acc.iter_mut().enumerate() {
                let pr = p[r * n + j];
                for c in 0..CB {
                    a[c] += pr * v[c];
                }
            }
        }
        for (r, a) in acc.iter().enumerate() {
            ctx[out + r * d + e0..out + r * d + e0 + CB].copy_from_slice(a);
        }
        e0 += CB;
    }
    for e in e0..dh {
        for r in 0..M {
            let mut s = 0f32;
            for j in 0..n {
                s += p[r * n + j] * qkv[j * row + vo + e];
            }
            ctx[out + r * d + e] = s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Rng;

    /// Textbook attention in f64.
    fn naive(qkv: &[f32], n: usize, d: usize, heads: usize) -> Vec<f64> {
        let dh = d / heads;
        let row = 3 * d;
        let mut ctx = vec![0f64; n * d];
        for h in 0..heads {
            for i in 0..n {
                let s: Vec<f64> = (0..n)
                    .map(|j| {
                        (0..dh)
                            .map(|e| {
                                f64::from(qkv[i * row + h * dh + e])
                                    * f64::from(qkv[j * row + d + h * dh + e])
                            })
                            .sum::<f64>()
                            / (dh as f64).sqrt()
                    })
                    .collect();
                let mx = s.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = s.iter().map(|v| (v - mx).exp()).sum();
                for j in 0..n {
                    let p = (s[j] - mx).exp() / z;
                    for e in 0..dh {
                        ctx[i * d + h * dh + e] += p * f64::from(qkv[j * row + 2 * d + h * dh + e]);
                    }
                }
            }
        }
        ctx
    }

    #[test]
    fn matches_textbook_attention() {
        let mut rng = Rng::new(3);
        for (n, d, heads) in [(1, 8, 1), (3, 12, 3), (9, 48, 6), (17, 64, 4), (30, 40, 5)] {
            let qkv: Vec<f32> = (0..n * 3 * d).map(|_| rng.uniform(-2.0, 2.0)).collect();
            let (mut kt, mut scores, mut ctx) =
                (vec![0.0; n * d], vec![0.0; 4 * n], vec![0.0; n * d]);
            attention(&qkv, n, d, heads, &mut kt, &mut scores, &mut ctx);
            let want = naive(&qkv, n, d, heads);
            for (g, w) in ctx.iter().zip(&want) {
                assert!((f64::from(*g) - w).abs() < 1e-5, "n {n} d {d}: {g} vs {w}");
            }
        }
    }
}
