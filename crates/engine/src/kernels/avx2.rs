//! x86-64 AVX2 kernel: 16 weights widened per load (`vpmovsxbw`), products summed in pairs
//! (`vpmaddwd`), four tokens per weight load. Selected at run time by
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
    let wp = w.as_ptr();
    let qp = q.as_ptr();
    let mut t = 0;
    while t + 4 <= n_tokens {
        for r in 0..rows {
            let (mut a0, mut a1, mut a2, mut a3) = (
                _mm256_setzero_si256(),
                _mm256_setzero_si256(),
                _mm256_setzero_si256(),
                _mm256_setzero_si256(),
            );
            let mut k = 0;
            while k < stride {
                // SAFETY: r < rows, t + 3 < n_tokens, k + 16 <= stride: every 16-byte weight load
                // and 32-byte activation load lies inside the slices checked above.
                unsafe {
                    let wv = _mm256_cvtepi8_epi16(_mm_loadu_si128(wp.add(r * stride + k).cast()));
                    let q0 = _mm256_loadu_si256(qp.add(t * stride + k).cast());
                    let q1 = _mm256_loadu_si256(qp.add((t + 1) * stride + k).cast());
                    let q2 = _mm256_loadu_si256(qp.add((t + 2) * stride + k).cast());
                    let q3 = _mm256_loadu_si256(qp.add((t + 3) * stride + k).cast());
                    a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(wv, q0));
                    a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(wv, q1));
                    a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(wv, q2));
                    a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(wv, q3));
                }
                k += 16;
            }
            acc[t * rows + r] = hsum(a0);
            acc[(t + 1) * rows + r] = hsum(a1);
            acc[(t + 2) * rows + r] = hsum(a2);
            acc[(t + 3) * rows + r] = hsum(a3);
        }
        t += 4;
    }
    while t < n_tokens {
        for r in 0..rows {
            let mut a0 = _mm256_setzero_si256();
            let mut k = 0;
            while k < stride {
                // SAFETY: as above, with t < n_tokens.
                unsafe {
                    let wv = _mm256_cvtepi8_epi16(_mm_loadu_si128(wp.add(r * stride + k).cast()));
                    let q0 = _mm256_loadu_si256(qp.add(t * stride + k).cast());
                    a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(wv, q0));
                }
                k += 16;
            }
            acc[t * rows + r] = hsum(a0);
        }
        t += 1;
    }
}
