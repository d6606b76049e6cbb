//! Times the stages of loading a model: `cargo run --release -p ternflow-engine --example
//! load_profile -- MODEL.tern`.
use std::time::Instant;

use sha2::{Digest, Sha256};

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: load_profile MODEL.tern");
    let bytes = std::fs::read(path).expect("read model");
    let t = Instant::now();
    let d = Sha256::digest(&bytes);
    println!("sha256 {:?} ({:02x}{:02x})", t.elapsed(), d[0], d[1]);
    let t = Instant::now();
    let tok = ternflow_engine::Tokenizer::from_vocab(ternflow_engine::BUNDLED_VOCAB).unwrap();
    println!("vocab {:?} ({} tokens)", t.elapsed(), tok.len());
    let t = Instant::now();
    let w = ternflow_engine::loader::load(&bytes).unwrap();
    println!("load {:?} ({} layers)", t.elapsed(), w.layers.len());
    let t = Instant::now();
    let e = ternflow_engine::Engine::from_bytes(&bytes).unwrap();
    println!("engine {:?} ({})", t.elapsed(), e.model_id());
}
