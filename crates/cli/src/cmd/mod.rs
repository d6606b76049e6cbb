//! Subcommands, one per file. To add one: a file with an `Args` struct (clap derive) and a
//! `run(args) -> CmdResult`, a variant in [`Command`], and an arm in [`Command::run`].
//!
//! # Layout
//! - [`embed`], [`bench`], [`gen_model`]: the engine alone (vectors of stdin lines; latency and
//!   throughput; a random valid model file).
//! - [`serve`]: the companion server, its logs and trace export in [`telemetry`];
//!   [`bench_server`]: its throughput over real HTTP;
//!   [`bench_queue`]: a Redis store's queue alone, over many tenants (Redis Cluster scaling).
//! - [`enqueue`], [`stats`], [`results`]: a server's client (submit jobs; depth, counters and
//!   workers; finished jobs' vectors), sharing [`client`]'s options.
//! - [`dlq`], [`quarantine`], [`locks`]: an operator's recovery commands (dead letters by
//!   reason and their redrive, quarantined identities and lifting them, stale locks and
//!   releasing them), each what a runbook section ends with (docs/runbook.md).
//! - [`token`]: `token mint`, a signed tenant token.

use clap::{Parser, Subcommand};

pub mod bench;
pub mod bench_queue;
pub mod bench_server;
pub mod client;
pub mod dlq;
pub mod embed;
pub mod enqueue;
pub mod gen_model;
pub mod locks;
pub mod quarantine;
pub mod results;
pub mod serve;
pub mod stats;
pub mod telemetry;
pub mod token;

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
    /// Run the companion server: queue, SSE, cache, locks, backend embed, metrics.
    Serve(Box<serve::Args>),
    /// Submit jobs to a server, one per line (text or JSON).
    Enqueue(enqueue::Args),
    /// Show a server's queue depth, counters and workers.
    Stats(stats::Args),
    /// Measure server throughput: jobs, cache GET, backend embed.
    BenchServer(bench_server::Args),
    /// Measure a Redis store's queue alone: enqueue, claim, ack over many tenants.
    BenchQueue(bench_queue::Args),
    /// Export finished jobs' vectors as JSON lines or `.npy`, by id.
    Results(results::Args),
    /// Mint short-lived signed tokens (role, tenant, expiry) for browser workers.
    Token(token::Args),
    /// Dead letters by reason, and redriving them (admin).
    Dlq(dlq::Args),
    /// Quarantined worker identities, and lifting a quarantine (admin).
    Quarantine(quarantine::Args),
    /// A server's live single-flight locks, the stale ones, and releasing them (admin).
    Locks(locks::Args),
}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> CmdResult {
        match self {
            Self::Embed(a) => embed::run(a),
            Self::Bench(a) => bench::run(a),
            Self::GenModel(a) => gen_model::run(a),
            Self::Serve(a) => serve::run(*a),
            Self::Enqueue(a) => enqueue::run(a),
            Self::Stats(a) => stats::run(a),
            Self::BenchServer(a) => bench_server::run(a),
            Self::BenchQueue(a) => bench_queue::run(a),
            Self::Token(a) => token::run(a),
            Self::Results(a) => results::run(a),
            Self::Dlq(a) => dlq::run(a),
            Self::Quarantine(a) => quarantine::run(a),
            Self::Locks(a) => locks::run(a),
        }
    }
}

/// The model every command uses when `--model` is not given, when it is there (relative to the
/// working directory, as in a checkout or next to an unpacked release).
pub const DEFAULT_MODEL: &str = "models/ternlight-int4.bin";

/// `--model`, or [`DEFAULT_MODEL`] when it exists.
pub fn model_or_default(model: Option<&std::path::Path>) -> Option<std::path::PathBuf> {
    model.map(std::path::Path::to_path_buf).or_else(|| {
        let p = std::path::PathBuf::from(DEFAULT_MODEL);
        p.exists().then_some(p)
    })
}

/// `--model`, or [`DEFAULT_MODEL`]; an error naming both when neither is there.
pub fn model_path(model: Option<&std::path::Path>) -> Result<std::path::PathBuf, String> {
    model_or_default(model).ok_or_else(|| {
        format!("no model: pass --model FILE (or set TERNFLOW_MODEL); {DEFAULT_MODEL} is not in this directory")
    })
}

/// `--model` and `--vocab`: the engine's files, for the commands that embed here.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// TERN v1 model file (default: models/ternlight-int4.bin when present, as `serve`).
    #[arg(long, env = "TERNFLOW_MODEL")]
    pub model: Option<std::path::PathBuf>,
    /// WordPiece vocabulary (vocab.txt); the bundled BERT uncased one by default.
    #[arg(long)]
    pub vocab: Option<std::path::PathBuf>,
}

impl ModelArgs {
    /// Loads the engine: the model (or [`DEFAULT_MODEL`]) with the vocabulary, if one is given.
    ///
    /// # Errors
    /// A file that cannot be read, or that the engine refuses.
    pub fn load(&self) -> Result<ternflow_engine::Engine, Box<dyn std::error::Error>> {
        let model = model_path(self.model.as_deref())?;
        let bytes = std::fs::read(&model).map_err(|e| format!("{}: {e}", model.display()))?;
        let engine = match &self.vocab {
            Some(v) => {
                let text =
                    std::fs::read_to_string(v).map_err(|e| format!("{}: {e}", v.display()))?;
                ternflow_engine::Engine::from_vec_with_vocab(bytes, &text)?
            }
            None => ternflow_engine::Engine::from_vec(bytes)?,
        };
        Ok(engine)
    }
}
