//! `ternflow serve`: run the companion server (queue, SSE, cache, locks, backend embed, metrics).

use std::path::PathBuf;
use std::sync::Arc;

use ternflow_server::jwt::Keys;
use ternflow_server::tenants::StoreFactory;
use ternflow_server::{
    AppState, Config, Durability, EngineEmbedder, RedisStore, Role, SqliteStore, Store,
    Synchronous, Tokens,
};

use super::CmdResult;

/// Arguments of `ternflow serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Log lines on stderr as `text` (colours only on a terminal) or `json` (one object a line).
    #[arg(long, default_value = "text", value_parser = ["text", "json"], env = "TERNFLOW_LOG_FORMAT")]
    pub log_format: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8787", env = "TERNFLOW_ADDR")]
    pub addr: String,
    /// Export every request's span by OTLP to this collector (`http://host:4318` for
    /// `http/protobuf`, `http://host:4317` for `grpc`); by default `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// (or `_TRACES_ENDPOINT`), and off when neither is set. The service is `OTEL_SERVICE_NAME`
    /// (default `ternflow-server`); sampling `OTEL_TRACES_SAMPLER[_ARG]`.
    #[arg(long, env = "TERNFLOW_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// `grpc` or `http/protobuf`; by default `OTEL_EXPORTER_OTLP_PROTOCOL`, else `http/protobuf`.
    #[arg(long, value_parser = ["grpc", "http/protobuf"], env = "TERNFLOW_OTLP_PROTOCOL")]
    pub otlp_protocol: Option<String>,
    /// `embedded` (a SQLite database in --data-dir), one Redis (`redis://host:6379/0`,
    /// `rediss://…`) or a Redis Cluster by its seed nodes
    /// (`redis-cluster://HOST:PORT,HOST:PORT,…`; Valkey too).
    #[arg(long, default_value = "embedded", env = "TERNFLOW_STORE")]
    pub store: String,
    /// Directory of the embedded store.
    #[arg(long, default_value = "ternflow-data", env = "TERNFLOW_DATA_DIR")]
    pub data_dir: PathBuf,
    /// Embedded store: `synchronous=FULL`, an fsync per commit (survives power loss); the
    /// default `NORMAL` survives a killed process.
    #[arg(long, env = "TERNFLOW_FSYNC_ALWAYS")]
    pub fsync_always: bool,
    /// Key prefix in Redis (several deployments can share one Redis).
    #[arg(long, default_value = "tf", env = "TERNFLOW_REDIS_PREFIX")]
    pub redis_prefix: String,
    /// Redis: replicas that must hold an enqueue, ack, nack or redrive before it is confirmed
    /// (`WAIT`). Default 1 on a `redis-cluster://` store, 0 on `redis://` (docs/redis-cluster.md
    /// says what each loses in which failure).
    #[arg(long, env = "TERNFLOW_REDIS_WAIT_REPLICAS")]
    pub redis_wait_replicas: Option<u32>,
    /// Redis: how long a write waits for those replicas before it is reported unconfirmed
    /// (503 `store_unavailable`; retrying it is safe).
    #[arg(long, default_value_t = 1_000, env = "TERNFLOW_REDIS_WAIT_TIMEOUT_MS")]
    pub redis_wait_timeout_ms: u64,
    /// TERN v1 model for `POST /v1/embed` (default: models/ternlight-int4.bin when present).
    #[arg(long, env = "TERNFLOW_MODEL")]
    pub model: Option<PathBuf>,
    /// Token file: one `token:role` per line (roles: producer, worker, admin). Tokens are also
    /// read from `TERNFLOW_TOKENS="tok1:producer,tok2:worker"`.
    #[arg(long, env = "TERNFLOW_TOKENS_FILE")]
    pub tokens: Option<PathBuf>,
    /// Signing keys for short-lived tokens: one `kid:hs256:<base64 secret>` or
    /// `kid:ed25519:<base64 public key>` per line. Also read from `TERNFLOW_JWT_KEYS` (comma
    /// separated). Several at once for rotation.
    #[arg(long, env = "TERNFLOW_JWT_KEYS_FILE")]
    pub jwt_keys: Option<PathBuf>,
    /// The longest lifetime a signed token may have (its `exp` at most this far ahead).
    #[arg(
        long,
        default_value_t = 3_600,
        env = "TERNFLOW_MAX_TOKEN_LIFETIME_SECS"
    )]
    pub max_token_lifetime_secs: u64,
    /// Accept this token with the admin role. For demos on a trusted machine only.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "TERNFLOW_INSECURE_DEV_TOKEN",
        hide_env_values = true
    )]
    pub insecure_dev_token: Option<String>,
    /// Allowed CORS origin (repeatable), e.g. `https://app.example.com`.
    #[arg(
        long = "cors-origin",
        value_name = "ORIGIN",
        env = "TERNFLOW_CORS_ORIGINS",
        value_delimiter = ','
    )]
    pub cors_origins: Vec<String>,
    /// Also allow `http://localhost:*` and `http://127.0.0.1:*` origins (browser tests, demos).
    #[arg(long, env = "TERNFLOW_CORS_ALLOW_LOCALHOST")]
    pub cors_allow_localhost: bool,
    /// Lease length in milliseconds.
    #[arg(long, default_value_t = 30_000, env = "TERNFLOW_LEASE_MS")]
    pub lease_ms: u64,
    /// Longest one delivery may hold its job, heartbeats included, in milliseconds: then the
    /// lease is not extended and the job is delivered again.
    #[arg(long, default_value_t = 600_000, env = "TERNFLOW_MAX_LEASE_HOLD_MS")]
    pub max_lease_hold_ms: u64,
    /// Deliveries before a job is dead-lettered.
    #[arg(long, default_value_t = 5, env = "TERNFLOW_MAX_ATTEMPTS")]
    pub max_attempts: u32,
    /// Releases of a job (a stopping worker handing its lease back) that use no attempt; past
    /// them a release counts as an attempt.
    #[arg(long, default_value_t = 3, env = "TERNFLOW_FREE_RELEASES")]
    pub free_releases: u32,
    /// Most open connections (keep it below `ulimit -n`); more are closed at once.
    #[arg(long, default_value_t = 1_024, env = "TERNFLOW_MAX_CONNECTIONS")]
    pub max_connections: usize,
    /// Sustained requests per second per token (more get 429 with Retry-After).
    #[arg(long, default_value_t = 10_000, env = "TERNFLOW_RATE_PER_TOKEN")]
    pub rate_per_token: u32,
    /// A request's header must arrive within this many milliseconds (also the keep-alive
    /// idle timeout).
    #[arg(long, default_value_t = 10_000, env = "TERNFLOW_HEADER_TIMEOUT_MS")]
    pub header_timeout_ms: u64,
    /// On SIGTERM, connections still open after this many milliseconds are closed.
    #[arg(long, default_value_t = 10_000, env = "TERNFLOW_SHUTDOWN_DEADLINE_MS")]
    pub shutdown_deadline_ms: u64,
    /// Forget finished jobs this many seconds after their ack (their ids may then be enqueued
    /// again). Default: keep them, so duplicates of a done job collapse forever.
    #[arg(long, value_name = "SECS", env = "TERNFLOW_DONE_RETENTION_SECS")]
    pub done_retention_secs: Option<u64>,
    /// Do not recompute workers' results (shape checks and provenance stay on). By default the
    /// server checks every result of a new worker identity before storing it, then a sample
    /// (docs/security.md).
    #[arg(long, env = "TERNFLOW_NO_VERIFY")]
    pub no_verify: bool,
    /// Results of a new worker identity (token `sub`) recomputed, all of them, before it is
    /// trusted enough for sampling.
    #[arg(
        long,
        default_value_t = 32,
        value_name = "K",
        env = "TERNFLOW_VERIFY_PROBATION"
    )]
    pub verify_probation: u64,
    /// Fraction of a trusted identity's results recomputed after they are stored (0..=1).
    #[arg(
        long,
        default_value_t = 0.05,
        value_name = "P",
        env = "TERNFLOW_VERIFY_SAMPLE"
    )]
    pub verify_sample: f64,
    /// Largest per-component difference accepted as equal (0: bit-exact, the default).
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "EPS",
        env = "TERNFLOW_VERIFY_TOLERANCE"
    )]
    pub verify_tolerance: f32,
    /// For jobs of a model the server does not run: how many different worker identities must
    /// send the same vector before a result is final (1: take the first, shape-checked).
    #[arg(
        long,
        default_value_t = 1,
        value_name = "N",
        env = "TERNFLOW_VERIFY_AGREEMENT"
    )]
    pub verify_agreement: u32,
    /// Per-tenant verification settings, a JSON object
    /// `{"tenant": {"probation": K, "sample": P, "agreement": N, "enabled": B}}` (each field
    /// optional; the flags above are the default for every tenant).
    #[arg(long, value_name = "FILE", env = "TERNFLOW_VERIFY_TENANTS")]
    pub verify_tenants: Option<PathBuf>,
    /// Nice value of the engine's thread (Linux, 0..=19): above 0 the backend embeds and
    /// verification yield a busy CPU to queue requests (claims, acks) and use every idle cycle.
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = clap::value_parser!(i32).range(0..=19), env = "TERNFLOW_ENGINE_NICE")]
    pub engine_nice: i32,
    /// Most tenants with an open store at once (each costs file descriptors and threads,
    /// docs/security.md); the least recently used idle one is closed to open another.
    /// Default: an eighth of the open-file limit (`ulimit -n`), within 16..=4096.
    #[arg(long, value_name = "N", env = "TERNFLOW_MAX_OPEN_TENANTS")]
    pub max_open_tenants: Option<usize>,
    /// A tenant unused this long is closed (its data stays; its next request reopens it).
    #[arg(
        long,
        default_value_t = 300,
        value_name = "SECS",
        env = "TERNFLOW_TENANT_IDLE_SECS"
    )]
    pub tenant_idle_secs: u64,
    /// Most long-polling claims one token may have waiting at once (more get 429).
    #[arg(
        long,
        default_value_t = 8,
        value_name = "N",
        env = "TERNFLOW_MAX_POLLS_PER_TOKEN"
    )]
    pub max_polls_per_token: usize,
    /// Most single-flight locks one token may hold at once on this server (more get 429; a
    /// worker refused one embeds without writing that text to the shared cache).
    #[arg(
        long,
        default_value_t = 1_024,
        value_name = "N",
        env = "TERNFLOW_MAX_LOCKS_PER_TOKEN"
    )]
    pub max_locks_per_token: usize,
    /// Longest one token may hold one lock on this server, renewals and re-takes included, in
    /// milliseconds; then the key is other workers' for as long.
    #[arg(
        long,
        default_value_t = 600_000,
        value_name = "MS",
        env = "TERNFLOW_MAX_LOCK_HOLD_MS"
    )]
    pub max_lock_hold_ms: u64,
    /// Most open connections from one client address (more are closed at once). Behind a
    /// proxy every client has the proxy's address: set it to --max-connections there.
    #[arg(
        long,
        default_value_t = 512,
        value_name = "N",
        env = "TERNFLOW_MAX_CONNECTIONS_PER_IP"
    )]
    pub max_connections_per_ip: usize,
    /// `POST /v1/embed` budget of one signed token, in units a minute (a text costs
    /// 1 + bytes/4, at most 128); 429 `quota_exceeded` beyond.
    #[arg(
        long,
        default_value_t = 20_000,
        value_name = "UNITS",
        env = "TERNFLOW_EMBED_TOKENS_PER_MIN"
    )]
    pub embed_tokens_per_min: u32,
    /// Quota of every signed tenant: most jobs pending (ready, delayed, leased).
    #[arg(
        long,
        default_value_t = 1_000_000,
        value_name = "N",
        env = "TERNFLOW_TENANT_MAX_QUEUE"
    )]
    pub tenant_max_queue: u64,
    /// Quota of every signed tenant: most workers in its worker table.
    #[arg(
        long,
        default_value_t = 1_000,
        value_name = "N",
        env = "TERNFLOW_TENANT_MAX_WORKERS"
    )]
    pub tenant_max_workers: usize,
    /// Quota of every signed tenant: `POST /v1/embed` units a minute, all its tokens together.
    #[arg(
        long,
        default_value_t = 200_000,
        value_name = "UNITS",
        env = "TERNFLOW_TENANT_EMBED_TOKENS_PER_MIN"
    )]
    pub tenant_embed_tokens_per_min: u32,
    /// Quota of every signed tenant: most bytes of live remote-cache entries (key bytes + 4 a
    /// dimension each); `PUT /v1/cache` beyond it gets 429 and an ack's write-through is skipped.
    #[arg(long, default_value_t = 1 << 30, value_name = "BYTES", env = "TERNFLOW_TENANT_MAX_CACHE_BYTES")]
    pub tenant_max_cache_bytes: u64,
    /// Per-tenant quotas, a JSON object `{"tenant": {"max_queue": N, "max_workers": N,
    /// "embed_tokens_per_min": N, "max_cache_bytes": N}}` (each field optional; the --tenant-*
    /// flags are the default).
    #[arg(long, value_name = "FILE", env = "TERNFLOW_TENANT_QUOTAS")]
    pub tenant_quotas: Option<PathBuf>,
}

