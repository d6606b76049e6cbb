//! What a result vector must look like before anything else looks at it.

use crate::error::{Error, Result};
use ternflow_core::ErrorCode;

/// Largest vector accepted for a model the server does not run (its dimension unknown).
pub const MAX_DIM: usize = 4_096;
/// How far from 1 a vector's L2 norm may be (the engine L2-normalises in f32).
pub const NORM_TOLERANCE: f64 = 1e-3;

/// Checks a result vector: `dim` components when the model is known (else 1..=[`MAX_DIM`]),
/// every one finite, L2 norm within [`NORM_TOLERANCE`] of 1.
///
/// # Errors
/// 400 `bad_result` saying what is wrong.
pub fn check_vector(dim: Option<usize>, v: &[f32]) -> Result<()> {
    let bad = |m: String| Err(Error::bad_request(ErrorCode::BadResult, m));
    match dim {
        Some(d) if v.len() != d => {
            return bad(format!(
                "the vector has {} components; the model's have {d}",
                v.len()
            ))
        }
        None if v.is_empty() || v.len() > MAX_DIM => {
            return bad(format!(
                "the vector has {} components (1..={MAX_DIM})",
                v.len()
            ))
        }
        _ => {}
    }
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return bad(format!("component {i} is not finite"));
    }
    let norm = v
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    if (norm - 1.0).abs() > NORM_TOLERANCE {
        return bad(format!(
            "the vector's norm is {norm:.6}; results are unit vectors"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(n: usize) -> Vec<f32> {
        vec![1.0 / (n as f32).sqrt(); n]
    }

    #[test]
    fn shapes() {
        assert!(check_vector(Some(4), &unit(4)).is_ok());
        assert!(check_vector(None, &unit(384)).is_ok());
        let code = |r: Result<()>| r.unwrap_err().code();
        assert_eq!(
            code(check_vector(Some(384), &unit(3))),
            ErrorCode::BadResult
        );
        assert_eq!(
            code(check_vector(None, &unit(350_000))),
            ErrorCode::BadResult
        );
        assert_eq!(code(check_vector(None, &[])), ErrorCode::BadResult);
        assert_eq!(
            code(check_vector(Some(2), &[1e30, -1e30])),
            ErrorCode::BadResult
        );
        assert_eq!(
            code(check_vector(Some(2), &[f32::NAN, 1.0])),
            ErrorCode::BadResult
        );
        assert_eq!(
            code(check_vector(Some(2), &[0.5, 0.5])),
            ErrorCode::BadResult
        );
    }
}
