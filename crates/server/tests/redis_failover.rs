//! A master of a Redis Cluster dies under load (`kill -9`) and its replica takes over, while a
//! producer enqueues and several workers (each a store of its own, as separate servers are)
//! claim and ack: no confirmed job is lost, none completes twice, fences only grow. Prints how
//! long nothing was acked.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::cluster::RedisCluster;
use ternflow_core::protocol::JobState;
use ternflow_server::store::{AckOutcome, JobRecord, QueueStore};
use ternflow_server::RedisStore;

const PREFIX: &str = "fo";
const JOBS: usize = 3_000;
const BATCH: usize = 20;
const WORKERS: usize = 4;
const LEASE_MS: u64 = 2_000;

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Job `i` of the run.
fn job(i: usize) -> JobRecord {
    common::job(&format!("j{i:05}"))
}

#[derive(Default)]
struct Log {
    /// Ids whose enqueue was confirmed.
    confirmed: HashSet<String>,
    /// Per id, the lease tokens whose ack was confirmed (done, or repeated after a lost reply).
    completions: HashMap<String, HashSet<String>>,
    /// When each confirmed ack came back (ms since start).
    acked_at: Vec<u64>,
    /// Every fence a claim handed out, per worker in claim order.
    fences: Vec<Vec<u64>>,
    /// Store errors seen (and retried) by producer and workers.
    errors: u64,
    /// Until when errors kept coming (ms since start), and the last one.
    last_error: Option<(u64, String)>,
    t0: Option<Instant>,
}

