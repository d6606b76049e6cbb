//! `ternflow gen-model`: a random valid TERN v1 file of any shape and embedding format.

use std::path::PathBuf;

use ternflow_engine::{testing, Config, EmbeddingFormat};

use super::CmdResult;

/// Arguments of `ternflow gen-model` (defaults: the Ternlight base shape, int4).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Embedding format: fp32, int8, ternary or int4.
    #[arg(long, default_value = "int4")]
    pub format: String,
    /// Vocabulary size.
    #[arg(long, default_value_t = 30522)]
    pub vocab: u32,
    /// Hidden width.
    #[arg(long, default_value_t = 384)]
    pub d: u16,
    /// Layers.
    #[arg(long, default_value_t = 2)]
    pub layers: u8,
    /// Attention heads.
    #[arg(long, default_value_t = 6)]
    pub heads: u8,
    /// FFN width.
    #[arg(long, default_value_t = 1536)]
    pub ffn: u16,
    /// Output dimension.
    #[arg(long, default_value_t = 384)]
    pub out: u16,
    /// Maximum ids per input.
    #[arg(long, default_value_t = 128)]
    pub max_seq_len: u16,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output file.
    pub path: PathBuf,
}

/// Runs `ternflow gen-model`.
pub fn run(a: Args) -> CmdResult {
    let embedding_format = EmbeddingFormat::from_name(&a.format)
        .ok_or_else(|| format!("unknown format {:?} (fp32, int8, ternary, int4)", a.format))?;
    let config = Config {
        embedding_format,
        vocab_size: a.vocab,
        d_model: a.d,
        n_layers: a.layers,
        n_heads: a.heads,
        ffn_dim: a.ffn,
        output_dim: a.out,
        max_seq_len: a.max_seq_len,
    };
    config.validate()?;
    let bytes = testing::generate(&config, a.seed);
    std::fs::write(&a.path, &bytes).map_err(|e| format!("{}: {e}", a.path.display()))?;
    eprintln!("wrote {} ({} bytes)", a.path.display(), bytes.len());
    Ok(())
}
