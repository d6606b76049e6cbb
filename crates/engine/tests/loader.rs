//! Loading: every format and shape loads; every kind of damage is a typed error; no input panics.

use ternflow_engine::format::HEADER_LEN;
use ternflow_engine::testing::{generate, resign, tiny_config, Rng};
use ternflow_engine::{Config, EmbeddingFormat, Engine, Error};

const FORMATS: [EmbeddingFormat; 4] = [
    EmbeddingFormat::Fp32,
    EmbeddingFormat::Int8,
    EmbeddingFormat::Ternary,
    EmbeddingFormat::Int4,
];

fn small(format: EmbeddingFormat) -> Config {
    Config {
        embedding_format: format,
        vocab_size: 40,
        d_model: 12,
        n_layers: 1,
        n_heads: 3,
        ffn_dim: 8,
        output_dim: 5,
        max_seq_len: 6,
    }
}

fn tiny_vocab() -> String {
    let mut v: Vec<String> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    v.extend(
        ["a", "b", "c", "##s", "hello", ",", "!"]
            .iter()
            .map(|s| s.to_string()),
    );
    v.join("\n")
}

#[test]
fn every_format_loads_and_embeds() {
    for f in FORMATS {
        let file = generate(&tiny_config(f), 3);
        let mut e = Engine::from_bytes(&file).unwrap();
        assert_eq!(e.config().embedding_format, f);
        assert_eq!(e.model_id().len(), 16);
        let v = e.embed("The quick brown fox jumps over the lazy dog.");
        assert_eq!(v.len(), 24);
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{f:?}: norm {norm}");
        assert!(v.iter().all(|x| x.is_finite()));
        // Deterministic and independent of what ran before.
        let _ = e.embed("something else entirely, and longer than the first one");
        assert_eq!(v, e.embed("The quick brown fox jumps over the lazy dog."));
        // Handing the file over by value (codes used in place) changes nothing.
        let mut owned = Engine::from_vec(file.clone()).unwrap();
        assert_eq!(owned.model_id(), e.model_id());
        assert_eq!(
            v,
            owned.embed("The quick brown fox jumps over the lazy dog.")
        );
    }
}

#[test]
fn odd_shapes_load() {
    for f in FORMATS {
        let file = generate(&small(f), 9);
        let mut e = Engine::from_bytes_with_vocab(&file, &tiny_vocab()).unwrap();
        let ids = e.tokenize("hello, a b cs c a a a a");
        assert_eq!(ids.len(), 6);
        assert_eq!(ids[5], 3, "[SEP] kept");
        assert_eq!(e.embed("hello").len(), 5);
        assert!(matches!(e.embed_ids(&[]), Err(Error::InvalidIds(_))));
        assert!(matches!(e.embed_ids(&[2, 40]), Err(Error::InvalidIds(_))));
        assert!(e.embed_ids(&[2, 39, 3]).is_ok());
    }
}

#[test]
fn vocab_larger_than_model_is_an_error() {
    let file = generate(&small(EmbeddingFormat::Int4), 1);
    assert!(matches!(Engine::from_bytes(&file), Err(Error::Vocab(_))));
    assert!(matches!(
        Engine::from_bytes_with_vocab(&file, "a\nb"),
        Err(Error::Vocab(_))
    ));
}

#[test]
fn damage_gives_typed_errors() {
    let good = generate(&small(EmbeddingFormat::Int8), 2);
    let load = |b: &[u8]| Engine::from_bytes_with_vocab(b, &tiny_vocab()).map(|_| ());
    assert!(load(&good).is_ok());

    assert!(matches!(load(b""), Err(Error::BadMagic { .. })));
    assert!(matches!(load(b"GGUF...."), Err(Error::BadMagic { .. })));
    assert!(matches!(load(&good[..10]), Err(Error::Truncated { .. })));
    match load(&good[..good.len() - 1]) {
        Err(Error::Truncated { what, .. }) => assert_eq!(what, "SHA-256 trailer"),
        other => panic!("{other:?}"),
    }
    match load(&good[..HEADER_LEN + 100]) {
        Err(Error::Truncated { what, .. }) => assert_eq!(what, "embedding codes"),
        other => panic!("{other:?}"),
    }
    let mut long = good.clone();
    long.push(0);
    assert_eq!(load(&long), Err(Error::TrailingBytes(1)));
    let mut flipped = good.clone();
    flipped[HEADER_LEN + 3] ^= 1;
    assert!(matches!(
        load(&flipped),
        Err(Error::ChecksumMismatch { .. })
    ));

    let mut v2 = good.clone();
    v2[4] = 2;
    assert_eq!(load(&v2), Err(Error::UnsupportedVersion(2)));
    let mut fmt = good.clone();
    fmt[6] = 9;
    assert_eq!(load(&fmt), Err(Error::UnsupportedEmbeddingFormat(9)));
    let mut heads = good.clone();
    heads[15] = 5;
    assert!(matches!(load(&heads), Err(Error::InconsistentDims(_))));

    // A NaN scale, a reserved ternary code: caught after the checksum.
    let c = small(EmbeddingFormat::Int8);
    let scales = HEADER_LEN + 40 * 12;
    let mut nan = good.clone();
    nan[scales..scales + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    resign(&mut nan);
    assert!(matches!(load(&nan), Err(Error::BadValue(_))));
    let wq = scales + 40 * 4 + 2 * 12 * 4;
    let mut reserved = good.clone();
    reserved[wq] = 0xFF;
    resign(&mut reserved);
    assert!(matches!(
        load(&reserved),
        Err(Error::ReservedTernaryCode(_))
    ));
    let _ = c;
}

#[test]
fn errors_say_what_is_wrong() {
    let good = generate(&small(EmbeddingFormat::Int4), 2);
    let e = Engine::from_bytes_with_vocab(&good[..200], &tiny_vocab()).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("truncated"), "{msg}");
    assert!(!e.is_retryable());
}

