//! `ternflow embed`: stdin lines → one JSON array per line (the vector, or `--ids` the token ids),
//! or with `--info` one object per line: the vector and what it covers (ids, windows, truncated).

use std::io::{BufRead, BufWriter, Write};

use ternflow_engine::EmbedOptions;

use super::{CmdResult, ModelArgs};

/// Arguments of `ternflow embed`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model and vocabulary.
    #[command(flatten)]
    pub engine: ModelArgs,
    /// Write token ids instead of vectors (the first window's: `[CLS]`, at most 126, `[SEP]`).
    #[arg(long)]
    pub ids: bool,
    /// Embed at most this many word pieces of each line (default: the whole line, in overlapping
    /// windows of 126 when it is longer).
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<usize>,
    /// Write `{"vector": [...], "tokens": N, "chunks": K, "truncated": bool}` per line.
    #[arg(long, conflicts_with = "ids")]
    pub info: bool,
}

#[derive(serde::Serialize)]
struct Line<'a> {
    vector: &'a [f32],
    tokens: usize,
    chunks: usize,
    truncated: bool,
}

/// Runs `ternflow embed`. A reader that stops early (`ternflow embed | head`) ends the command
/// quietly, as it does for other Unix filters: the lines it no longer reads are not embedded.
pub fn run(args: Args) -> CmdResult {
    match embed_lines(&args) {
        Err(e) if reader_gone(e.as_ref()) => Ok(()),
        r => r,
    }
}

/// Whether `e` is stdout's reader having closed the pipe (`EPIPE`, as an I/O error or inside
/// serde_json's).
fn reader_gone(e: &(dyn std::error::Error + 'static)) -> bool {
    let kind = e
        .downcast_ref::<std::io::Error>()
        .map(std::io::Error::kind)
        .or_else(|| e.downcast_ref::<serde_json::Error>()?.io_error_kind());
    kind == Some(std::io::ErrorKind::BrokenPipe)
}

fn embed_lines(args: &Args) -> CmdResult {
    let mut engine = args.engine.load()?;
    let stdin = std::io::stdin().lock();
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut vector = vec![0f32; engine.output_dim()];
    for (n, line) in stdin.lines().enumerate() {
        // The lines before it are written: output line k is input line k.
        let line = line.map_err(|e| format!("stdin line {}: {e}", n + 1))?;
        if args.ids {
            serde_json::to_writer(&mut out, &engine.tokenize(&line))?;
        } else {
            let options = EmbedOptions {
                max_tokens: args.max_tokens,
            };
            let info = engine.embed_with(&line, options, &mut vector);
            if args.info {
                let line = Line {
                    vector: &vector,
                    tokens: info.tokens,
                    chunks: info.chunks,
                    truncated: info.truncated,
                };
                serde_json::to_writer(&mut out, &line)?;
            } else {
                serde_json::to_writer(&mut out, &vector)?;
            }
        }
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}
