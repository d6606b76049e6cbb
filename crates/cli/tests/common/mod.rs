//! The one harness the CLI's process tests share: a real `ternflow serve` on a port of the
//! kernel's choice (or a given one), killed and reaped when dropped.
#![allow(dead_code)] // each test binary uses its own subset

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Waits up to `secs` for `child` to exit and asserts it exited with success; `what` names it
/// in the failure.
pub fn exits_ok(child: &mut Child, secs: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert!(st.success(), "{what}: exit status {st}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: did not exit within {secs} s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `cmd` (stdout discarded) and returns its exit status and stderr, failing the test if it
/// is still running after `secs` (it is killed then): a command that should refuse to start
/// and does not would otherwise hold the test forever. `what` names it in the failure.
pub fn output_within(cmd: &mut Command, secs: u64, what: &str) -> (ExitStatus, String) {
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(stderr.reopen().unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let err = std::fs::read_to_string(stderr.path()).unwrap_or_default();
            panic!("{what}: still running after {secs} s (killed): {err}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status, std::fs::read_to_string(stderr.path()).unwrap())
}

/// A free loopback port.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The port in `ternflow serve`'s "listening" log line (`addr=127.0.0.1:PORT`, or JSON's
/// `"addr":"…"`), once logged.
fn listening_port(log: &str) -> Option<u16> {
    let line = log
        .lines()
        .find(|l| l.contains("ternflow-server listening"))?;
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("addr="))
        // `--log-format json`: `"addr":"127.0.0.1:PORT"`.
        .or_else(|| line.split("\"addr\":\"").nth(1)?.split('"').next())?;
    addr.rsplit_once(':')?.1.parse().ok()
}

/// The `ternflow` binary under test.
pub fn ternflow() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ternflow"))
}

/// A running `ternflow serve`.
pub struct Server {
    pub child: Child,
    pub base: String,
    pub port: u16,
    /// The server's stderr (warnings and errors), read back when it fails to start.
    stderr: tempfile::NamedTempFile,
}

impl Server {
    /// Starts `ternflow serve --addr 127.0.0.1:PORT --data-dir DATA EXTRA…` with `envs`, in
    /// `data`'s parent directory (so no default model is picked up), and waits until it accepts
    /// connections. `port` 0: the server binds a port of the kernel's choice and the one it logs
    /// is used (a port chosen beforehand could be taken by a parallel test before the server
    /// binds it, and the test would then talk to that test's server). A server that exits
    /// before it listens fails the test with its stderr. The binary as a user runs it: it
    /// ignores SIGXFSZ itself (a file-size limit fails a write with EFBIG instead of killing it).
    pub fn start(data: &Path, port: u16, extra: &[&str], envs: &[(&str, String)]) -> Server {
        let stderr = tempfile::NamedTempFile::new().unwrap();
        let mut cmd = ternflow();
        cmd.args([
            "serve",
            "--addr",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(data)
        .args(extra)
        .current_dir(data.parent().unwrap())
        // Warnings, and the line that says where it listens.
        .env("RUST_LOG", "warn,ternflow::cmd::serve=info")
        .stdout(Stdio::null())
        .stderr(stderr.reopen().unwrap());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        // Owned by `Server` from here on: its `Drop` kills and reaps the process on every path.
        let mut srv = Server {
            child: cmd.spawn().unwrap(),
            base: String::new(),
            port,
            stderr,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let log = std::fs::read_to_string(srv.stderr.path()).unwrap_or_default();
            if let Some(st) = srv.child.try_wait().unwrap() {
                panic!("ternflow serve exited before it listened ({st}): {log}");
            }
            if let Some(bound) = listening_port(&log) {
                assert!(
                    port == 0 || bound == port,
                    "asked for port {port}, listens on {bound}"
                );
                srv.port = bound;
                srv.base = format!("http://127.0.0.1:{bound}");
                if TcpStream::connect(("127.0.0.1", bound)).is_ok() {
                    return srv;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("ternflow serve did not start");
    }

    /// What the server has written to stderr so far (warnings, errors, the audit log).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.stderr.path()).unwrap_or_default()
    }

    /// `kill -9`, and wait for it.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The HS256 secret (base64, 32 bytes) the signed-token tests share: the server takes it as
/// `TERNFLOW_JWT_KEYS=k1:hs256:SECRET`, `ternflow token mint` as `TERNFLOW_JWT_SECRET`.
pub const SECRET_B64: &str = "a2V5LW9uZS1rZXktb25lLWtleS1vbmUta2V5LW9uZS0=";

/// `ternflow token mint --kid k1 --role ROLE --tenant TENANT` with [`SECRET_B64`].
pub fn mint(role: &str, tenant: &str) -> String {
    let out = ternflow()
        .args([
            "token", "mint", "--kid", "k1", "--role", role, "--tenant", tenant,
        ])
        .env("TERNFLOW_JWT_SECRET", SECRET_B64)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}
