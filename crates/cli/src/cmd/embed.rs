//! `ternflow embed`: stdin lines → one JSON array per line (the vector, or `--ids` the token ids).

use std::io::{BufRead, BufWriter, Write};
use std::path::PathBuf;

use super::{load_engine, CmdResult};

/// Arguments of `ternflow embed`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// TERN v1 model file (default: models/ternlight-int4.bin when present, as `serve`).
    #[arg(long, env = "TERNFLOW_MODEL")]
    pub model: Option<PathBuf>,
    /// WordPiece vocabulary (vocab.txt); the bundled BERT uncased one by default.
    #[arg(long)]
    pub vocab: Option<PathBuf>,
    /// Write token ids instead of vectors.
    #[arg(long)]
    pub ids: bool,
}

/// Runs `ternflow embed`.
pub fn run(args: Args) -> CmdResult {
    let mut engine = load_engine(
        &super::model_path(args.model.as_deref())?,
        args.vocab.as_deref(),
    )?;
    let stdin = std::io::stdin().lock();
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut vector = vec![0f32; engine.output_dim()];
    for line in stdin.lines() {
        let line = line?;
        if args.ids {
            serde_json::to_writer(&mut out, &engine.tokenize(&line))?;
        } else {
            engine.embed_into(&line, &mut vector);
            serde_json::to_writer(&mut out, &vector)?;
        }
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}
