//! The determinism invariant (docs/engine.md): every kernel gives bit-identical vectors for the
//! shipped models, on 510 texts (440 short, 40 past the 128-token window — embedded whole as
//! pooled windows, so the pooling is held to the bit too —, 30 non-ASCII in many scripts). The server relies on it to check a worker's vector exactly, whatever kernel the
//! worker ran. The digest of all vectors' bits is committed (`data/determinism.sha256`), and
//! `tests/node/engine.test.mjs` computes the same digest with the shipped wasm (simd128), so
//! native and wasm are held to the same bits.

use sha2::{Digest, Sha256};
use ternflow_engine::{Engine, Kernel};

const CORPUS: &str = include_str!("data/determinism_corpus.txt");
const DIGESTS: &str = include_str!("data/determinism.sha256");

fn digest_of(engine: &mut Engine) -> (String, Vec<Vec<f32>>) {
    let mut h = Sha256::new();
    let mut all = Vec::new();
    for text in CORPUS.lines() {
        let v = engine.embed(text);
        for x in &v {
            h.update(x.to_le_bytes());
        }
        all.push(v);
    }
    let d = h.finalize();
    (d.iter().map(|b| format!("{b:02x}")).collect(), all)
}

#[test]
fn every_kernel_gives_the_same_bits_for_the_shipped_models() {
    assert_eq!(CORPUS.lines().count(), 510);
    assert!(CORPUS.lines().any(|t| !t.is_ascii()));
    let models: [(&str, &[u8]); 2] = [
        (
            "ternlight-int4.bin",
            include_bytes!("../../../models/ternlight-int4.bin"),
        ),
        (
            "ternlight-ternary.bin",
            include_bytes!("../../../models/ternlight-ternary.bin"),
        ),
    ];
    for (name, bytes) in models {
        let mut engine = Engine::from_bytes(bytes).unwrap();
        let long = CORPUS
            .lines()
            .filter(|t| engine.tokenize(t).len() >= 128)
            .count();
        assert!(
            long >= 40,
            "{name}: only {long} texts reach the token window"
        );
        let mut first: Option<(Kernel, String, Vec<Vec<f32>>)> = None;
        let kernels = Kernel::available();
        for &k in &kernels {
            engine.set_kernel(k);
            assert_eq!(engine.kernel(), k);
            let (d, vectors) = digest_of(&mut engine);
            eprintln!("{name} {}: {d}", k.name());
            match &first {
                None => first = Some((k, d, vectors)),
                Some((k0, d0, v0)) => {
                    for (i, (a, b)) in v0.iter().zip(&vectors).enumerate() {
                        let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
                        assert!(
                            same,
                            "{name}: text {i} differs between {} and {}",
                            k0.name(),
                            k.name()
                        );
                    }
                    assert_eq!(&d, d0);
                }
            }
        }
        let (_, d, _) = first.unwrap();
        let want = DIGESTS
            .lines()
            .find_map(|l| l.strip_suffix(name).map(str::trim))
            .unwrap_or_else(|| panic!("no digest for {name} in data/determinism.sha256"));
        assert_eq!(
            d, want,
            "{name}: the vectors' bits changed (kernels {kernels:?})"
        );
    }
}
