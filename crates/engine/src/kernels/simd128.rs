//! wasm32 `simd128` kernel: weights widened on load (`i16x8.load8x8_s`), products summed in pairs
//! (`i32x4.dot_i16x8_s`), four tokens per weight load.

use core::arch::wasm32::{
    i16x8_load_extend_i8x8, i32x4_add, i32x4_dot_i16x8, i32x4_extract_lane, i32x4_splat, v128,
    v128_load,
};

#[inline(always)]
fn hsum(v: v128) -> i32 {
    i32x4_extract_lane::<0>(v)
        .wrapping_add(i32x4_extract_lane::<1>(v))
        .wrapping_add(i32x4_extract_lane::<2>(v))
        .wrapping_add(i32x4_extract_lane::<3>(v))
}

/// See [`crate::kernels`]. The caller ([`crate::kernels::Kernel::matmul`]) has checked that
/// `stride % 32 == 0` and that every slice holds the shape.
pub fn matmul(w: &[i8], rows: usize, q: &[i16], n_tokens: usize, stride: usize, acc: &mut [i32]) {
    assert!(
        stride % 8 == 0
            && w.len() >= rows * stride
            && q.len() >= n_tokens * stride
            && acc.len() >= n_tokens * rows
    );
    let wp = w.as_ptr();
    let qp = q.as_ptr();
    let mut t = 0;
    while t + 4 <= n_tokens {
        // SAFETY (all loads below): r < rows, t + 3 < n_tokens and k + 8 <= stride, so every
        // 8-byte weight load and 16-byte activation load lies inside the slices checked above.
        for r in 0..rows {
            let (mut a0, mut a1, mut a2, mut a3) = (
                i32x4_splat(0),
                i32x4_splat(0),
                i32x4_splat(0),
                i32x4_splat(0),
            );
            let mut k = 0;
            while k < stride {
                unsafe {
                    let wv = i16x8_load_extend_i8x8(wp.add(r * stride + k));
                    let q0 = v128_load(qp.add(t * stride + k).cast());
                    let q1 = v128_load(qp.add((t + 1) * stride + k).cast());
                    let q2 = v128_load(qp.add((t + 2) * stride + k).cast());
                    let q3 = v128_load(qp.add((t + 3) * stride + k).cast());
                    a0 = i32x4_add(a0, i32x4_dot_i16x8(wv, q0));
                    a1 = i32x4_add(a1, i32x4_dot_i16x8(wv, q1));
                    a2 = i32x4_add(a2, i32x4_dot_i16x8(wv, q2));
                    a3 = i32x4_add(a3, i32x4_dot_i16x8(wv, q3));
                }
                k += 8;
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
            let mut a0 = i32x4_splat(0);
            let mut k = 0;
            while k < stride {
                // SAFETY: as above, with t < n_tokens.
                unsafe {
                    let wv = i16x8_load_extend_i8x8(wp.add(r * stride + k));
                    let q0 = v128_load(qp.add(t * stride + k).cast());
                    a0 = i32x4_add(a0, i32x4_dot_i16x8(wv, q0));
                }
                k += 8;
            }
            acc[t * rows + r] = hsum(a0);
        }
        t += 1;
    }
}
