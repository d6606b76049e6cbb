//! The `ternflow` command line: a thin dispatcher. Each subcommand lives in its own file under
//! `cmd/` (see `cmd/mod.rs`); this file only parses arguments and reports errors.

mod cmd;

use std::process::ExitCode;

use clap::Parser;

// The server allocates a little per request and per job (JSON values, strings); glibc's malloc
// spent ~16 % of `bench-server`'s cycles (perf) where mimalloc spends a fraction of that.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // A full disk or a file-size limit is an error a command reports, never a crash.
    ternflow_server::ignore_file_size_signal();
    let cli = cmd::Cli::parse();
    match cli.command.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ternflow: {}", with_causes(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// `e` and every cause under it, `: `-separated (an HTTP client's "error sending request for url
/// (…)" says where; its causes say why: "Connection refused", "dns error", a timeout), skipping
/// a cause already in the text.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let t = c.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        cause = c.source();
    }
    text
}
