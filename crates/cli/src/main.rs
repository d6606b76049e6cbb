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
    no_transparent_huge_pages();
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

/// mimalloc v3 asks the kernel for transparent huge pages (`MADV_HUGEPAGE`) for its arenas, so
/// the first touch of a fresh or purged 2 MiB region has the kernel zero all of it: most of
/// `ternflow bench-server`'s own CPU under `perf`, and an enqueue rate that halved on some runs
/// (the measurement: docs/server.md, "Transparent huge pages off"). A server's heap is small and
/// churns: it loses nothing by 4 KiB pages (Redis asks for THP off for the same reason). This
/// turns them off for this process (`PR_SET_THP_DISABLE`, checked by the kernel at every page
/// fault, so it covers what mimalloc mapped before `main`) unless `MIMALLOC_ALLOW_THP` is set.
/// Tested in `tests/process.rs`.
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: a process attribute; no memory is touched. An error (an old kernel) leaves THP on.
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
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
