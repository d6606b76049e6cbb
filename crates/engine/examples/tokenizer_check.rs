//! Compares the tokenizer with any fixture written by `tools/tokenizer_parity.py OUT.jsonl`
//! (for example one made with another seed): `cargo run --release -p ternflow-engine --example
//! tokenizer_check -- OUT.jsonl`. Exits non-zero on the first difference.

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: tokenizer_check FIXTURE.jsonl");
    let text = std::fs::read_to_string(&path).expect("read fixture");
    let tok = ternflow_engine::Tokenizer::from_vocab(ternflow_engine::BUNDLED_VOCAB).unwrap();
    let mut n = 0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("json line");
        let input = v["text"].as_str().expect("text");
        let want: Vec<u32> = v["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|i| i.as_u64().unwrap_or(u64::MAX) as u32)
            .collect();
        let got = tok.encode(input, 128);
        if got != want {
            eprintln!("differs on {input:?}\n  want {want:?}\n  got  {got:?}");
            std::process::exit(1);
        }
        n += 1;
    }
    println!("{n} strings: identical ids");
}
