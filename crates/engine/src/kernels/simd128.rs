//! wasm32 `simd128` kernel, products summed in pairs by `i32x4.dot_i16x8_s`.
//!
//! Weights packed two rows per `i16` ([`super::pack_pairs`]), so each `dot` does the
//! multiply-adds of two rows at once; the lanes are split into the two rows' sums every
//! `PAIR_STEPS` steps (exact: the first row's share never leaves the low 14 bits). Register
//! blocks of 2 pairs (4 rows) × 4 tokens: 22 instructions per 128 multiply-adds. simd128 has no
//! wider exact integer product, and the kernel is bound by how many `pmaddwd` the CPU issues
//! (docs/engine.md), so doubling the work of each one made it ≈ 1.45× faster than the kernel it
//! replaced (one `i8` per weight widened by `i16x8.load8x8_s`, 22 instructions per 64).

use super::PAIR_SHIFT;
use core::arch::wasm32::{
    i32x4_add, i32x4_dot_i16x8, i32x4_extract_lane, i32x4_shuffle, i32x4_splat, v128, v128_load,
};

#[inline(always)]
fn hsum(v: v128) -> i32 {
    i32x4_extract_lane::<0>(v)
        .wrapping_add(i32x4_extract_lane::<1>(v))
        .wrapping_add(i32x4_extract_lane::<2>(v))
        .wrapping_add(i32x4_extract_lane::<3>(v))
}

/// The four horizontal sums of `a`, `b`, `c`, `d`, as the lanes of one vector (6 operations instead
/// of 4 × 6).
#[inline(always)]
fn hsum4(a: v128, b: v128, c: v128, d: v128) -> v128 {
    let ab = i32x4_add(
        i32x4_shuffle::<0, 4, 1, 5>(a, b),
        i32x4_shuffle::<2, 6, 3, 7>(a, b),
    );
    let cd = i32x4_add(
        i32x4_shuffle::<0, 4, 1, 5>(c, d),
        i32x4_shuffle::<2, 6, 3, 7>(c, d),
    );
    i32x4_add(
        i32x4_shuffle::<0, 1, 4, 5>(ab, cd),
        i32x4_shuffle::<2, 3, 6, 7>(ab, cd),
    )
}

/// [`matmul_pairs`] for callers holding one `i8` per weight: packs them first (an allocation
/// per call; the engine keeps its weights packed, see [`crate::model::BitMatrix::with_pairs`]).
pub fn matmul(w: &[i8], rows: usize, q: &[i16], n_tokens: usize, stride: usize, acc: &mut [i32]) {
    matmul_pairs(
        &super::pack_pairs(w, rows, stride),
        rows,
        q,
        n_tokens,
        stride,
        acc,
    );
}

/// Dot steps (8 columns each) a packed accumulator takes before its two rows are split apart:
/// the first row's share of a lane stays within ±256 per step, so after 31 steps it is inside
/// ±7 936, clear of the ±8 192 that [`PAIR_SHIFT`] bits leave it.
const PAIR_STEPS: usize = 31;

