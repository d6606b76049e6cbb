//! x86-64 AVX2 kernel: 16 weights widened per load (`vpmovsxbw`), products summed in pairs
//! (`vpmaddwd`), register blocks of 2 weight rows × 4 tokens. Selected at run time by
//! [`crate::kernels::Kernel::best`].

use core::arch::x86_64::{
    __m256i, _mm256_add_epi32, _mm256_castsi256_si128, _mm256_cvtepi8_epi16,
    _mm256_extracti128_si256, _mm256_loadu_si256, _mm256_madd_epi16, _mm256_setzero_si256,
    _mm_add_epi32, _mm_cvtsi128_si32, _mm_loadu_si128, _mm_shuffle_epi32,
};

#[inline]
#[target_feature(enable = "avx2")]
fn hsum(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// One `R` rows × `T` tokens block starting at row `r0`, token `t0`.
///
/// # Safety
/// AVX2 present; `r0 + R <= rows`, `t0 + T <= n_tokens`, `stride % 16 == 0`, and `w`/`q` hold
/// `rows × stride` / `n_tokens × stride` elements.
#[inline]
#[target_feature(enable = "avx2")]
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
    let mut a = [[_mm256_setzero_si256(); T]; R];
    let mut k = 0;
    while k < stride {
        let mut wv = [_mm256_setzero_si256(); R];
        for (i, wi) in wv.iter_mut().enumerate() {
            // SAFETY: (r0 + i) < rows and k + 16 <= stride (caller's contract).
            *wi = _mm256_cvtepi8_epi16(unsafe {
                _mm_loadu_si128(wp.add((r0 + i) * stride + k).cast())
            });
        }
        for j in 0..T {
            // SAFETY: (t0 + j) < n_tokens and k + 16 <= stride.
            let qv = unsafe { _mm256_loadu_si256(qp.add((t0 + j) * stride + k).cast()) };
            for i in 0..R {
                a[i][j] = _mm256_add_epi32(a[i][j], _mm256_madd_epi16(wv[i], qv));
            }
        }
        k += 16;
    }
    for (i, ai) in a.iter().enumerate() {
        for (j, &v) in ai.iter().enumerate() {
            acc[(t0 + j) * rows + r0 + i] = hsum(v);
        }
    }
}

/// All rows for tokens `t0..t0 + T`.
///
/// # Safety
/// AVX2 present; `t0 + T <= n_tokens`; shapes as in [`matmul`].
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn tokens<const T: usize>(
    w: &[i8],
    q: &[i16],
    stride: usize,
    rows: usize,
    t0: usize,
    acc: &mut [i32],
) {
    let mut r = 0;
    while r + 2 <= rows {
        // SAFETY: r + 2 <= rows; the rest is this function's contract.
        unsafe { block::<2, T>(w, q, stride, rows, r, t0, acc) };
        r += 2;
    }
    if r < rows {
        // SAFETY: r < rows.
        unsafe { block::<1, T>(w, q, stride, rows, r, t0, acc) };
    }
}

/// See [`crate::kernels`].
///
/// # Safety
/// The CPU must support AVX2. Shapes are checked here.
#[target_feature(enable = "avx2")]
pub unsafe fn matmul(
    w: &[i8],
    rows: usize,
    q: &[i16],
    n_tokens: usize,
    stride: usize,
    acc: &mut [i32],
) {
    assert!(
        stride % 16 == 0
            && w.len() >= rows * stride
            && q.len() >= n_tokens * stride
            && acc.len() >= n_tokens * rows
    );
    let mut t = 0;
    // SAFETY (all calls): AVX2 is this function's contract; t + T <= n_tokens by the loop/match.
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