/// Thousands of mutated, truncated and re-signed files: every one loads or fails with an error,
/// none panics, and whatever loads can embed.
#[test]
fn fuzz_mutated_files_never_panic() {
    let mut rng = Rng::new(42);
    let vocab = tiny_vocab();
    let bases: Vec<Vec<u8>> = FORMATS
        .iter()
        .enumerate()
        .map(|(i, &f)| generate(&small(f), i as u64))
        .collect();
    let mut loaded = 0;
    for i in 0..6000 {
        let mut b = bases[i % bases.len()].clone();
        match rng.below(6) {
            0 => b.truncate(rng.below(b.len() + 1)),
            1 => {
                for _ in 0..1 + rng.below(8) {
                    let at = rng.below(b.len());
                    b[at] = rng.next_u64() as u8;
                }
            }
            2 => {
                // Header fields, re-signed so the size checks and parser see them.
                let at = 4 + rng.below(HEADER_LEN - 4);
                b[at] = rng.next_u64() as u8;
                resign(&mut b);
            }
            3 => {
                let at = rng.below(b.len());
                b[at] = rng.next_u64() as u8;
                resign(&mut b);
            }
            4 => {
                let extra = rng.below(64);
                for _ in 0..extra {
                    b.push(rng.next_u64() as u8);
                }
                if rng.below(2) == 0 {
                    resign(&mut b);
                }
            }
            _ => {
                let n = rng.below(200);
                b = (0..n).map(|_| rng.next_u64() as u8).collect();
                if n >= 4 && rng.below(2) == 0 {
                    b[..4].copy_from_slice(b"TERN");
                }
            }
        }
        if let Ok(mut e) = Engine::from_bytes_with_vocab(&b, &vocab) {
            loaded += 1;
            let v = e.embed("hello, a b c");
            assert_eq!(v.len(), e.output_dim());
        }
    }
    assert!(
        loaded > 0,
        "some mutations (payload bytes re-signed) should still load"
    );
}

/// Random text of every kind (any code point, long runs, controls) never panics the tokenizer (3000
/// texts) or the forward pass (every tenth), and always gives `[CLS] … [SEP]` within the limit.
#[test]
fn fuzz_random_text_never_panics() {
    let mut rng = Rng::new(99);
    let mut engine = Engine::from_bytes(&generate(&tiny_config(EmbeddingFormat::Int4), 1)).unwrap();
    let mut out = vec![0f32; engine.output_dim()];
    for i in 0..3000 {
        let len = rng.below(if i % 100 == 0 { 2000 } else { 40 });
        let text: String = (0..len)
            .map(|_| match rng.below(4) {
                0 => char::from(rng.below(128) as u8),
                1 => char::from_u32(rng.below(0x3000) as u32).unwrap_or('?'),
                2 => char::from_u32(rng.below(0x11_0000) as u32).unwrap_or('\u{FFFD}'),
                _ => [
                    '\u{301}',
                    '\u{200D}',
                    ' ',
                    '#',
                    'é',
                    '中',
                    '\0',
                    '\u{E0001}',
                ][rng.below(8)],
            })
            .collect();
        let ids = engine.tokenize(&text);
        assert!(ids.len() >= 2 && ids.len() <= 128, "{} ids", ids.len());
        assert_eq!((ids[0], ids[ids.len() - 1]), (101, 102));
        if i % 10 == 0 {
            engine.embed_into(&text, &mut out);
            assert!(out.iter().all(|v| v.is_finite()));
        }
    }
}