fn jwt_keys(args: &Args) -> Result<Keys, Box<dyn std::error::Error>> {
    let mut spec = String::new();
    if let Some(path) = &args.jwt_keys {
        spec.push_str(
            &std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?,
        );
        spec.push('\n');
    }
    if let Ok(env) = std::env::var("TERNFLOW_JWT_KEYS") {
        spec.push_str(&env);
    }
    let mut k = Keys::parse(&spec).map_err(|e| format!("jwt keys: {e}"))?;
    k.max_lifetime_s = args.max_token_lifetime_secs;
    Ok(k)
}

/// Each tenant of a signed token gets a store of its own: a SQLite database under
/// `DATA_DIR/tenants/<tenant>`, or the key prefix `<prefix>:t:<tenant>` on Redis.
fn tenant_factory(args: &Args) -> StoreFactory {
    let store = args.store.clone();
    let dir = args.data_dir.join("tenants");
    let prefix = args.redis_prefix.clone();
    let full = args.fsync_always;
    let redis = RedisOptions::of(args);
    Arc::new(move |tenant: String| {
        let (store, dir, prefix) = (store.clone(), dir.join(&tenant), prefix.clone());
        Box::pin(async move {
            let s: Arc<dyn Store> = if store == "embedded" {
                let sync = if full {
                    Synchronous::Full
                } else {
                    Synchronous::Normal
                };
                Arc::new(SqliteStore::open(&dir, sync)?)
            } else {
                Arc::new(redis.open(&store, &format!("{prefix}:t:{tenant}")).await?)
            };
            Ok(s)
        })
    })
}

