//! `ternflow quarantine list` and `ternflow quarantine clear SUB`: worker identities whose
//! results did not match the server's own, and lifting one after the runbook's checks (an admin
//! token; the server writes an audit line). The recovery command behind the quarantine alert
//! (docs/runbook.md).

use serde_json::Value;

use super::client::ServerArgs;
use super::CmdResult;

/// Arguments of `ternflow quarantine`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub action: Action,
}

/// `quarantine list` / `quarantine clear`.
#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Quarantined identities: sub, since (Unix ms), reason.
    List {
        /// The server's JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Lift the quarantine of these identities (each starts its probation again).
    Clear {
        /// Worker identities (`sub`).
        #[arg(required = true)]
        subs: Vec<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// Runs `ternflow quarantine`.
pub fn run(args: Args) -> CmdResult {
    let rt = tokio::runtime::Runtime::new()?;
    let http = reqwest::Client::new();
    rt.block_on(async move {
        match args.action {
            Action::List { json, server } => {
                let list: Value = server.get_json(&http, "/v1/quarantine").await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&list)?);
                    return Ok(());
                }
                let rows = list["quarantined"].as_array().cloned().unwrap_or_default();
                for q in &rows {
                    println!(
                        "{}\t{}\t{}",
                        q["sub"].as_str().unwrap_or(""),
                        q["since"],
                        q["reason"].as_str().unwrap_or("")
                    );
                }
                eprintln!("{} quarantined", rows.len());
                Ok(())
            }
            Action::Clear { subs, server } => {
                for sub in &subs {
                    server
                        .call(
                            &http,
                            reqwest::Method::DELETE,
                            &format!("/v1/quarantine/{sub}"),
                        )
                        .await?;
                    println!("lifted {sub}");
                }
                Ok(())
            }
        }
    })
}
