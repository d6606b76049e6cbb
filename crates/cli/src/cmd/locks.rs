//! `ternflow locks list` and `ternflow locks release`: the live single-flight locks a server
//! granted, the stale ones (held far longer than one embedding takes: a hung or closed worker),
//! and releasing them for their holders before their TTL would (an admin token; the server
//! writes an audit line for each). The recovery command behind the lock alerts
//! (docs/runbook.md). A server lists and releases the locks it granted: run it against each
//! server of a fleet.

use serde_json::Value;

use super::client::{check, ServerArgs};
use super::CmdResult;

/// Arguments of `ternflow locks`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub action: Action,
}

/// Which locks.
#[derive(Debug, Clone, clap::Args)]
pub struct Which {
    /// Only stale locks: held at least `--stale-after-ms` by their holder.
    #[arg(long)]
    pub stale: bool,
    /// What `--stale` means (ms): one embedding holds its lock for milliseconds to seconds.
    #[arg(long, default_value_t = 60_000)]
    pub stale_after_ms: u64,
}

impl Which {
    fn held_ms(&self) -> u64 {
        if self.stale {
            self.stale_after_ms
        } else {
            0
        }
    }
}

/// `locks list` / `locks release`.
#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Live locks this server granted, oldest first: key, holder, held for, expires at.
    List {
        #[command(flatten)]
        which: Which,
        /// The server's JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Release locks for their holders: the keys given, or every `--stale` one.
    Release {
        /// Lock keys.
        keys: Vec<String>,
        #[command(flatten)]
        which: Which,
        /// Print what would be released and change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
}

async fn list(
    http: &reqwest::Client,
    server: &ServerArgs,
    held_ms: u64,
) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    let list: Value = server
        .get_json(http, &format!("/v1/locks?held_ms={held_ms}&limit=1000"))
        .await?;
    Ok(list["locks"].as_array().cloned().unwrap_or_default())
}

/// Runs `ternflow locks`.
pub fn run(args: Args) -> CmdResult {
    let rt = tokio::runtime::Runtime::new()?;
    let http = reqwest::Client::new();
    rt.block_on(async move {
        match args.action {
            Action::List {
                which,
                json,
                server,
            } => {
                let locks = list(&http, &server, which.held_ms()).await?;
                for l in &locks {
                    if json {
                        println!("{}", serde_json::to_string(l)?);
                    } else {
                        println!(
                            "{}\t{}\theld {} ms\texpires {}",
                            l["key"].as_str().unwrap_or(""),
                            l["sub"].as_str().unwrap_or("-"),
                            l["held_ms"],
                            l["expires_at"]
                        );
                    }
                }
                if !json {
                    eprintln!("{} locks", locks.len());
                }
                Ok(())
            }
            Action::Release {
                keys,
                which,
                dry_run,
                server,
            } => {
                let keys = match (keys.is_empty(), which.stale) {
                    (false, false) => keys,
                    (true, true) => list(&http, &server, which.held_ms())
                        .await?
                        .iter()
                        .filter_map(|l| l["key"].as_str().map(str::to_owned))
                        .collect(),
                    _ => return Err("give lock keys, or --stale (one of them)".into()),
                };
                let mut done = 0;
                for key in &keys {
                    if dry_run {
                        println!("would release {key}");
                        continue;
                    }
                    let resp = http
                        .post(server.url(&format!("/v1/locks/{key}/break")))
                        .bearer_auth(&server.token)
                        .send()
                        .await?;
                    if resp.status() == reqwest::StatusCode::NOT_FOUND {
                        // Freed meanwhile (its holder released it, or it ran out).
                        println!("already free {key}");
                        continue;
                    }
                    check(resp).await?;
                    println!("released {key}");
                    done += 1;
                }
                eprintln!("{done} of {} locks released", keys.len());
                Ok(())
            }
        }
    })
}
