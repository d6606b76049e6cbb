//! Parity with the numpy reference without Python. In `tests/data/`:
//! - `ref_tiny_ternary.tern`: `tools/tern_ref.py gen --format ternary --vocab 30522 --d 32
//!   --layers 2 --heads 4 --ffn 64 --out 32 --seed 7` (bundled vocabulary);
//! - `ref_v2k_{fp32,int8,ternary,int4}.tern`: `tools/tern_ref.py gen --format F --vocab 2000 --d 16
//!   --layers 2 --heads 2 --ffn 32 --out 16 --seed 11`, used with `vocab2000.txt` (the first 2 000
//!   lines of `models/vocab.txt`);
//! - `ref_*.jsonl`: `tools/tern_ref.py embed` (float64; its 8 lines past one pass embedded whole as
//!   pooled windows, `embed_text`) of `parity_sentences.txt`, rounded to 7
//!   significant digits.
//!
//! Every vector must reach cosine ≥ 0.9999 with every kernel.

use ternflow_engine::{Engine, Kernel};

/// Min cosine of `engine`'s vectors against the expected lines, over every kernel.
fn min_cosine(engine: &mut Engine, expected: &str) -> f64 {
    let sentences = include_str!("data/parity_sentences.txt");
    let mut min = f64::MAX;
    for kernel in Kernel::available() {
        engine.set_kernel(kernel);
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
            assert!(
                cos >= 0.9999,
                "kernel {}: {text:?} cosine {cos}",
                kernel.name()
            );
            min = min.min(cos);
            n += 1;
        }
        assert!(n >= 200, "only {n} sentences");
    }
    min
}

#[test]
fn every_format_matches_numpy_reference() {
    let vocab = include_str!("data/vocab2000.txt");
    let cases: [(&str, &[u8], &str); 4] = [
        (
            "fp32",
            include_bytes!("data/ref_v2k_fp32.tern"),
            include_str!("data/ref_v2k_fp32.jsonl"),
        ),
        (
            "int8",
            include_bytes!("data/ref_v2k_int8.tern"),
            include_str!("data/ref_v2k_int8.jsonl"),
        ),
        (
            "ternary",
            include_bytes!("data/ref_v2k_ternary.tern"),
            include_str!("data/ref_v2k_ternary.jsonl"),
        ),
        (
            "int4",
            include_bytes!("data/ref_v2k_int4.tern"),
            include_str!("data/ref_v2k_int4.jsonl"),
        ),
    ];
    for (name, model, expected) in cases {
        let mut engine = Engine::from_bytes_with_vocab(model, vocab).unwrap();
        assert_eq!(engine.config().embedding_format.name(), name);
        let min = min_cosine(&mut engine, expected);
        eprintln!("{name}: min cosine {min:.7}");
    }
}

#[test]
fn matches_numpy_reference_with_bundled_vocab() {
    let mut engine = Engine::from_bytes(include_bytes!("data/ref_tiny_ternary.tern")).unwrap();
    assert_eq!(engine.config().d_model, 32);
    // tern_ref.py info: sha256 dfa0785605f0bd21bcfc…
    assert_eq!(engine.model_id(), "dfa0785605f0bd21");
    let min = min_cosine(&mut engine, include_str!("data/ref_tiny_ternary.jsonl"));
    eprintln!("ternary d32, bundled vocab: min cosine {min:.7}");
}
