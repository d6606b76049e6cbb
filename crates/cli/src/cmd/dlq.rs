//! `ternflow dlq list` and `ternflow dlq redrive`: the dead-letter queue, by the code of each
//! job's last failure, and re-queueing dead jobs by id or by that code (an admin token; the
//! server writes an audit line for every redrive). The recovery command behind the
//! dead-letter alert (docs/runbook.md).

use ternflow_core::protocol::{DlqEntry, DlqList};

use super::client::ServerArgs;
use super::CmdResult;

/// Arguments of `ternflow dlq`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub action: Action,
}

/// `dlq list` / `dlq redrive`.
#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Dead letters, oldest first: id, last error code, attempts, message.
    List {
        /// Only those whose last error has this code (`engine_failed`, `lease_expired`, …).
        #[arg(long)]
        reason: Option<String>,
        /// Most entries read from the server (it returns at most 1000).
        #[arg(long, default_value_t = 1_000)]
        limit: usize,
        /// The entries as JSON lines instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Re-queue dead jobs with a fresh attempt count: the ids given, or every dead letter whose
    /// last error has `--reason`'s code, or `--all`.
    Redrive {
        /// Job ids.
        ids: Vec<String>,
        /// Every dead letter whose last error has this code.
        #[arg(long, conflicts_with = "all")]
        reason: Option<String>,
        /// Every dead letter.
        #[arg(long)]
        all: bool,
        /// Print what would be redriven and change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
}

async fn entries(
    http: &reqwest::Client,
    server: &ServerArgs,
    limit: usize,
    reason: Option<&str>,
) -> Result<Vec<DlqEntry>, Box<dyn std::error::Error>> {
    let list: DlqList = server
        .get_json(http, &format!("/v1/dlq?limit={limit}"))
        .await?;
    Ok(list
        .entries
        .into_iter()
        .filter(|e| reason.is_none_or(|r| e.error.code == r))
        .collect())
}

/// Runs `ternflow dlq`.
pub fn run(args: Args) -> CmdResult {
    let rt = tokio::runtime::Runtime::new()?;
    let http = reqwest::Client::new();
    rt.block_on(async move {
        match args.action {
            Action::List {
                reason,
                limit,
                json,
                server,
            } => {
                let found = entries(&http, &server, limit, reason.as_deref()).await?;
                for e in &found {
                    if json {
                        println!("{}", serde_json::to_string(e)?);
                    } else {
                        println!(
                            "{}\t{}\t{} attempts\t{}",
                            e.job.id,
                            e.error.code,
                            e.history.len(),
                            e.error.message.replace(['\n', '\t'], " ")
                        );
                    }
                }
                if !json {
                    eprintln!("{} dead letters", found.len());
                }
                Ok(())
            }
            Action::Redrive {
                ids,
                reason,
                all,
                dry_run,
                server,
            } => {
                let ids = match (ids.is_empty(), &reason, all) {
                    (false, None, false) => ids,
                    (true, Some(r), false) => entries(&http, &server, 1_000, Some(r))
                        .await?
                        .into_iter()
                        .map(|e| e.job.id)
                        .collect(),
                    (true, None, true) => entries(&http, &server, 1_000, None)
                        .await?
                        .into_iter()
                        .map(|e| e.job.id)
                        .collect(),
                    _ => {
                        return Err("give job ids, or --reason CODE, or --all (one of them)".into())
                    }
                };
                let mut done = 0;
                for id in &ids {
                    if dry_run {
                        println!("would redrive {id}");
                        continue;
                    }
                    server
                        .call(
                            &http,
                            reqwest::Method::POST,
                            &format!("/v1/dlq/{id}/redrive"),
                        )
                        .await?;
                    println!("redriven {id}");
                    done += 1;
                }
                eprintln!("{done} of {} dead letters redriven", ids.len());
                Ok(())
            }
        }
    })
}
