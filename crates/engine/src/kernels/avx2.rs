//! x86-64 AVX2 kernels, products summed in pairs (`vpmaddwd`), selected at run time by
//! [`crate::kernels::Kernel::best`]:
//! - [`matmul_pairs`], the one the engine runs: two rows packed per `i16`
//!   ([`super::pack_pairs`]), so each `vpmaddwd` serves both, split apart every `PAIR_STEPS`
//!   steps; blocks of 2 pairs (4 rows) × 4 tokens;
//! - [`matmul`]: 16 weights widened per load (`vpmovsxbw`), blocks of 2 rows × 4 tokens.

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

/// Dot steps (16 columns each) before a packed accumulator is split into its two rows: a lane
/// takes two columns per step, so the first row's share stays within ±256 · 31 = ±7 936, inside
/// the ±8 192 of its 14 bits.
const PAIR_STEPS: usize = 31;

/// One `P` row pairs × `T` tokens block of the paired kernel, at pair `p0`, token `t0`.
///
/// # Safety
/// AVX2 present; `p0 + P <= pairs`, `t0 + T <= n_tokens`, `stride % 16 == 0`, `wp` holds
/// `pairs × stride` and `q` `n_tokens × stride` elements.
#[inline]
#[target_feature(enable = "avx2")]
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
    use core::arch::x86_64::{_mm256_slli_epi32, _mm256_srai_epi32, _mm256_sub_epi32};
    const LOW: i32 = 32 - super::PAIR_SHIFT as i32;
    const SHIFT: i32 = super::PAIR_SHIFT as i32;
    let wptr = wp.as_ptr();
    let qp = q.as_ptr();
    let mut first = [[_mm256_setzero_si256(); T]; P];
    let mut second = [[_mm256_setzero_si256(); T]; P];
    let mut k = 0;
    while k < stride {
        let end = stride.min(k + 16 * PAIR_STEPS);
        let mut a = [[_mm256_setzero_si256(); T]; P];
        while k < end {
            let mut wv = [_mm256_setzero_si256(); P];
            for (i, wi) in wv.iter_mut().enumerate() {
                // SAFETY: (p0 + i) < pairs and k + 16 <= stride (caller's contract).
                *wi = unsafe { _mm256_loadu_si256(wptr.add((p0 + i) * stride + k).cast()) };
            }
            for j in 0..T {
                // SAFETY: (t0 + j) < n_tokens and k + 16 <= stride.
                let qv = unsafe { _mm256_loadu_si256(qp.add((t0 + j) * stride + k).cast()) };
                for i in 0..P {
                    a[i][j] = _mm256_add_epi32(a[i][j], _mm256_madd_epi16(wv[i], qv));
                }
            }
            k += 16;
        }
        // Each lane is `A + 2^14·B`: the low 14 bits, sign extended, are the first row's `A`.
        for i in 0..P {
            for j in 0..T {
                let lo = _mm256_srai_epi32::<LOW>(_mm256_slli_epi32::<LOW>(a[i][j]));
                let hi = _mm256_srai_epi32::<SHIFT>(_mm256_sub_epi32(a[i][j], lo));
                first[i][j] = _mm256_add_epi32(first[i][j], lo);
                second[i][j] = _mm256_add_epi32(second[i][j], hi);
            }
        }
    }
    for i in 0..P {
        for (half, sums) in [&first[i], &second[i]].into_iter().enumerate() {
            let r = 2 * (p0 + i) + half;
            if r < rows {
                for (j, &v) in sums.iter().enumerate() {
                    acc[(t0 + j) * rows + r] = hsum(v);
                }
            }
        }
    }
}

/// All row pairs for tokens `t0..t0 + T`.
///
/// # Safety
/// AVX2 present; `t0 + T <= n_tokens`; shapes as in [`matmul_pairs`].
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn pair_tokens<const T: usize>(
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
        // SAFETY: p + 2 <= pairs; the rest is this function's contract.
        unsafe { pair_block::<2, T>(wp, q, stride, rows, p, t0, acc) };
        p += 2;
    }
    if p < pairs {
        // SAFETY: p < pairs.
        unsafe { pair_block::<1, T>(wp, q, stride, rows, p, t0, acc) };
    }
}

/// The product over row pairs packed by [`super::pack_pairs`]: each `vpmaddwd` serves two rows.
///
/// # Safety
/// The CPU must support AVX2. Shapes are checked here.
#[target_feature(enable = "avx2")]
pub unsafe fn matmul_pairs(
    wp: &[i16],
    rows: usize,
    q: &[i16],
    n_tokens: usize,
    stride: usize,
    acc: &mut [i32],
) {
    assert!(
        stride % 16 == 0
            && wp.len() >= rows.div_ceil(2) * stride
            && q.len() >= n_tokens * stride
            && acc.len() >= n_tokens * rows
    );
    let mut t = 0;
    // SAFETY (all calls): AVX2 is this function's contract; t + T <= n_tokens by the loop/match.
    while t + 4 <= n_tokens {
        unsafe { pair_tokens::<4>(wp, q, stride, rows, t, acc) };
        t += 4;
    }
    match n_tokens - t {
        3 => unsafe { pair_tokens::<3>(wp, q, stride, rows, t, acc) },
        2 => unsafe { pair_tokens::<2>(wp, q, stride, rows, t, acc) },
        1 => unsafe { pair_tokens::<1>(wp, q, stride, rows, t, acc) },
        _ => {}
    }
}
