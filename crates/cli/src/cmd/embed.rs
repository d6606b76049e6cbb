//! `ternflow embed`: stdin lines → one JSON array per line (the vector, or `--ids` the token ids).

use std::io::{BufRead, BufWriter, Write};

use super::{CmdResult, ModelArgs};

/// Arguments of `ternflow embed`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model and vocabulary.
    #[command(flatten)]
    pub engine: ModelArgs,
    /// Write token ids instead of vectors.
    #[arg(long)]
    pub ids: bool,
}

/// Runs `ternflow embed`.
pub fn run(args: Args) -> CmdResult {
    let mut engine = args.engine.load()?;
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
