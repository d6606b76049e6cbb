//! Integer matrix kernels for BitLinear, one file per instruction set.
//!
//! Every kernel computes the same thing, exactly (integer arithmetic, no rounding):
//!
//! `acc[t·rows + r] = Σ_k q[t·stride + k] · w[r·stride + k]`
//!
//! for `rows` ternary weight rows `w` (`i8` in {−1, 0, +1}) and `n_tokens` quantised activation rows
//! `q` (`i16` in −128..=127), both zero padded to `stride` (a multiple of
//! [`crate::model::ROW_ALIGN`]). Each weight row is loaded once per block of four tokens.
//!
//! The same product over rows packed two per `i16` ([`pack_pairs`], [`Kernel::matmul_pairs`]) is
//! what the engine runs where the best kernel reads pairs (`simd128`, `avx2`): one 16-bit
//! multiply-add then does the work of both rows.
//!
//! - [`scalar`]: the reference, plain Rust (both layouts).
//! - `simd128` (wasm32 with `+simd128`): `i32x4.dot_i16x8_s` over row pairs (rows given one `i8`
//!   per weight are packed first).
//! - `relaxed` (wasm32 built with `+relaxed-simd`, not the default build):
//!   `i32x4.relaxed_dot_i8x16_i7x16_add_s` on `w + 1`, minus `Σ q`.
//! - `avx2` (x86-64, chosen at run time with `is_x86_feature_detected!`): `vpmaddwd`, over pairs or
//!   `vpmovsxbw`-widened rows.
//! - `avx512` (cargo feature `avx512`, Rust ≥ 1.89; x86-64 with AVX-512 VNNI, chosen at run time):
//!   `vpdpbusd` on `w + 1`, minus `Σ q`; rows whose stride is not a multiple of 64 use `avx2`.

pub mod scalar;

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub mod simd128;

#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
pub mod relaxed;

#[cfg(target_arch = "x86_64")]
pub mod avx2;

#[cfg(all(target_arch = "x86_64", feature = "avx512"))]
pub mod avx512;

/// Which implementation runs the integer matrix products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kernel {
    /// Portable reference.
    Scalar,
    /// wasm32 `simd128`.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    Simd128,
    /// wasm32 relaxed SIMD (only in builds with `+relaxed-simd`).
    #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
    RelaxedSimd,
    /// x86-64 AVX2 (only constructed after run-time detection).
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// x86-64 AVX-512 VNNI (feature `avx512`; only constructed after run-time detection).
    #[cfg(all(target_arch = "x86_64", feature = "avx512"))]
    Avx512Vnni,
}

