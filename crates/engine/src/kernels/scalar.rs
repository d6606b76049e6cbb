//! The portable reference kernels.

/// `acc[t·rows + r] = Σ_k q[t·stride + k] · w[r·stride + k]`; see the module docs of
/// [`crate::kernels`].
pub fn matmul(w: &[i8], rows: usize, q: &[i16], n_tokens: usize, stride: usize, acc: &mut [i32]) {
    for t in 0..n_tokens {
        let qt = &q[t * stride..(t + 1) * stride];
        for r in 0..rows {
            let wr = &w[r * stride..(r + 1) * stride];
            acc[t * rows + r] = qt
                .iter()
                .zip(wr)
                .map(|(&a, &b)| i32::from(a) * i32::from(b))
                .sum();
        }
    }
}

/// [`matmul`] over rows packed two by two ([`super::pack_pairs`]): each pair is split back into
/// its rows' weights as it is read.
pub fn matmul_pairs(
    pairs: &[i16],
    rows: usize,
    q: &[i16],
    n_tokens: usize,
    stride: usize,
    acc: &mut [i32],
) {
    let shift = super::PAIR_SHIFT;
    for t in 0..n_tokens {
        let qt = &q[t * stride..(t + 1) * stride];
        for p in 0..rows.div_ceil(2) {
            let pr = &pairs[p * stride..(p + 1) * stride];
            let (mut first, mut second) = (0i32, 0i32);
            for (&a, &y) in qt.iter().zip(pr) {
                // The low bits, sign extended, are the first row's weight; the rest the second's.
                let w0 = (y << (16 - shift)) >> (16 - shift);
                let w1 = (y - w0) >> shift;
                first += i32::from(a) * i32::from(w0);
                second += i32::from(a) * i32::from(w1);
            }
            acc[t * rows + 2 * p] = first;
            if 2 * p + 1 < rows {
                acc[t * rows + 2 * p + 1] = second;
            }
        }
    }
}

/// Dot product of two f32 slices of equal length, summed in eight interleaved lanes (a fixed
/// order, so the result does not depend on the target; compilers turn it into SIMD).
#[must_use]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut lanes = [0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    let mut tail = 0f32;
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        tail += x * y;
    }
    ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
        + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]))
        + tail
}

/// `y += a · x`, element-wise.
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}
