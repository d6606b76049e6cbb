//! wasm32 `simd128` kernel: weights widened on load (`i16x8.load8x8_s`), products summed in pairs
//! (`i32x4.dot_i16x8_s`). Register blocks of 2 weight rows × 4 tokens: each 8-weight load serves
//! four tokens and each activation load two rows (22 instructions per 64 multiply-adds).

use core::arch::wasm32::{
    i16x8_load_extend_i8x8, i32x4_add, i32x4_dot_i16x8, i32x4_extract_lane, i32x4_shuffle,
    i32x4_splat, v128, v128_load,
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

/// One `R` rows × `T` tokens block starting at row `r0`, token `t0`.
///
/// # Safety
/// `r0 + R <= rows`, `t0 + T <= n_tokens`, `stride % 8 == 0`, and `w`/`q` hold
/// `rows × stride` / `n_tokens × stride` elements.
///
/// Kept out of line on purpose: V8 first runs wasm in its baseline tier and switches a function to
/// optimised code on a later *call*, so a product made of many small calls gets fast early in the
/// first embed (a cold start cost) instead of after it; the call costs ~2% of a block.
#[inline(never)]
#[allow(clippy::needless_range_loop)] // a[i][j]: the 2-D register block reads best indexed
unsafe fn block<const R: usize, const T: usize>(
    w: &[i8],
    q: &[i16],
    stride: usize,
    rows: usize,
    r0: usize,
    t0: usize,
    acc: &mut [i32],
) {
    let wp = w.as_ptr();
    let qp = q.as_ptr();
    let mut a = [[i32x4_splat(0); T]; R];
    let mut k = 0;
    while k < stride {
        let mut wv = [i32x4_splat(0); R];
        for (i, wi) in wv.iter_mut().enumerate() {
            // SAFETY: (r0 + i) < rows and k + 8 <= stride (caller's contract).
            *wi = unsafe { i16x8_load_extend_i8x8(wp.add((r0 + i) * stride + k)) };
        }
        for j in 0..T {
            // SAFETY: (t0 + j) < n_tokens and k + 8 <= stride.
            let qv = unsafe { v128_load(qp.add((t0 + j) * stride + k).cast()) };
            for i in 0..R {
                a[i][j] = i32x4_add(a[i][j], i32x4_dot_i16x8(wv[i], qv));
            }
        }
        k += 8;
    }
    for (i, ai) in a.iter().enumerate() {
        if T == 4 {
            let sums = hsum4(ai[0], ai[1], ai[2], ai[3]);
            acc[t0 * rows + r0 + i] = i32x4_extract_lane::<0>(sums);
            acc[(t0 + 1) * rows + r0 + i] = i32x4_extract_lane::<1>(sums);
            acc[(t0 + 2) * rows + r0 + i] = i32x4_extract_lane::<2>(sums);
            acc[(t0 + 3) * rows + r0 + i] = i32x4_extract_lane::<3>(sums);
        } else {
            for (j, &v) in ai.iter().enumerate() {
                acc[(t0 + j) * rows + r0 + i] = hsum(v);
            }
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
    let mut r = 0;
    while r + 2 <= rows {
        // SAFETY: r + 2 <= rows, t0 + T <= n_tokens (checked by `matmul`'s loop and assert).
        unsafe { block::<2, T>(w, q, stride, rows, r, t0, acc) };
        r += 2;
    }
    if r < rows {
        // SAFETY: r < rows.
        unsafe { block::<1, T>(w, q, stride, rows, r, t0, acc) };
    }
}

/// See [`crate::kernels`].
pub fn matmul(w: &[i8], rows: usize, q: &[i16], n_tokens: usize, stride: usize, acc: &mut [i32]) {
    assert!(
        stride % 8 == 0
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