impl Kernel {
    /// The fastest kernel this build and this CPU support.
    #[must_use]
    pub fn best() -> Self {
        #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
        return Self::RelaxedSimd;
        #[cfg(all(
            target_arch = "wasm32",
            target_feature = "simd128",
            not(target_feature = "relaxed-simd")
        ))]
        return Self::Simd128;
        #[cfg(all(target_arch = "x86_64", feature = "avx512"))]
        if has_avx512_vnni() {
            return Self::Avx512Vnni;
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            return Self::Avx2;
        }
        #[allow(unreachable_code)]
        Self::Scalar
    }

    /// Every kernel usable here (the scalar one first).
    #[must_use]
    pub fn available() -> Vec<Self> {
        #[allow(unused_mut)]
        let mut v = vec![Self::Scalar];
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        v.push(Self::Simd128);
        #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
        v.push(Self::RelaxedSimd);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            v.push(Self::Avx2);
        }
        #[cfg(all(target_arch = "x86_64", feature = "avx512"))]
        if has_avx512_vnni() {
            v.push(Self::Avx512Vnni);
        }
        v
    }

    /// Whether this is one of the x86-64 kernels, whose construction proves the CPU has AVX2
    /// (the rest of the forward pass may then run AVX2 code too).
    #[cfg(target_arch = "x86_64")]
    #[must_use]
    pub fn is_x86_simd(self) -> bool {
        match self {
            Kernel::Avx2 => true,
            #[cfg(feature = "avx512")]
            Kernel::Avx512Vnni => true,
            Kernel::Scalar => false,
        }
    }

    /// Short name: `scalar`, `simd128`, `avx2`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Scalar => "scalar",
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Self::Simd128 => "simd128",
            #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
            Self::RelaxedSimd => "relaxed-simd",
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => "avx2",
            #[cfg(all(target_arch = "x86_64", feature = "avx512"))]
            Self::Avx512Vnni => "avx512-vnni",
        }
    }

    /// Whether this kernel is fastest over row pairs ([`pack_pairs`]): `simd128` and `avx2`. The
    /// model is laid out for [`Kernel::best`] at load ([`crate::model::BitMatrix::with_pairs`]).
    #[must_use]
    pub fn reads_pairs(self) -> bool {
        match self {
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Self::Simd128 => true,
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// [`Kernel::matmul`] over a model matrix: reads its row pairs where it has them (kernels
    /// without a paired form then run the scalar one over the pairs).
    pub fn matmul_matrix(
        self,
        m: &crate::model::BitMatrix,
        q: &[i16],
        n_tokens: usize,
        acc: &mut [i32],
    ) {
        if m.pairs.is_empty() {
            self.matmul(&m.w, m.rows, q, n_tokens, m.stride, acc);
        } else if !self.matmul_pairs(&m.pairs, m.rows, q, n_tokens, m.stride, acc) {
            // A kernel without a paired form, in a build that keeps only the pairs.
            Self::Scalar.matmul_pairs(&m.pairs, m.rows, q, n_tokens, m.stride, acc);
        }
    }

    /// The product over rows packed by [`pack_pairs`]; `false` (and nothing written) when this
    /// kernel has no paired form.
    ///
    /// # Panics
    /// When `stride` is not a multiple of 32 or a slice is shorter than the shape says.
    pub fn matmul_pairs(
        self,
        pairs: &[i16],
        rows: usize,
        q: &[i16],
        n_tokens: usize,
        stride: usize,
        acc: &mut [i32],
    ) -> bool {
        assert!(stride % 32 == 0, "stride {stride} is not a multiple of 32");
        assert!(
            pairs.len() >= rows.div_ceil(2) * stride,
            "weights too short"
        );
        assert!(q.len() >= n_tokens * stride, "activations too short");
        assert!(acc.len() >= n_tokens * rows, "accumulators too short");
        match self {
            Self::Scalar => {
                scalar::matmul_pairs(pairs, rows, q, n_tokens, stride, acc);
                true
            }
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Self::Simd128 => {
                simd128::matmul_pairs(pairs, rows, q, n_tokens, stride, acc);
                true
            }
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Avx2` is only constructed after `is_x86_feature_detected!("avx2")`; the
            // shape was checked above.
            Self::Avx2 => {
                unsafe { avx2::matmul_pairs(pairs, rows, q, n_tokens, stride, acc) };
                true
            }
            // Kernels without a paired form (none in a default wasm build).
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Runs the product described in the module docs.
    ///
    /// # Panics
    /// When `stride` is not a multiple of 32 or a slice is shorter than the shape says.
    pub fn matmul(
        self,
        w: &[i8],
        rows: usize,
        q: &[i16],
        n_tokens: usize,
        stride: usize,
        acc: &mut [i32],
    ) {
        assert!(stride % 32 == 0, "stride {stride} is not a multiple of 32");
        assert!(w.len() >= rows * stride, "weights too short");
        assert!(q.len() >= n_tokens * stride, "activations too short");
        assert!(acc.len() >= n_tokens * rows, "accumulators too short");
        match self {
            Self::Scalar => scalar::matmul(w, rows, q, n_tokens, stride, acc),
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Self::Simd128 => simd128::matmul(w, rows, q, n_tokens, stride, acc),
            #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
            Self::RelaxedSimd => relaxed::matmul(w, rows, q, n_tokens, stride, acc),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Avx2` is only returned by `best()` after `is_x86_feature_detected!("avx2")`,
            // and the shape was checked above.
            Self::Avx2 => unsafe { avx2::matmul(w, rows, q, n_tokens, stride, acc) },
            #[cfg(all(target_arch = "x86_64", feature = "avx512"))]
            // SAFETY: `Avx512Vnni` is only constructed after `has_avx512_vnni()` (which includes
            // AVX2), and the shape was checked above.
            Self::Avx512Vnni => unsafe {
                if stride % 64 == 0 {
                    avx512::matmul(w, rows, q, n_tokens, stride, acc)
                } else {
                    avx2::matmul(w, rows, q, n_tokens, stride, acc)
                }
            },
        }
    }
}

/// Bits between the two rows of a packed pair: `pair = w[2p] + 2^14 · w[2p + 1]`.
pub const PAIR_SHIFT: u32 = 14;

/// Packs ternary rows two by two into `i16`s, `pair[p·stride + k] = w[2p][k] + 2^14 · w[2p+1][k]`
/// (an odd last row is paired with zeros): one `i16` multiply-add then serves both rows, and a
/// sum of such products splits back into the two rows' sums as long as the first row's share
/// stays within ±2^13 (the paired kernels split every few hundred columns).
///
/// # Panics
/// When `w` holds fewer than `rows × stride` weights.
#[must_use]
pub fn pack_pairs(w: &[i8], rows: usize, stride: usize) -> Vec<i16> {
    assert!(w.len() >= rows * stride, "weights too short");
    let mut out = vec![0i16; rows.div_ceil(2) * stride];
    for (p, o) in out.chunks_exact_mut(stride).enumerate() {
        let first = &w[2 * p * stride..(2 * p + 1) * stride];
        let second = (2 * p + 1 < rows).then(|| &w[(2 * p + 1) * stride..(2 * p + 2) * stride]);
        for (k, ok) in o.iter_mut().enumerate() {
            let b = second.map_or(0, |s| i16::from(s[k]));
            *ok = i16::from(first[k]) + (b << PAIR_SHIFT);
        }
    }
    out
}

/// The rows [`pack_pairs`] packed, one `i8` per weight again (`rows × stride`): the low
/// [`PAIR_SHIFT`] bits of each pair, sign-extended, are the first row's weight, the rest the
/// second's.
#[must_use]
pub fn unpack_pairs(pairs: &[i16], rows: usize, stride: usize) -> Vec<i8> {
    let mut out = vec![0i8; rows * stride];
    for (p, pr) in pairs.chunks_exact(stride).enumerate() {
        for (k, &y) in pr.iter().enumerate() {
            let a = (y << 2) >> 2; // sign-extend the low 14 bits
            let b = (y - a) >> PAIR_SHIFT;
            out[2 * p * stride + k] = a as i8;
            if 2 * p + 1 < rows {
                out[(2 * p + 1) * stride + k] = b as i8;
            }
        }
    }
    out
}

/// AVX-512 F + BW + VNNI (and AVX2, which every such CPU has) at run time.
#[cfg(all(target_arch = "x86_64", feature = "avx512"))]
fn has_avx512_vnni() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vnni")
        && std::arch::is_x86_feature_detected!("avx2")
}

