//! `ternflow bench-queue`: the queue store alone, without HTTP — no-op jobs enqueued, claimed and
//! acked (in batches, as the server does for a worker) over many tenants' stores, each a key
//! prefix (a hash tag: on a Redis Cluster the tenants spread over the masters). Prints jobs/s.
//! Several processes against one store stand for several servers (scripts/bench-cluster.sh).
//! It prints figures; it is not a test.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ternflow_core::protocol::{JobResult, ResultSource, Vector};
use ternflow_server::store::{AckInput, JobRecord};
use ternflow_server::{Durability, QueueStore, RedisStore};

use super::CmdResult;

/// Arguments of `ternflow bench-queue`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A Redis URL: `redis://…` or `redis-cluster://HOST:PORT,…`.
    #[arg(long)]
    pub store: String,
    /// Tenants (key prefixes), the jobs spread evenly over them.
    #[arg(long, default_value_t = 12)]
    pub tenants: usize,
    /// Concurrent claim → ack loops per tenant.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Jobs in all.
    #[arg(long, default_value_t = 24_000)]
    pub jobs: usize,
    /// Jobs per enqueue and per claim.
    #[arg(long, default_value_t = 32)]
    pub batch: u32,
    /// Replicas each enqueue and ack waits for (`WAIT`); default the store's (1 on a cluster).
    #[arg(long)]
    pub wait_replicas: Option<u32>,
    /// A name that keeps this run's keys apart from other runs' (default: the process id).
    #[arg(long)]
    pub run: Option<String>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs `ternflow bench-queue`.
pub fn run(args: Args) -> CmdResult {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(bench(args))
}

async fn bench(args: Args) -> CmdResult {
    let run = args
        .run
        .clone()
        .unwrap_or_else(|| std::process::id().to_string());
    let tenants = args.tenants.max(1);
    let per_tenant = args.jobs / tenants;
    let batch = args.batch.max(1) as usize;
    let mut stores = Vec::with_capacity(tenants);
    for t in 0..tenants {
        let mut s = RedisStore::connect(&args.store, &format!("bq{run}:t:{t}")).await?;
        if let Some(n) = args.wait_replicas {
            s = s.with_durability(Durability {
                replicas: n,
                ..Durability::default_for(&args.store)
            });
        }
        stores.push(Arc::new(s));
    }
    let result = JobResult {
        model_id: "m".to_owned(),
        vector: Vector(vec![0.0; 4]),
        source: ResultSource::Backend,
        by: None,
    };

    // Enqueue, every tenant at once.
    let t = Instant::now();
    let mut tasks = Vec::new();
    for (ti, s) in stores.iter().enumerate() {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            for start in (0..per_tenant).step_by(batch) {
                let jobs = (start..(start + batch).min(per_tenant))
                    .map(|i| JobRecord {
                        id: format!("{ti}-{i}"),
                        text: format!("text {i}"),
                        model_id: "m".to_owned(),
                        priority: 0,
                        available_at: 0,
                        meta: None,
                        trace_id: "0af7651916cd43dd8448eb211c80319c".to_owned(),
                    })
                    .collect();
                s.enqueue(jobs, now()).await?;
            }
            Ok::<_, ternflow_server::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let enq = t.elapsed();

    // Claim → ack, `workers` loops per tenant.
    let done = Arc::new(AtomicUsize::new(0));
    let t = Instant::now();
    let mut tasks = Vec::new();
    for s in &stores {
        for w in 0..args.workers.max(1) {
            let (s, done, result) = (s.clone(), done.clone(), result.clone());
            tasks.push(tokio::spawn(async move {
                let name = format!("w{w}");
                loop {
                    let c = s.claim(&name, None, batch as u32, 60_000, 5, now()).await?;
                    if c.jobs.is_empty() {
                        return Ok::<_, ternflow_server::Error>(());
                    }
                    let acks = c
                        .jobs
                        .into_iter()
                        .map(|j| AckInput {
                            id: j.id,
                            token: j.lease.token,
                            result: result.clone(),
                        })
                        .collect::<Vec<_>>();
                    let n = acks.len();
                    s.ack_many(acks, now()).await?;
                    done.fetch_add(n, Ordering::Relaxed);
                }
            }));
        }
    }
    for task in tasks {
        task.await??;
    }
    let work = t.elapsed();
    let n = done.load(Ordering::Relaxed);
    let rate = |n: usize, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    println!(
        "bench-queue: store {}, {tenants} tenants × {} workers, batch {batch}, wait {} replica(s): \
         enqueue {:.0} jobs/s, claim+ack {:.0} jobs/s, overall {:.0} jobs/s ({n} jobs in {:.2} s)",
        args.store,
        args.workers,
        args.wait_replicas
            .unwrap_or(Durability::default_for(&args.store).replicas),
        rate(per_tenant * tenants, enq),
        rate(n, work),
        rate(n, enq + work),
        (enq + work).as_secs_f64()
    );
    Ok(())
}
