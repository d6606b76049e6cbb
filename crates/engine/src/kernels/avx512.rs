//! x86-64 AVX-512 VNNI kernel (`avx512f` + `avx512bw` + `avx512vnni`, chosen at run time):
//! `vpdpbusd` does 64 multiply-adds per instruction.
//!
//! `vpdpbusd` multiplies unsigned by signed bytes, so it is fed `w + 1` ∈ {0, 1, 2} (unsigned) and
//! the activations narrowed to `i8` (`vpmovwb`, exact: they are in −128..=127); `Σ q` per token is
//! subtracted at the end: `Σ q·w = Σ q·(w + 1) − Σ q`. Four-byte products are summed straight into
//! `i32` lanes, so nothing saturates. Register blocks of 4 weight rows × 4 tokens.
//!
//! Behind the cargo feature `avx512`: the AVX-512 intrinsics are stable since Rust 1.89, newer than
//! the workspace's `rust-version`, so default builds leave this file out.
#![allow(clippy::incompatible_msrv)] // only compiled with the opt-in `avx512` feature (Rust ≥ 1.89)

use core::arch::x86_64::{
    __m512i, _mm512_add_epi8, _mm512_castsi256_si512, _mm512_cvtepi16_epi8, _mm512_dpbusd_epi32,
    _mm512_inserti64x4, _mm512_loadu_si512, _mm512_reduce_add_epi32, _mm512_set1_epi8,
    _mm512_setzero_si512,
};

/// One `R` rows × `T` tokens block starting at row `r0`, token `t0`.
///
/// # Safety
/// AVX-512 F/BW/VNNI present; `r0 + R <= rows`, `t0 + T <= n_tokens`, `stride % 64 == 0`, and
/// `w`/`q` hold `rows × stride` / `n_tokens × stride` elements.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
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
    let one = _mm512_set1_epi8(1);
    let mut a = [[_mm512_setzero_si512(); T]; R];
    let mut k = 0;
    while k < stride {
        let mut wv = [one; R];
        for (i, wi) in wv.iter_mut().enumerate() {
            // SAFETY: (r0 + i) < rows and k + 64 <= stride (caller's contract).
            let raw = unsafe { _mm512_loadu_si512(wp.add((r0 + i) * stride + k).cast()) };
            *wi = _mm512_add_epi8(raw, one);
        }
        for j in 0..T {
            // SAFETY: (t0 + j) < n_tokens and k + 64 <= stride.
            let q8: __m512i = unsafe {
                let p = qp.add((t0 + j) * stride + k);
                let lo = _mm512_cvtepi16_epi8(_mm512_loadu_si512(p.cast()));
                let hi = _mm512_cvtepi16_epi8(_mm512_loadu_si512(p.add(32).cast()));
                _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
            };
            for i in 0..R {
                a[i][j] = _mm512_dpbusd_epi32(a[i][j], wv[i], q8);
            }
        }
        k += 64;
    }
    for (i, ai) in a.iter().enumerate() {
        for (j, &v) in ai.iter().enumerate() {
            acc[(t0 + j) * rows + r0 + i] = _mm512_reduce_add_epi32(v).wrapping_sub(qsum[j]);
        }
    }
}

/// All rows for tokens `t0..t0 + T`.
///
/// # Safety
/// As [`block`], for every row.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tokens<const T: usize>(
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
    while r + 4 <= rows {
        // SAFETY: r + 4 <= rows; the rest is this function's contract.
        unsafe { block::<4, T>(w, q, stride, rows, r, t0, &qsum, acc) };
        r += 4;
    }
    while r < rows {
        // SAFETY: r < rows.
        unsafe { block::<1, T>(w, q, stride, rows, r, t0, &qsum, acc) };
        r += 1;
    }
}

/// See [`crate::kernels`]; needs `stride % 64 == 0` (else the caller uses AVX2).
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VNNI. Shapes are checked here.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn matmul(
    w: &[i8],
    rows: usize,
    q: &[i16],
    n_tokens: usize,
    stride: usize,
    acc: &mut [i32],
) {
    assert!(
        stride % 64 == 0
            && w.len() >= rows * stride
            && q.len() >= n_tokens * stride
            && acc.len() >= n_tokens * rows
    );
    let mut t = 0;
    // SAFETY (all calls): the features are this function's contract; t + T <= n_tokens.
    while t + 4 <= n_tokens {
        unsafe { tokens::<4>(w, q, stride, rows, t, acc) };
        t += 4;
    }
    match n_tokens - t {
        3 => unsafe { tokens::<3>(w, q, stride, rows, t, acc) },
        2 => unsafe { tokens::<2>(w, q, stride, rows, t, acc) },
        1 => unsafe { tokens::<1>(w, q, stride, rows, t, acc) },
        _ => {}
    }
}
