//! The `ternflow` command line: a thin dispatcher. Each subcommand lives in its own file under
//! `cmd/` (see `cmd/mod.rs`); this file only parses arguments and reports errors.

mod cmd;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cmd::Cli::parse();
    match cli.command.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ternflow: {e}");
            ExitCode::FAILURE
        }
    }
}
