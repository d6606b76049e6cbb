//! `ternflow bench`: single-threaded embed latency (median, p90, p99), embeds/s and load time.

use std::path::PathBuf;
use std::time::Instant;

use ternflow_engine::{EmbedOptions, Engine};

use super::{CmdResult, ModelArgs};

/// Varied short sentences, about 15 ids each with `[CLS]`/`[SEP]`.
pub const SHORT: &[&str] = &[
    "How do I reset my password if I no longer have access to my email?",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Best Italian restaurants open late on Sunday evenings in Berlin",
    "Can you explain why the sky looks blue during the day?",
    "Quarterly revenue grew by twelve percent compared to last year.",
    "Symptoms of vitamin D deficiency in adults and how to treat them",
    "She finally finished writing her first novel after five long years.",
    "What is the difference between a virus and a bacterium?",
    "Cheap flights from London to New York in early December",
    "The committee postponed its decision until more data is available.",
    "Install the package, then restart the server to apply changes.",
    "Photosynthesis converts light energy into chemical energy in plants.",
    "Is it safe to eat raw cookie dough made without eggs?",
    "Our team won the championship after a dramatic penalty shootout.",
    "How many calories are burned during a thirty minute run?",
    "Rain is expected tomorrow afternoon across most of the region.",
];

/// Arguments of `ternflow bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model and vocabulary.
    #[command(flatten)]
    pub engine: ModelArgs,
    /// One input per line; without it, built-in short sentences and 128-id inputs.
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Timed embeds per input set (after a warm-up of a tenth as many).
    #[arg(long, default_value_t = 500)]
    pub iters: usize,
    /// Also print where the time goes, stage by stage (tokenizer, embedding rows, layer norms,
    /// activation quantisation, each matrix's integer products, attention, GELU,
    /// dequantisation, residuals, pooling and projection), per input set.
    #[arg(long)]
    pub profile: bool,
}

/// Embeds `inputs` `iters` times with the stage clock on and prints the split: time per embed
/// per stage, and its share.
fn profile(engine: &mut Engine, label: &str, inputs: &[String], iters: usize) {
    let mut out = vec![0f32; engine.output_dim()];
    let mut p = ternflow_engine::profile::Profile::default();
    for i in 0..iters.div_ceil(10) {
        engine.embed_into(&inputs[i % inputs.len()], &mut out);
    }
    for i in 0..iters {
        engine.embed_profiled(&inputs[i % inputs.len()], &mut out, &mut p);
    }
    let total = p.total().as_secs_f64();
    let per = |d: std::time::Duration| d.as_secs_f64() * 1e3 / p.embeds as f64;
    println!(
        "{label} profile: {:.3} ms per embed over {} embeds ({:.1} tokens each), kernel {}:",
        total * 1e3 / p.embeds as f64,
        p.embeds,
        p.tokens as f64 / p.embeds as f64,
        engine.kernel().name(),
    );
    for (stage, d) in p.split() {
        println!(
            "  {:<30} {:>8.4} ms {:>5.1} %",
            stage.name(),
            per(d),
            100.0 * d.as_secs_f64() / total.max(1e-12)
        );
    }
}

/// Percentile `p` (0..=100) of sorted `xs`, nearest rank.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Times `iters` embeds cycling through `inputs` and prints one summary line. Each embed is one
/// forward pass: inputs are cut at one window (`max_seq_len` ids), as the "long" row has always
/// measured (a longer text is one such pass per window: docs/engine.md "Long texts").
fn measure(engine: &mut Engine, label: &str, inputs: &[String], iters: usize) {
    let mut out = vec![0f32; engine.output_dim()];
    let ids: usize = inputs.iter().map(|t| engine.tokenize(t).len()).sum();
    let one_pass = EmbedOptions {
        max_tokens: Some(usize::from(engine.config().max_seq_len).saturating_sub(2)),
    };
    for i in 0..iters.div_ceil(10) {
        engine.embed_with(&inputs[i % inputs.len()], one_pass, &mut out);
    }
    let mut times = Vec::with_capacity(iters);
    let start = Instant::now();
    for i in 0..iters {
        let t = Instant::now();
        engine.embed_with(&inputs[i % inputs.len()], one_pass, &mut out);
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let total = start.elapsed().as_secs_f64();
    times.sort_by(f64::total_cmp);
    println!(
        "{label}: {:.1} ids/input, median {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, {:.0} embeds/s \
         ({iters} embeds, 1 thread, kernel {})",
        ids as f64 / inputs.len() as f64,
        percentile(&times, 50.0),
        percentile(&times, 90.0),
        percentile(&times, 99.0),
        iters as f64 / total,
        engine.kernel().name(),
    );
}

/// Inputs that fill `max_ids` (12 sentences, 140–200 ids: measured cut to one window).
pub fn long_inputs() -> Vec<String> {
    (0..SHORT.len())
        .map(|i| {
            (0..12)
                .map(|k| SHORT[(i + k) % SHORT.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// Runs `ternflow bench`.
pub fn run(args: Args) -> CmdResult {
    let t = Instant::now();
    let mut engine = args.engine.load()?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let first = engine.embed(SHORT[0]);
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    let c = *engine.config();
    println!(
        "model {} ({} embeddings, d{} x{} layers, {} heads, ffn {}, out {}): load {load_ms:.1} ms, \
         first embed {first_ms:.2} ms, cold start {:.1} ms",
        engine.model_id(),
        c.embedding_format.name(),
        c.d_model,
        c.n_layers,
        c.n_heads,
        c.ffn_dim,
        c.output_dim,
        load_ms + first_ms,
    );
    debug_assert_eq!(first.len(), engine.output_dim());
    let iters = args.iters.max(1);
    match &args.input {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let inputs: Vec<String> = text.lines().map(str::to_string).collect();
            if inputs.is_empty() {
                return Err(format!("{}: no lines", path.display()).into());
            }
            measure(&mut engine, "input", &inputs, iters);
            if args.profile {
                profile(&mut engine, "input", &inputs, iters);
            }
        }
        None => {
            let short: Vec<String> = SHORT.iter().map(|s| s.to_string()).collect();
            measure(&mut engine, "short", &short, iters);
            let long = long_inputs();
            let long_iters = iters.div_ceil(10).max(20);
            measure(&mut engine, "long", &long, long_iters);
            if args.profile {
                profile(&mut engine, "short", &short, iters);
                profile(&mut engine, "long", &long, long_iters);
            }
        }
    }
    Ok(())
}
