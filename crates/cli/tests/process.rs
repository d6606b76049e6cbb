//! What the `ternflow` process sets up for itself before any command runs.

mod common;

use std::path::Path;

use common::Server;

/// The kernel's `THP_enabled` flag of a process (0: `PR_SET_THP_DISABLE` is set).
fn thp_enabled(pid: u32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(|v| v.trim().to_owned())
}

fn serve(data: &Path, envs: &[(&str, String)]) -> Server {
    let mut envs = envs.to_vec();
    envs.push(("TERNFLOW_TOKENS", "p-tok:producer".to_owned()));
    Server::start(data, 0, &["--store", "embedded"], &envs)
}

#[test]
#[cfg(target_os = "linux")]
fn the_server_runs_without_transparent_huge_pages_unless_told_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    if thp_enabled(std::process::id()).is_none() {
        eprintln!("skipped: this kernel's /proc/PID/status has no THP_enabled line");
        return;
    }
    let off = serve(&dir.path().join("a"), &[]);
    assert_eq!(thp_enabled(off.pid()).as_deref(), Some("0"));
    let on = serve(
        &dir.path().join("b"),
        &[("MIMALLOC_ALLOW_THP", "1".to_owned())],
    );
    assert_eq!(thp_enabled(on.pid()).as_deref(), Some("1"));
}
