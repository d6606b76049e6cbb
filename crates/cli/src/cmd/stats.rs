//! `ternflow stats`: the server's queue depth, counters and workers (`GET /v1/stats`).

use ternflow_core::protocol::Stats;

use super::client::{check, ServerArgs};
use super::CmdResult;

/// Arguments of `ternflow stats`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print the raw JSON instead of a summary.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// Runs `ternflow stats`.
pub fn run(args: Args) -> CmdResult {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let resp = reqwest::Client::new()
            .get(args.server.url("/v1/stats"))
            .bearer_auth(&args.server.token)
            .send()
            .await?;
        let stats: Stats = check(resp).await?.json().await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&stats)?);
            return Ok(());
        }
        let q = stats.queue;
        println!(
            "queue: {} ready, {} delayed, {} in flight, {} dead",
            q.ready, q.delayed, q.leased, q.dead
        );
        println!("acks/s (last minute): {:.2}", stats.ack_rate);
        for (k, v) in &stats.counters {
            if *v > 0 {
                println!("  {k}: {v}");
            }
        }
        for (w, m) in &stats.workers {
            println!(
                "worker {w}: {} counters, {} gauges",
                m.counters.len(),
                m.gauges.len()
            );
        }
        Ok(())
    })
}
