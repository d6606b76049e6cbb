//! `ternflow bench-server`: throughput of the server over real HTTP on this machine — no-op jobs
//! enqueue → claim → ack, remote cache GET (compared with `redis-benchmark -t get` when the store
//! is Redis), and backend `POST /v1/embed`. Prints figures; it is not a test.
//!
//! Client and server share the machine (and its cores), so the figures are a floor.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use ternflow_core::protocol::{
    AckBatchRequest, AckItem, AckRequest, ClaimResponse, EmbedResponse, EnqueueRequest, JobResult,
    NewJob, ResultSource,
};
use ternflow_server::{
    AppState, Config, EngineEmbedder, MemoryStore, RedisStore, Role, SqliteStore, Store,
    Synchronous, Tokens,
};

use super::CmdResult;

/// Arguments of `ternflow bench-server`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// `memory` (in memory only), `embedded` (SQLite in a temp dir) or a Redis URL.
    #[arg(long, default_value = "embedded")]
    pub store: String,
    /// No-op jobs to push through.
    #[arg(long, default_value_t = 20_000)]
    pub jobs: usize,
    /// Concurrent workers (claim → ack loops).
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Jobs per claim.
    #[arg(long, default_value_t = 32)]
    pub claim: u32,
    /// Ack each job with its own request (the old protocol) instead of one `POST /v1/jobs/ack`
    /// per claimed batch (what workers do).
    #[arg(long)]
    pub single_acks: bool,
    /// Concurrent clients for the cache and embed phases.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Seconds per timed phase (cache GET, embed).
    #[arg(long, default_value_t = 5)]
    pub secs: u64,
    /// Model for the embed phase (skipped without one; default models/ternlight-int4.bin if present).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Export every request's span by OTLP to this collector, as `ternflow serve
    /// --otlp-endpoint` does (for the tracing overhead: run with and without, interleaved).
    #[arg(long)]
    pub otlp_endpoint: Option<String>,
    /// `grpc` or `http/protobuf` (default).
    #[arg(long, value_parser = ["grpc", "http/protobuf"])]
    pub otlp_protocol: Option<String>,
}

const TOKEN: &str = "bench-admin";

fn redis_port(url: &str) -> Option<u16> {
    let rest = url.strip_prefix("redis://")?;
    let hostport = rest.split('/').next()?.rsplit('@').next()?;
    hostport.rsplit_once(':')?.1.parse().ok()
}

