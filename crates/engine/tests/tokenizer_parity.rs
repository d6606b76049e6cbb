//! The tokenizer gives exactly HF `tokenizers`' ids on the committed fixture
//! (`tests/data/tokenizer_parity.jsonl`, written by `tools/tokenizer_parity.py`).

use ternflow_engine::{Tokenizer, BUNDLED_VOCAB};

#[test]
fn ids_match_hf_tokenizers() {
    let tok = Tokenizer::from_vocab(BUNDLED_VOCAB).unwrap();
    let fixture = include_str!("data/tokenizer_parity.jsonl");
    let mut n = 0;
    let mut failures = Vec::new();
    for line in fixture.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let text = v["text"].as_str().unwrap();
        let want: Vec<u32> = v["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap() as u32)
            .collect();
        let got = tok.encode(text, 128);
        if got != want {
            failures.push(format!("{text:?}\n  want {want:?}\n  got  {got:?}"));
        }
        n += 1;
    }
    assert!(n >= 2000, "fixture has only {n} strings");
    assert!(
        failures.is_empty(),
        "{} of {n} differ:\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
}
