//! Subcommands, one per file. To add one: a file with an `Args` struct (clap derive) and a
//! `run(args) -> CmdResult`, a variant in [`Command`], and an arm in [`Command::run`].

use clap::{Parser, Subcommand};

pub mod bench;
pub mod embed;
pub mod gen_model;

/// What a subcommand returns.
pub type CmdResult = Result<(), Box<dyn std::error::Error>>;

/// Text embeddings at the edge.
#[derive(Debug, Parser)]
#[command(name = "ternflow", version, about)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// Every subcommand.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Embed UTF-8 lines from stdin: one JSON array per line on stdout.
    Embed(embed::Args),
    /// Time single-threaded embeds: median, p90, p99, embeds/s, load time.
    Bench(bench::Args),
    /// Write a random valid TERN v1 model (for tests and benchmarks).
    GenModel(gen_model::Args),
}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> CmdResult {
        match self {
            Self::Embed(a) => embed::run(a),
            Self::Bench(a) => bench::run(a),
            Self::GenModel(a) => gen_model::run(a),
        }
    }
}

/// Loads an engine from a model file and an optional vocabulary file.
pub fn load_engine(
    model: &std::path::Path,
    vocab: Option<&std::path::Path>,
) -> Result<ternflow_engine::Engine, Box<dyn std::error::Error>> {
    let bytes = std::fs::read(model).map_err(|e| format!("{}: {e}", model.display()))?;
    let engine = match vocab {
        Some(v) => {
            let text = std::fs::read_to_string(v).map_err(|e| format!("{}: {e}", v.display()))?;
            ternflow_engine::Engine::from_bytes_with_vocab(&bytes, &text)?
        }
        None => ternflow_engine::Engine::from_bytes(&bytes)?,
    };
    Ok(engine)
}