/// Redis's own CPU seconds so far (`INFO cpu`: user + system of its whole process, read with
/// `redis-cli`), for the CPU it spends per job; `None` when the store is not one Redis or
/// `redis-cli` is not there.
fn redis_cpu_s(url: &str) -> Option<f64> {
    redis_port(url)?;
    let out = std::process::Command::new("redis-cli")
        .args(["-u", url, "info", "cpu"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut sum = None;
    for line in text.lines() {
        if let Some(v) = line
            .strip_prefix("used_cpu_sys:")
            .or_else(|| line.strip_prefix("used_cpu_user:"))
        {
            *sum.get_or_insert(0.0) += v.trim().parse::<f64>().ok()?;
        }
    }
    sum
}

/// Runs `ternflow bench-server`.
pub fn run(args: Args) -> CmdResult {
    let rt = tokio::runtime::Runtime::new()?;
    // Logs at `warn` unless RUST_LOG says otherwise, with or without the trace export, so that
    // a run with export and one without differ by the export alone.
    let otlp = args
        .otlp_endpoint
        .as_deref()
        .map(|e| super::telemetry::Otlp {
            endpoint: e.to_owned(),
            protocol: args
                .otlp_protocol
                .clone()
                .unwrap_or_else(|| "http/protobuf".to_owned()),
        });
    let telemetry = {
        let _entered = rt.enter();
        super::telemetry::init_with("text", otlp.as_ref(), "warn")?
    };
    match &otlp {
        Some(o) => println!(
            "tracing: every request's span exported by OTLP ({}) to {}",
            o.protocol, o.endpoint
        ),
        None => println!("tracing: no export"),
    }
    let r = rt.block_on(bench(args));
    drop(telemetry);
    r
}

async fn bench(args: Args) -> CmdResult {
    let tmp = std::env::temp_dir().join(format!("ternflow-bench-{}", std::process::id()));
    let prefix = format!("bench{}", std::process::id());
    let store: Arc<dyn Store> = match args.store.as_str() {
        "memory" => Arc::new(MemoryStore::new()),
        "embedded" => Arc::new(SqliteStore::open(&tmp, Synchronous::Normal)?),
        url => Arc::new(RedisStore::connect(url, &prefix).await?),
    };
    let mut tokens = Tokens::new();
    tokens.insert(TOKEN, Role::Admin);
    // One token drives the whole benchmark: lift the per-token rate limit.
    let config = Config {
        rate_per_token: u32::MAX,
        rate_burst: u32::MAX,
        ..Config::default()
    };
    let mut state = AppState::new(store, tokens, config);
    let model = super::model_or_default(args.model.as_deref());
    if let Some(path) = &model {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        state = state.with_embedder(Arc::new(EngineEmbedder::from_bytes(&bytes)?));
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(ternflow_server::run(listener, state, async move {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()?;
    println!(
        "ternflow bench-server: store {}, {} jobs, {} workers × claim {}, {} clients, {} cores",
        args.store,
        args.jobs,
        args.workers,
        args.claim,
        args.clients,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );

    // Enqueue.
    let cpu0 = redis_cpu_s(&args.store);
    let t = Instant::now();
    for chunk in (0..args.jobs).collect::<Vec<_>>().chunks(1_000) {
        let jobs = chunk
            .iter()
            .map(|i| NewJob::text(format!("job {i} {}", std::process::id())))
            .collect();
        let r = http
            .post(format!("{base}/v1/jobs"))
            .bearer_auth(TOKEN)
            .json(&EnqueueRequest::Batch { jobs })
            .send()
            .await?;
        if !r.status().is_success() {
            return Err(format!("enqueue: {}", r.text().await?).into());
        }
    }
    let enq = t.elapsed();
    let cpu1 = redis_cpu_s(&args.store);
    println!(
        "enqueue (batches of 1000):      {:>10.0} jobs/s",
        args.jobs as f64 / enq.as_secs_f64()
    );

    // Claim → ack.
    let done = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..args.workers {
        let (http, base, done) = (http.clone(), base.clone(), done.clone());
        let (target, claim, single) = (args.jobs as u64, args.claim, args.single_acks);
        tasks.push(tokio::spawn(async move {
            // Typed bodies, as the workers send them (not `serde_json::Value` trees).
            let ack_result = JobResult {
                model_id: "m".to_owned(),
                vector: vec![1.0f32].into(),
                source: ResultSource::Engine,
                by: None,
            };
            while done.load(Ordering::Relaxed) < target {
                let r: ClaimResponse = http
                    .post(format!("{base}/v1/jobs/claim"))
                    .bearer_auth(TOKEN)
                    .json(&json!({"worker": format!("bench{w}"), "max": claim}))
                    .send()
                    .await?
                    .json()
                    .await?;
                if r.jobs.is_empty() {
                    tokio::task::yield_now().await;
                    continue;
                }
                if !single {
                    let acks = r
                        .jobs
                        .iter()
                        .map(|j| AckItem {
                            id: j.id.clone(),
                            ack: AckRequest {
                                token: j.lease.token.clone(),
                                worker: None,
                                result: ack_result.clone(),
                                cache: None,
                                timing: None,
                            },
                        })
                        .collect();
                    let resp = http
                        .post(format!("{base}/v1/jobs/ack"))
                        .bearer_auth(TOKEN)
                        .json(&AckBatchRequest { acks, worker: None })
                        .send()
                        .await?;
                    if !resp.status().is_success() {
                        return Err("batch ack refused".into());
                    }
                    done.fetch_add(r.jobs.len() as u64, Ordering::Relaxed);
                    continue;
                }
                let acks = r.jobs.iter().map(|j| {
                    http.post(format!("{base}/v1/jobs/{}/ack", j.id))
                        .bearer_auth(TOKEN)
                        .json(&json!({"token": j.lease.token, "result": ack_result}))
                        .send()
                });
                for a in futures_util::future::join_all(acks).await {
                    if !a?.status().is_success() {
                        return Err::<(), Box<dyn std::error::Error + Send + Sync>>(
                            "ack refused".into(),
                        );
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(())
        }));
    }
    for t in tasks {
        t.await?.map_err(|e| e.to_string())?;
    }
    let proc = t.elapsed();
    let cpu2 = redis_cpu_s(&args.store);
    println!(
        "claim → ack (no-op jobs):       {:>10.0} jobs/s",
        args.jobs as f64 / proc.as_secs_f64()
    );
    println!(
        "enqueue → claim → ack overall:  {:>10.0} jobs/s",
        args.jobs as f64 / (enq + proc).as_secs_f64()
    );
    if let (Some(a), Some(b), Some(c)) = (cpu0, cpu1, cpu2) {
        let per_job = |s: f64| s / args.jobs as f64 * 1e6;
        println!(
            "Redis's CPU per job (INFO cpu):  enqueue {:.1} µs, claim → ack {:.1} µs",
            per_job(b - a),
            per_job(c - b)
        );
    }

    // Cache GET.
    let key = "0123456789abcdef:bench";
    // A unit vector: the server refuses cache writes that are not (a worker's writes are checked).
    let vector = ternflow_core::codec::encode_vector(&vec![1.0 / 384f32.sqrt(); 384]);
    // A PUT must carry the fence of a live lock on the key.
    let lock: serde_json::Value = http
        .post(format!("{base}/v1/locks/{key}"))
        .bearer_auth(TOKEN)
        .send()
        .await?
        .json()
        .await?;
    let put = http
        .put(format!("{base}/v1/cache/{key}"))
        .bearer_auth(TOKEN)
        .json(&json!({"model_id": "0123456789abcdef", "vector": vector, "fence": lock["fence"]}))
        .send()
        .await?;
    if !put.status().is_success() {
        return Err(format!("cache PUT refused: {}", put.status()).into());
    }
    let gets = timed(args.clients, args.secs, {
        let (http, url) = (http.clone(), format!("{base}/v1/cache/{key}"));
        move || {
            let req = http.get(&url).bearer_auth(TOKEN).send();
            async move { req.await.map(|r| r.status().is_success()).unwrap_or(false) }
        }
    })
    .await;
    println!("cache GET (384-d vector):       {gets:>10.0} req/s");
    if let Some(port) = redis_port(&args.store) {
        let out = std::process::Command::new("redis-benchmark")
            .args(["-p", &port.to_string(), "-t", "get", "-n", "200000", "-c"])
            .arg(args.clients.to_string())
            .args(["-d", "1536", "-q"])
            .output();
        match out {
            Ok(o) => {
                let text = String::from_utf8_lossy(&o.stdout);
                let raw = text
                    .split_whitespace()
                    .zip(text.split_whitespace().skip(1))
                    .find(|(_, next)| *next == "requests")
                    .and_then(|(n, _)| n.parse::<f64>().ok());
                match raw {
                    Some(raw) => println!(
                        "redis-benchmark -t get -d 1536: {raw:>10.0} req/s  → server = {:.0} % of raw Redis",
                        gets / raw * 100.0
                    ),
                    None => println!("redis-benchmark output not understood: {text}"),
                }
            }
            Err(e) => println!("redis-benchmark not run: {e}"),
        }
    }

    // Embed.
    if model.is_some() {
        let n = Arc::new(AtomicU64::new(0));
        let texts = timed(args.clients, args.secs, {
            let (http, url, n) = (http.clone(), format!("{base}/v1/embed"), n.clone());
            move || {
                let i = n.fetch_add(1, Ordering::Relaxed);
                let req = http
                    .post(&url)
                    .bearer_auth(TOKEN)
                    .json(&json!({"texts": [format!("the quick brown fox number {i} jumps over the lazy dog")]}))
                    .send();
                async move {
                    match req.await {
                        Ok(r) if r.status().is_success() => r.json::<EmbedResponse>().await.is_ok(),
                        _ => false,
                    }
                }
            }
        })
        .await;
        println!("POST /v1/embed (1 text each):   {texts:>10.1} texts/s");
    } else {
        println!("POST /v1/embed: skipped (no --model)");
    }

    let _ = stop.send(());
    server.await??;
    if args.store == "embedded" {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    Ok(())
}

/// Runs `op` from `clients` concurrent loops for `secs` seconds; successful ops per second.
async fn timed<F, Fut>(clients: usize, secs: u64, op: F) -> f64
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let ok = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs(secs);
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (op, ok) = (op.clone(), ok.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                if op().await {
                    ok.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    ok.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64()
}
