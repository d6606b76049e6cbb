//! wasm32 relaxed-SIMD kernel (builds with `-C target-feature=+simd128,+relaxed-simd`):
//! `i32x4.relaxed_dot_i8x16_i7x16_add_s` does 16 multiply-adds per instruction.
//!
//! Its second operand must lie in 0..=127 for the result to be the same on every engine, so the
//! kernel feeds it `w + 1` ∈ {0, 1, 2} and subtracts `Σ q` per token afterwards:
//! `Σ q·w = Σ q·(w + 1) − Σ q`. Activations are narrowed from `i16` to `i8` on the fly (exact: they
//! are in −128..=127). Pair sums stay within ±512, so no engine's intermediate `i16` saturates.
//! 2 rows × 4 tokens per register block, like [`super::simd128`].

use core::arch::wasm32::{
    i32x4_extract_lane, i32x4_relaxed_dot_i8x16_i7x16_add, i32x4_splat, i8x16_add,
    i8x16_narrow_i16x8, i8x16_splat, v128, v128_load,
};

#[inline(always)]
fn hsum(v: v128) -> i32 {
    i32x4_extract_lane::<0>(v)
        .wrapping_add(i32x4_extract_lane::<1>(v))
        .wrapping_add(i32x4_extract_lane::<2>(v))
        .wrapping_add(i32x4_extract_lane::<3>(v))
}

/// One `R` rows × `T` tokens block starting at row `r0`, token `t0`; `qsum[j]` is `Σ q` of token
/// `t0 + j`.
///
/// # Safety
/// `r0 + R <= rows`, `t0 + T <= n_tokens`, `stride % 16 == 0`, and `w`/`q` hold
/// `rows × stride` / `n_tokens × stride` elements.
#[inline(never)]
#[allow(clippy::needless_range_loop)] // a[i][j]: the 2-D register block reads best indexed
#[allow(clippy::too_many_arguments)] // the block's coordinates; a struct would hide the hot path
unsafe fn block<const R: usize, const T: usize>(
    w: &[i8],
    q: &[i16],
    stride: usize,
    rows: usize,
    r0: usize,
    t0: usize,
    qsum: &[i32; T],
    acc: &mut [i32],
) {
    let wp = w.as_ptr();
    let qp = q.as_ptr();
    let one = i8x16_splat(1);
    let mut a = [[i32x4_splat(0); T]; R];
    let mut k = 0;
    while k < stride {
        let mut wv = [one; R];
        for (i, wi) in wv.iter_mut().enumerate() {
            // SAFETY: (r0 + i) < rows and k + 16 <= stride (caller's contract).
            *wi = i8x16_add(
                unsafe { v128_load(wp.add((r0 + i) * stride + k).cast()) },
                one,
            );
        }
        for j in 0..T {
            // SAFETY: (t0 + j) < n_tokens and k + 16 <= stride.
            let (lo, hi) = unsafe {
                let p = qp.add((t0 + j) * stride + k);
                (v128_load(p.cast()), v128_load(p.add(8).cast()))
            };
            let q8 = i8x16_narrow_i16x8(lo, hi);
            for i in 0..R {
                a[i][j] = i32x4_relaxed_dot_i8x16_i7x16_add(q8, wv[i], a[i][j]);
            }
        }
        k += 16;
    }
    for (i, ai) in a.iter().enumerate() {
        for (j, &v) in ai.iter().enumerate() {
            acc[(t0 + j) * rows + r0 + i] = hsum(v).wrapping_sub(qsum[j]);
        }
    }
}

/// All rows for tokens `t0..t0 + T`.
#[inline(always)]
fn tokens<const T: usize>(
    w: &[i8],
    q: &[i16],
    stride: usize,
    rows: usize,
    t0: usize,
    acc: &mut [i32],
) {
    let mut qsum = [0i32; T];
    for (j, s) in qsum.iter_mut().enumerate() {
        *s = q[(t0 + j) * stride..(t0 + j + 1) * stride]
            .iter()
            .map(|&v| i32::from(v))
            .sum();
    }
    let mut r = 0;
    while r + 2 <= rows {
        // SAFETY: r + 2 <= rows, t0 + T <= n_tokens (checked by `matmul`'s loop and assert).
        unsafe { block::<2, T>(w, q, stride, rows, r, t0, &qsum, acc) };
        r += 2;
    }
    if r < rows {
        // SAFETY: r < rows.
        unsafe { block::<1, T>(w, q, stride, rows, r, t0, &qsum, acc) };
    }
}

/// See [`crate::kernels`].
pub fn matmul(w: &[i8], rows: usize, q: &[i16], n_tokens: usize, stride: usize, acc: &mut [i32]) {
    assert!(
        stride % 16 == 0
            && w.len() >= rows * stride
            && q.len() >= n_tokens * stride
            && acc.len() >= n_tokens * rows
    );
    let mut t = 0;
    while t + 4 <= n_tokens {
        tokens::<4>(w, q, stride, rows, t, acc);
        t += 4;
    }
    match n_tokens - t {
        3 => tokens::<3>(w, q, stride, rows, t, acc),
        2 => tokens::<2>(w, q, stride, rows, t, acc),
        1 => tokens::<1>(w, q, stride, rows, t, acc),
        _ => {}
    }
}