/// How every Redis store of this server is opened: the default tenant's and each signed
/// tenant's alike.
#[derive(Clone, Copy)]
struct RedisOptions {
    wait_replicas: Option<u32>,
    wait_timeout_ms: u64,
    done_retention_ms: Option<u64>,
}

impl RedisOptions {
    fn of(args: &Args) -> Self {
        RedisOptions {
            wait_replicas: args.redis_wait_replicas,
            wait_timeout_ms: args.redis_wait_timeout_ms,
            done_retention_ms: args.done_retention_secs.map(|s| s.saturating_mul(1_000)),
        }
    }

    async fn open(self, url: &str, prefix: &str) -> ternflow_server::Result<RedisStore> {
        let default = Durability::default_for(url);
        let mut s = RedisStore::connect(url, prefix)
            .await?
            .with_durability(Durability {
                replicas: self.wait_replicas.unwrap_or(default.replicas),
                timeout: std::time::Duration::from_millis(self.wait_timeout_ms),
            });
        if let Some(ms) = self.done_retention_ms {
            s = s.with_done_retention(ms);
        }
        Ok(s)
    }
}

fn tokens(args: &Args) -> Result<Tokens, Box<dyn std::error::Error>> {
    let mut spec = String::new();
    if let Some(path) = &args.tokens {
        spec.push_str(
            &std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?,
        );
        spec.push('\n');
    }
    if let Ok(env) = std::env::var("TERNFLOW_TOKENS") {
        spec.push_str(&env);
    }
    let mut t = Tokens::parse(&spec).map_err(|e| format!("tokens: {e}"))?;
    if let Some(dev) = &args.insecure_dev_token {
        // Not `eprintln!`: a stderr that refuses the line must not stop the server starting.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"ternflow: WARNING: --insecure-dev-token grants admin to anyone who knows it\n",
        );
        t.insert(dev.clone(), Role::Admin);
    }
    Ok(t)
}