impl Log {
    fn error(&mut self, e: ternflow_server::Error) {
        self.errors += 1;
        let at = self.t0.map_or(0, |t| t.elapsed().as_millis() as u64);
        if self.errors % 50 == 1 {
            eprintln!("{at} ms: {e}");
        }
        assert!(at < 90_000, "the store did not recover: {e}");
        self.last_error = Some((at, e.to_string()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_killed_under_load_loses_no_confirmed_job() {
    let mut cluster = RedisCluster::start("redis-server", 3);
    let url = cluster.url();
    let t0 = Instant::now();
    let log = Arc::new(Mutex::new(Log {
        fences: vec![Vec::new(); WORKERS],
        t0: Some(t0),
        ..Log::default()
    }));
    let ms = move || t0.elapsed().as_millis() as u64;
    let producing = Arc::new(AtomicBool::new(true));

    let producer = {
        let store = RedisStore::connect(&url, PREFIX).await.unwrap();
        let (log, producing) = (log.clone(), producing.clone());
        tokio::spawn(async move {
            for start in (0..JOBS).step_by(BATCH) {
                let batch: Vec<JobRecord> = (start..start + BATCH).map(job).collect();
                // Retried until confirmed: an enqueue is idempotent by id.
                loop {
                    match store.enqueue(batch.clone(), now()).await {
                        Ok(_) => {
                            let mut l = log.lock().unwrap();
                            l.confirmed.extend(batch.iter().map(|j| j.id.clone()));
                            break;
                        }
                        Err(e) => {
                            log.lock().unwrap().error(e);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            producing.store(false, Ordering::SeqCst);
        })
    };

    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let store = RedisStore::connect(&url, PREFIX).await.unwrap();
        let (log, producing) = (log.clone(), producing.clone());
        workers.push(tokio::spawn(async move {
            let name = format!("w{w}");
            let mut idle_since: Option<Instant> = None;
            loop {
                let claimed = match store.claim(&name, None, 8, LEASE_MS, 1_000, now()).await {
                    Ok(c) => c,
                    Err(e) => {
                        log.lock().unwrap().error(e);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if claimed.jobs.is_empty() {
                    // Done once the producer is and nothing came for a while (leases lost
                    // in the failover expire after LEASE_MS and are claimed again).
                    let since = *idle_since.get_or_insert_with(Instant::now);
                    if !producing.load(Ordering::SeqCst)
                        && since.elapsed() > Duration::from_millis(3 * LEASE_MS)
                    {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                idle_since = None;
                log.lock().unwrap().fences[w].extend(claimed.jobs.iter().map(|j| j.lease.fence));
                for j in claimed.jobs {
                    // An ack is retried (idempotent for its lease) until it is answered.
                    for _ in 0..100 {
                        match store
                            .ack(&j.id, &j.lease.token, common::result(), now())
                            .await
                        {
                            Ok(AckOutcome::Done { .. } | AckOutcome::Repeated) => {
                                let mut l = log.lock().unwrap();
                                l.completions
                                    .entry(j.id.clone())
                                    .or_default()
                                    .insert(j.lease.token.clone());
                                let t = ms();
                                l.acked_at.push(t);
                                break;
                            }
                            Ok(_) => break, // stale: the lease was lost in the failover
                            Err(e) => {
                                log.lock().unwrap().error(e);
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                        }
                    }
                }
            }
        }));
    }

    // Connected before the failover, used after it: its slot map is stale then, and its
    // pipelines (status, depth) must find the new master.
    let check = RedisStore::connect(&url, PREFIX).await.unwrap();
    check.depth(now()).await.unwrap();

    // Let work flow, then kill the master that holds the queue's slot.
    while log.lock().unwrap().acked_at.len() < 500 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let victim = cluster
        .master_of(&format!("{{{PREFIX}}}:ready"))
        .expect("a master holds the queue");
    let killed_at = ms();
    cluster.kill9(victim);
    eprintln!("killed the master on port {victim} at {killed_at} ms");
    // Its replica takes over; then the dead node is started again, as a supervisor would, and
    // rejoins as the new master's replica (until then, a write waiting for one replica cannot
    // be confirmed: the promoted master has none).
    let promoted = loop {
        match cluster.master_of(&format!("{{{PREFIX}}}:ready")) {
            Some(m) if m != victim => break m,
            _ => {}
        }
        assert!(ms() - killed_at < 30_000, "no replica took over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let promoted_at = ms();
    cluster.restart(victim);
    eprintln!("port {promoted} took over at {promoted_at} ms; {victim} restarted");

    producer.await.unwrap();
    for w in workers {
        tokio::time::timeout(Duration::from_secs(120), w)
            .await
            .expect("the workers finish")
            .unwrap();
    }
    assert_eq!(
        cluster.master_of(&format!("{{{PREFIX}}}:ready")),
        Some(promoted),
        "the replica that took over keeps the slot"
    );

    let depth = check.depth(now()).await.unwrap();
    assert_eq!(
        (depth.ready, depth.leased, depth.dead),
        (0, 0, 0),
        "all drained"
    );
    let confirmed: Vec<String> = log.lock().unwrap().confirmed.iter().cloned().collect();
    let mut lost = Vec::new();
    for id in &confirmed {
        match check.status(id).await.unwrap().map(|s| s.state) {
            Some(JobState::Done { .. }) => {}
            other => lost.push((id.clone(), other)),
        }
    }
    let log = log.lock().unwrap();
    let duplicated: Vec<_> = log
        .completions
        .iter()
        .filter(|(_, tokens)| tokens.len() > 1)
        .collect();
    let all: Vec<u64> = log.fences.iter().flatten().copied().collect();
    let unique: HashSet<u64> = all.iter().copied().collect();
    let grows = log.fences.iter().all(|f| f.windows(2).all(|w| w[0] < w[1]));
    let mut acks = log.acked_at.clone();
    acks.sort_unstable();
    let stall = acks
        .windows(2)
        .filter(|w| w[1] >= killed_at)
        .map(|w| w[1] - w[0].max(killed_at))
        .max()
        .unwrap_or(0);
    println!(
        "failover: {} confirmed jobs, {} lost, {} completed twice, {} fences ({} unique, each \
         worker's growing: {grows}), {} store errors retried; a replica took over {} ms after \
         the kill, and {stall} ms passed without an ack (cluster-node-timeout {} ms)",
        log.confirmed.len(),
        lost.len(),
        duplicated.len(),
        all.len(),
        unique.len(),
        log.errors,
        promoted_at - killed_at,
        common::cluster::NODE_TIMEOUT_MS,
    );
    assert_eq!(
        log.confirmed.len(),
        JOBS,
        "every enqueue was confirmed in the end"
    );
    assert!(lost.is_empty(), "confirmed jobs lost: {lost:?}");
    assert!(duplicated.is_empty(), "completed twice: {duplicated:?}");
    assert_eq!(unique.len(), all.len(), "no fence handed out twice");
    assert!(grows, "each worker's fences grow");
    assert!(
        log.errors > 0,
        "the kill was felt (else the test proved nothing)"
    );
}
