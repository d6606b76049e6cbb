//! Parity with the numpy reference without Python: `tests/data/ref_tiny_ternary.tern` was written by
//! `tools/tern_ref.py gen --format ternary --vocab 30522 --d 32 --layers 2 --heads 4 --ffn 64
//! --out 32 --seed 7` and `ref_tiny_ternary.jsonl` by `tools/tern_ref.py embed` (float64) on
//! `parity_sentences.txt`. Every vector must reach cosine ≥ 0.9999 with every kernel.

use ternflow_engine::{Engine, Kernel};

#[test]
fn matches_numpy_reference() {
    let model = include_bytes!("data/ref_tiny_ternary.tern");
    let sentences = include_str!("data/parity_sentences.txt");
    let expected = include_str!("data/ref_tiny_ternary.jsonl");
    let mut engine = Engine::from_bytes(model).unwrap();
    assert_eq!(engine.config().d_model, 32);
    // tern_ref.py info: sha256 dfa0785605f0bd21bcfc…
    assert_eq!(engine.model_id(), "dfa0785605f0bd21");
    for kernel in Kernel::available() {
        engine.set_kernel(kernel);
        let mut min = f64::MAX;
        let mut n = 0;
        for (text, want) in sentences.lines().zip(expected.lines()) {
            let want: Vec<f64> = serde_json::from_str(want).unwrap();
            let got = engine.embed(text);
            assert_eq!(got.len(), want.len());
            let dot: f64 = got.iter().zip(&want).map(|(a, b)| f64::from(*a) * b).sum();
            let na: f64 = got
                .iter()
                .map(|a| f64::from(*a).powi(2))
                .sum::<f64>()
                .sqrt();
            let nb: f64 = want.iter().map(|b| b * b).sum::<f64>().sqrt();
            let cos = dot / (na * nb);
            min = min.min(cos);
            assert!(
                cos >= 0.9999,
                "kernel {}: {text:?} cosine {cos}",
                kernel.name()
            );
            n += 1;
        }
        assert!(n >= 200, "only {n} sentences");
        eprintln!(
            "kernel {}: {n} sentences, min cosine {min:.7}",
            kernel.name()
        );
    }
}