/// Runs `ternflow serve`.
pub fn run(args: Args) -> CmdResult {
    // The trace exporter's connection lives on the runtime the server runs on.
    let rt = tokio::runtime::Runtime::new()?;
    let otlp = super::telemetry::Otlp::from_env(
        args.otlp_endpoint.as_deref(),
        args.otlp_protocol.as_deref(),
    );
    let _telemetry = {
        let _entered = rt.enter();
        super::telemetry::init(&args.log_format, otlp.as_ref())?
    };
    if let Some(o) = &otlp {
        tracing::info!(endpoint = %o.endpoint, protocol = %o.protocol, "exporting traces (OTLP)");
    }
    let tokens = tokens(&args)?;
    let keys = jwt_keys(&args)?;
    if tokens.is_empty() && keys.is_empty() {
        return Err(
            "no tokens configured: pass --tokens FILE, set TERNFLOW_TOKENS, \
                    set TERNFLOW_JWT_KEYS or --jwt-keys FILE, \
                    or (demos only) --insecure-dev-token TOKEN"
                .into(),
        );
    }
    let model = super::model_or_default(args.model.as_deref());
    let config = Config {
        lease_ms: args.lease_ms,
        max_lease_hold_ms: args.max_lease_hold_ms,
        max_attempts: args.max_attempts,
        free_releases: args.free_releases,
        cors_origins: args.cors_origins.clone(),
        cors_allow_localhost: args.cors_allow_localhost,
        max_connections: args.max_connections,
        rate_per_token: args.rate_per_token,
        rate_burst: args.rate_per_token.saturating_mul(2),
        header_timeout_ms: args.header_timeout_ms,
        shutdown_deadline_ms: args.shutdown_deadline_ms,
        verify: ternflow_server::integrity::Policy {
            enabled: !args.no_verify,
            probation: args.verify_probation,
            sample: args.verify_sample,
            tolerance: args.verify_tolerance,
            agreement: args.verify_agreement,
        },
        verify_tenants: match &args.verify_tenants {
            Some(path) => serde_json::from_str(
                &std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?,
            )
            .map_err(|e| format!("{}: {e}", path.display()))?,
            None => Default::default(),
        },
        max_open_tenants: args
            .max_open_tenants
            .unwrap_or_else(ternflow_server::config::default_max_open_tenants)
            .max(1),
        tenant_idle_ms: args.tenant_idle_secs.saturating_mul(1_000),
        max_polls_per_token: args.max_polls_per_token,
        max_locks_per_token: args.max_locks_per_token,
        max_lock_hold_ms: args.max_lock_hold_ms,
        engine_nice: args.engine_nice,
        max_connections_per_ip: args.max_connections_per_ip,
        embed_tokens_per_min: args.embed_tokens_per_min,
        quotas: ternflow_server::quota::Quotas {
            max_queue: args.tenant_max_queue,
            max_workers: args.tenant_max_workers,
            embed_tokens_per_min: args.tenant_embed_tokens_per_min,
            max_cache_bytes: args.tenant_max_cache_bytes,
        },
        tenant_quotas: match &args.tenant_quotas {
            Some(path) => serde_json::from_str(
                &std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?,
            )
            .map_err(|e| format!("{}: {e}", path.display()))?,
            None => Default::default(),
        },
        ..Config::default()
    };
    if args.max_polls_per_token == 0
        || args.max_locks_per_token == 0
        || args.max_connections_per_ip == 0
        || args.embed_tokens_per_min == 0
    {
        return Err("--max-polls-per-token, --max-locks-per-token, --max-connections-per-ip and --embed-tokens-per-min must be at least 1".into());
    }
    if args.max_lock_hold_ms == 0 {
        return Err("--max-lock-hold-ms must be at least 1".into());
    }
    if args.max_lease_hold_ms < args.lease_ms {
        return Err(format!(
            "--max-lease-hold-ms ({}) must be at least --lease-ms ({}): a delivery holds its job at \
             least one lease",
            args.max_lease_hold_ms, args.lease_ms
        )
        .into());
    }
    config
        .quotas
        .validate()
        .map_err(|e| format!("--tenant-*: {e}"))?;
    for (tenant, o) in &config.tenant_quotas {
        config
            .quotas
            .with(o)
            .validate()
            .map_err(|e| format!("--tenant-quotas, tenant {tenant}: {e}"))?;
    }
    config
        .verify
        .validate()
        .map_err(|e| format!("--verify-*: {e}"))?;
    for (tenant, o) in &config.verify_tenants {
        config
            .verify
            .with(o)
            .validate()
            .map_err(|e| format!("--verify-tenants, tenant {tenant}: {e}"))?;
    }
    // One server per data directory: two would each keep their own fence and sequence
    // counters over one database. Held until the process ends.
    let _data_dir_lock = if args.store == "embedded" {
        Some(ternflow_server::lock_data_dir(&args.data_dir)?)
    } else {
        None
    };
    rt.block_on(async move {
        let store: Arc<dyn Store> = if args.store == "embedded" {
            let sync = if args.fsync_always {
                Synchronous::Full
            } else {
                Synchronous::Normal
            };
            let mut s = SqliteStore::open(&args.data_dir, sync)?;
            if let Some(secs) = args.done_retention_secs {
                s = s.with_done_retention(secs.saturating_mul(1_000));
            }
            Arc::new(s)
        } else if ternflow_server::is_redis_url(&args.store) {
            Arc::new(RedisOptions::of(&args).open(&args.store, &args.redis_prefix).await?)
        } else {
            return Err(format!(
                "--store must be `embedded`, a redis:// URL or redis-cluster://HOST:PORT,…, not {:?}",
                args.store
            )
            .into());
        };
        let tenant_stores = tenant_factory(&args);
        let mut state = AppState::new(store, tokens, config)
            .with_keys(keys)
            .with_tenant_stores(tenant_stores);
        match &model {
            Some(path) => {
                let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
                let embedder = EngineEmbedder::from_bytes(&bytes)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                tracing::info!(model = %path.display(), model_id = %ternflow_server::Embedder::model_id(&embedder), "model loaded");
                state = state
                    .with_embedder(Arc::new(embedder))
                    .with_model_file(bytes);
            }
            None => tracing::warn!("no model: POST /v1/embed answers 503 (pass --model FILE)"),
        }
        let listener = tokio::net::TcpListener::bind(&args.addr).await?;
        tracing::info!(addr = %listener.local_addr()?, store = %args.store, "ternflow-server listening");
        ternflow_server::run(listener, state, shutdown_signal()).await?;
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::super::{Cli, Command};

    #[test]
    fn parses_flags_and_builds_tokens() {
        let dir = std::env::temp_dir().join(format!("tf-serve-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("tokens.txt");
        std::fs::write(&file, "# ci\np1:producer\nw1:worker\n").unwrap();
        let cli = Cli::try_parse_from([
            "ternflow",
            "serve",
            "--store",
            "redis://127.0.0.1:6379/0",
            "--tokens",
            file.to_str().unwrap(),
            "--insecure-dev-token",
            "dev",
            "--cors-origin",
            "https://a.example",
            "--cors-origin",
            "https://b.example",
            "--cors-allow-localhost",
        ])
        .unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("expected serve");
        };
        assert_eq!(args.addr, "127.0.0.1:8787");
        assert_eq!(args.cors_origins.len(), 2);
        assert!(args.cors_allow_localhost);
        let t = super::tokens(&args).unwrap();
        assert_eq!(t.role("p1"), Some(ternflow_server::Role::Producer));
        assert_eq!(t.role("dev"), Some(ternflow_server::Role::Admin));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