/// Checks every available kernel against the scalar reference on `cases` random shapes (many
/// −128/127 extremes) and one worst-case accumulator; exact equality. Runs anywhere, so the
/// wasm build checks its `simd128` kernel too (`engineSelfTest()` in the wasm API,
/// `bench/engine-check.mjs`).
///
/// # Errors
/// A description of the first mismatch.
pub fn self_test(seed: u64, cases: usize) -> Result<usize, String> {
    use crate::testing::Rng;
    let mut rng = Rng::new(seed);
    let mut checked = 0;
    for case in 0..cases {
        // Every fourth case long enough for the paired kernels to split several times.
        let stride = 32 * (1 + rng.below(if case % 4 == 0 { 60 } else { 8 }));
        let rows = 1 + rng.below(40);
        let n_tokens = 1 + rng.below(19);
        let w: Vec<i8> = (0..rows * stride).map(|_| rng.below(3) as i8 - 1).collect();
        let q: Vec<i16> = (0..n_tokens * stride)
            .map(|i| match (i + case) % 5 {
                0 => -128,
                1 => 127,
                _ => rng.below(256) as i16 - 128,
            })
            .collect();
        let mut want = vec![0i32; n_tokens * rows];
        scalar::matmul(&w, rows, &q, n_tokens, stride, &mut want);
        let naive: i32 = (0..stride).map(|k| i32::from(q[k]) * i32::from(w[k])).sum();
        if want[0] != naive {
            return Err(format!("scalar kernel wrong in case {case}"));
        }
        let pairs = pack_pairs(&w, rows, stride);
        for k in Kernel::available() {
            let mut got = vec![0i32; n_tokens * rows];
            k.matmul(&w, rows, &q, n_tokens, stride, &mut got);
            if got != want {
                return Err(format!(
                    "kernel {} differs from scalar: case {case}, {rows} rows, {n_tokens} tokens, stride {stride}",
                    k.name()
                ));
            }
            checked += 1;
            got.fill(0);
            if k.matmul_pairs(&pairs, rows, &q, n_tokens, stride, &mut got) {
                if got != want {
                    return Err(format!(
                        "paired kernel {} differs from scalar: case {case}, {rows} rows, {n_tokens} tokens, stride {stride}",
                        k.name()
                    ));
                }
                checked += 1;
            }
        }
    }
    let stride = 65536;
    let w = vec![-1i8; stride];
    let q = vec![-128i16; stride];
    for k in Kernel::available() {
        let mut acc = [0i32];
        k.matmul(&w, 1, &q, 1, stride, &mut acc);
        if acc[0] != 128 * stride as i32 {
            return Err(format!("kernel {} overflows: {}", k.name(), acc[0]));
        }
        checked += 1;
    }
    // Paired: each row's extreme sum, with the first row's share at both ends of its range
    // inside every split (−128 · ∓1 in every column) and the second row's the other way.
    for (a, b) in [(-1i8, 1i8), (1, -1), (-1, -1), (1, 1)] {
        let w: Vec<i8> = [vec![a; stride], vec![b; stride]].concat();
        let pairs = pack_pairs(&w, 2, stride);
        for k in Kernel::available() {
            let mut acc = [0i32; 2];
            if k.matmul_pairs(&pairs, 2, &q, 1, stride, &mut acc) {
                let want = [
                    -128 * i32::from(a) * stride as i32,
                    -128 * i32::from(b) * stride as i32,
                ];
                if acc != want {
                    return Err(format!(
                        "paired kernel {} overflows: {acc:?}, not {want:?}",
                        k.name()
                    ));
                }
                checked += 1;
            }
        }
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpacking_pairs_gives_the_rows_back() {
        let mut rng = crate::testing::Rng::new(9);
        for rows in [1, 2, 7, 8] {
            let stride = 64;
            let w: Vec<i8> = (0..rows * stride).map(|_| rng.below(3) as i8 - 1).collect();
            assert_eq!(unpack_pairs(&pack_pairs(&w, rows, stride), rows, stride), w);
        }
    }

    #[test]
    fn every_kernel_matches_scalar_exactly() {
        let n = self_test(7, 60).unwrap();
        assert!(n >= 60);
    }

    #[test]
    fn a_matrix_kept_as_pairs_gives_the_same_products() {
        use crate::model::BitMatrix;
        use crate::testing::Rng;
        let mut rng = Rng::new(3);
        // 7 rows: the last pair has a zero second row; 320 columns: two splits.
        let (rows, cols, n) = (7, 320, 5);
        let stride = crate::model::padded(cols);
        let m = BitMatrix {
            rows,
            cols,
            stride,
            w: (0..rows * stride).map(|_| rng.below(3) as i8 - 1).collect(),
            pairs: Vec::new(),
            w_scale: vec![1.0; rows],
            inv_w_scale: vec![1.0; rows],
            bias: vec![0.0; rows],
        };
        let q: Vec<i16> = (0..n * stride)
            .map(|_| rng.below(256) as i16 - 128)
            .collect();
        let paired = m.clone().into_pairs();
        assert!(paired.w.is_empty() && paired.pairs.len() == 4 * stride);
        let mut want = vec![0i32; n * rows];
        Kernel::Scalar.matmul_matrix(&m, &q, n, &mut want);
        for k in Kernel::available() {
            // Kernels without a paired form fall back to the scalar one over the pairs.
            let mut got = vec![0i32; n * rows];
            k.matmul_matrix(&paired, &q, n, &mut got);
            assert_eq!(got, want, "kernel {}", k.name());
        }
    }
}
