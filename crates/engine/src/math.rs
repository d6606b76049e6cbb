//! Scalar math the forward pass needs, written to vectorise: rounding, the cast of a quantised
//! value, erf/GELU, layer norm.

/// Rounds half away from zero, like [`f32::round`], from `trunc` (a single instruction on wasm
/// and x86, where `round` is a library call): `x − trunc(x)` is exact, so the comparison with
/// 0.5 is too.
#[inline(always)]
#[must_use]
pub fn round_half_away(x: f32) -> f32 {
    let t = x.trunc();
    let up = f32::from(u8::from((x - t).abs() >= 0.5));
    t + up.copysign(x)
}

/// `v`, an integer in [-128, 127] (NaN: 0, as `v as i32` gives), as `i16`, by float addition and
/// integer subtraction only: `v + 1.5·2²³` is exact and holds `v` in its low mantissa bits. On
/// x86 `v as i32` compiled to one scalar `cvttss2si` per element plus its saturation fix-up (AVX2
/// has no saturating packed conversion), which left this loop unvectorised: ≈ 60 % of the
/// activation quantisation's time, ≈ 10 % of a short embed (docs/engine.md). The same bits on
/// every kernel.
#[inline(always)]
#[must_use]
pub fn small_int(v: f32) -> i16 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23, bits 0x4B40_0000
    (v + MAGIC).to_bits().wrapping_sub(MAGIC.to_bits()) as i16
}

/// The error function, |error| < 4.5e-7 over all of f32 (≤ 4 ulp of 1; the GELU output feeds an
/// 8-bit quantisation): a rational approximation on [−4, 4] (`x·P(x²)/Q(x²)`, the form Eigen
/// and XLA use for f32; training's `jax.nn.gelu(approximate=False)` runs in f32 too), ±1
/// outside, evaluated in f32. No branches and no `mul_add` (a
/// library call on wasm), so loops over it vectorise four lanes wide (in f64 they ran two lanes
/// wide with conversions either side, ≈ 3 % slower per embed: docs/engine.md).
#[inline(always)]
#[must_use]
pub fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10_f32;
    p = p * x2 + 2.770_681_4e-8;
    p = p * x2 - 2.101_024e-6;
    p = p * x2 - 5.692_506_4e-5;
    p = p * x2 - 7.349_906_3e-4;
    p = p * x2 - 2.954_6e-3;
    p = p * x2 - 1.609_603_3e-2;
    let mut q = -1.456_607_2e-5_f32;
    q = q * x2 - 2.133_740_6e-4;
    q = q * x2 - 1.682_827e-3;
    q = q * x2 - 7.373_329_3e-3;
    q = q * x2 - 1.426_474e-2;
    (x * p / q).clamp(-1.0, 1.0)
}

/// Exact (erf-based) GELU: `0.5·x·(1 + erf(x/√2))`.
#[inline(always)]
#[must_use]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// `e^x` for softmax: Cephes-style range reduction and a degree-6 polynomial, within 2 ulp of
/// `f32::exp` on [−87, 88] (inputs are clamped to that range), branch-free so loops over it vectorise (`f32::exp` is a
/// library call per element on wasm).
#[inline(always)]
#[must_use]
pub fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.0, 88.0);
    let n = (x * std::f32::consts::LOG2_E + 0.5).floor();
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let mut p = 1.987_569_1e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_6e-1;
    p = p * r + 5e-1;
    let e = p * r * r + r + 1.0;
    // 2^n by building the exponent bits (n is in −126..=128 after the clamp).
    let bits = ((n as i32 + 127).clamp(0, 255) as u32) << 23;
    e * f32::from_bits(bits)
}

/// Sum of `x` in eight interleaved f32 lanes (fixed order; vectorises).
#[inline(always)] // also into the AVX2 copy of the quantisation (forward.rs)
#[must_use]
pub fn sum_lanes(x: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let mut c = x.chunks_exact(8);
    for v in &mut c {
        for i in 0..8 {
            lanes[i] += v[i];
        }
    }
    let tail: f32 = c.remainder().iter().sum();
    ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
        + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]))
        + tail
}

/// Largest `|x|` (0 for an empty slice), in eight lanes with plain comparisons: `f32::max` is a
/// library call (`fmaxf`) per element on wasm.
#[inline(always)] // also into the AVX2 copy of the quantisation (forward.rs)
#[must_use]
pub fn max_abs(x: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let mut c = x.chunks_exact(8);
    for v in &mut c {
        for i in 0..8 {
            let a = v[i].abs();
            lanes[i] = if a > lanes[i] { a } else { lanes[i] };
        }
    }
    let mut m = 0f32;
    for &a in lanes.iter().chain(c.remainder()) {
        let a = a.abs();
        m = if a > m { a } else { m };
    }
    m
}

/// Largest element (−∞ for an empty slice), with plain comparisons.
#[inline]
#[must_use]
pub fn max(x: &[f32]) -> f32 {
    x.iter()
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// Sum of squared deviations from `mean`, in eight lanes.
#[inline(always)] // also into the AVX2 copy of the quantisation (forward.rs)
#[must_use]
pub fn sum_sq_dev(x: &[f32], mean: f32) -> f32 {
    let mut lanes = [0f32; 8];
    let mut c = x.chunks_exact(8);
    for v in &mut c {
        for i in 0..8 {
            let d = v[i] - mean;
            lanes[i] += d * d;
        }
    }
    let tail: f32 = c.remainder().iter().map(|v| (v - mean) * (v - mean)).sum();
    ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
        + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]))
        + tail
}

/// `v / max(‖v‖, 1e-12)` in place: the sum of squares in index order, then one division per
/// element (the output of a forward pass, and of a pooled long text).
#[inline(always)]
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    for x in v.iter_mut() {
        *x /= norm;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_matches_std_round() {
        let mut x = -130.0f32;
        while x < 130.0 {
            for v in [x, x + 0.5, x - 0.5, x.next_up(), (x + 0.5).next_down()] {
                assert_eq!(round_half_away(v), v.round(), "{v}");
            }
            x += 0.25;
        }
        for v in [0.49999997f32, -0.49999997, 0.5, -0.5, 1.5, -2.5, 0.0, -0.0] {
            assert_eq!(round_half_away(v), v.round(), "{v}");
        }
    }

    #[test]
    fn small_int_is_the_saturating_cast_on_its_domain() {
        for i in -128..=127 {
            let v = i as f32;
            assert_eq!(small_int(v), v as i32 as i16, "{v}");
        }
        assert_eq!(small_int(-0.0), 0);
        assert_eq!(small_int(f32::NAN), 0);
        assert_eq!(small_int(-f32::NAN), 0);
    }

    #[test]
    fn exp_is_accurate() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let (got, want) = (exp(x), x.exp());
            assert!(
                (got - want).abs() <= 2.5 * f32::EPSILON * want,
                "exp({x}) = {got}, want {want}"
            );
            x += 0.013;
        }
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-200.0) < 1e-37);
    }

    #[test]
    fn erf_is_accurate() {
        let mut worst = 0f64;
        let mut x = -6.0f64;
        while x < 6.0 {
            let got = f64::from(erf(x as f32));
            let want = libm::erf(f64::from(x as f32));
            worst = worst.max((got - want).abs());
            x += 1e-4;
        }
        assert!(worst < 4.5e-7, "max |erf error| {worst:e}");
    }
}