/// One `P` row pairs × `T` tokens block, starting at pair `p0`, token `t0`.
///
/// # Safety
/// `p0 + P <= pairs`, `t0 + T <= n_tokens`, `stride % 8 == 0`, `wp` holds `pairs × stride` and
/// `q` `n_tokens × stride` elements.
///
/// Kept out of line on purpose: V8 first runs wasm in its baseline tier and switches a function to
/// optimised code on a later *call*, so a product made of many small calls gets fast early in the
/// first embed (a cold start cost) instead of after it; the call costs ~2% of a block.
#[inline(never)]
#[allow(clippy::needless_range_loop)]
unsafe fn pair_block<const P: usize, const T: usize>(
    wp: &[i16],
    q: &[i16],
    stride: usize,
    rows: usize,
    p0: usize,
    t0: usize,
    acc: &mut [i32],
) {
    use core::arch::wasm32::{i32x4_shl, i32x4_shr, i32x4_sub};
    let wptr = wp.as_ptr();
    let qp = q.as_ptr();
    let mut first = [[i32x4_splat(0); T]; P];
    let mut second = [[i32x4_splat(0); T]; P];
    let mut k = 0;
    while k < stride {
        let end = stride.min(k + 8 * PAIR_STEPS);
        let mut a = [[i32x4_splat(0); T]; P];
        while k < end {
            let mut wv = [i32x4_splat(0); P];
            for (i, wi) in wv.iter_mut().enumerate() {
                // SAFETY: (p0 + i) < pairs and k + 8 <= stride (caller's contract).
                *wi = unsafe { v128_load(wptr.add((p0 + i) * stride + k).cast()) };
            }
            for j in 0..T {
                // SAFETY: (t0 + j) < n_tokens and k + 8 <= stride.
                let qv = unsafe { v128_load(qp.add((t0 + j) * stride + k).cast()) };
                for i in 0..P {
                    a[i][j] = i32x4_add(a[i][j], i32x4_dot_i16x8(wv[i], qv));
                }
            }
            k += 8;
        }
        // Split each lane `A + 2^14·B` into the first row's `A` (the low 14 bits, sign
        // extended) and the second row's `B`.
        for i in 0..P {
            for j in 0..T {
                let lo = i32x4_shr(i32x4_shl(a[i][j], 32 - PAIR_SHIFT), 32 - PAIR_SHIFT);
                let hi = i32x4_shr(i32x4_sub(a[i][j], lo), PAIR_SHIFT);
                first[i][j] = i32x4_add(first[i][j], lo);
                second[i][j] = i32x4_add(second[i][j], hi);
            }
        }
    }
    for i in 0..P {
        for (half, sums) in [&first[i], &second[i]].into_iter().enumerate() {
            let r = 2 * (p0 + i) + half;
            if r >= rows {
                continue;
            }
            if T == 4 {
                let s = hsum4(sums[0], sums[1], sums[2], sums[3]);
                acc[t0 * rows + r] = i32x4_extract_lane::<0>(s);
                acc[(t0 + 1) * rows + r] = i32x4_extract_lane::<1>(s);
                acc[(t0 + 2) * rows + r] = i32x4_extract_lane::<2>(s);
                acc[(t0 + 3) * rows + r] = i32x4_extract_lane::<3>(s);
            } else {
                for (j, &v) in sums.iter().enumerate() {
                    acc[(t0 + j) * rows + r] = hsum(v);
                }
            }
        }
    }
}

/// All row pairs for tokens `t0..t0 + T`.
#[inline(always)]
fn pair_tokens<const T: usize>(
    wp: &[i16],
    q: &[i16],
    stride: usize,
    rows: usize,
    t0: usize,
    acc: &mut [i32],
) {
    let pairs = rows.div_ceil(2);
    let mut p = 0;
    while p + 2 <= pairs {
        // SAFETY: p + 2 <= pairs, t0 + T <= n_tokens (checked by `matmul_pairs`).
        unsafe { pair_block::<2, T>(wp, q, stride, rows, p, t0, acc) };
        p += 2;
    }
    if p < pairs {
        // SAFETY: p < pairs.
        unsafe { pair_block::<1, T>(wp, q, stride, rows, p, t0, acc) };
    }
}

/// The product of [`crate::kernels`] over row pairs packed by [`super::pack_pairs`]: each
/// `i32x4.dot_i16x8_s` serves two rows (16 multiply-adds instead of 8).
pub fn matmul_pairs(
    wp: &[i16],
    rows: usize,
    q: &[i16],
    n_tokens: usize,
    stride: usize,
    acc: &mut [i32],
) {
    assert!(
        stride % 8 == 0
            && wp.len() >= rows.div_ceil(2) * stride
            && q.len() >= n_tokens * stride
            && acc.len() >= n_tokens * rows
    );
    let mut t = 0;
    while t + 4 <= n_tokens {
        pair_tokens::<4>(wp, q, stride, rows, t, acc);
        t += 4;
    }
    match n_tokens - t {
        3 => pair_tokens::<3>(wp, q, stride, rows, t, acc),
        2 => pair_tokens::<2>(wp, q, stride, rows, t, acc),
        1 => pair_tokens::<1>(wp, q, stride, rows, t, acc),
        _ => {}
    }
}
