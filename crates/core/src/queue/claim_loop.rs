//! The queue loop: claim as many jobs as there are free slots (backpressure), run them
//! concurrently on one thread, wake on SSE `jobs` events or a watchdog, and drain on stop.

use std::future::Future;
use std::pin::Pin;

use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::error::{Error, Result};
use crate::metrics::{gauges, names};
use crate::pipeline::{Pipeline, Ports};
use crate::ports::{Clock, JobSource, Wakeups};
use crate::protocol::ClaimedJob;
use crate::queue::job::JobOutcome;
use crate::queue::lease_board::LeaseBoard;
use crate::retry::Backoff;

/// Totals of one run of the queue loop (as the page gets them: camelCase JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    /// Jobs claimed.
    pub claimed: u64,
    /// Jobs acked.
    pub done: u64,
    /// Jobs nacked for re-delivery.
    pub retried: u64,
    /// Jobs dead-lettered.
    pub dead: u64,
    /// Jobs whose lease was lost.
    pub lost: u64,
    /// Jobs handed back unfinished at the stop deadline.
    pub handed_back: u64,
}

enum Event {
    Claimed(Result<Vec<ClaimedJob>>),
    Finished(String, JobOutcome),
    /// A job the server resolved at claim is in the local cache.
    Kept,
    Woken(Option<u64>),
    ClaimAgain,
    AckPushed,
    Beaten,
    Waiting(Flow),
    Flushed(Flow),
    Stop,
    Deadline,
    /// The loop was paused and is not any more.
    Resumed,
}

/// The two batched requests the loop flushes.
#[derive(Clone, Copy)]
enum Flow {
    Acks,
    Nacks,
}

type Task<'a> = Pin<Box<dyn Future<Output = Event> + 'a>>;

/// Backoff between failed claims (the server unreachable).
const CLAIM_BACKOFF: Backoff = Backoff {
    base_ms: 200,
    max_ms: 10_000,
    max_attempts: u32::MAX,
};

impl<P: Ports> Pipeline<P> {
    /// Runs the queue loop until [`Pipeline::stop`] is raised and in-flight jobs are drained (or
    /// its deadline passes, when unfinished jobs are handed back with a release, which uses no
    /// attempt).
    pub async fn run_queue<W: Wakeups>(&self, wake: &W) -> RunSummary {
        let mut sum = RunSummary::default();
        let board = &self.leases;
        let mut tasks: FuturesUnordered<Task<'_>> = FuturesUnordered::new();
        tasks.push(Box::pin(async {
            self.stop.wait().await;
            Event::Stop
        }));
        // Acks and nacks of finished jobs are batched; this loop flushes them (it outlives every
        // job).
        self.acks.set_driven(true);
        self.nacks.set_driven(true);
        tasks.push(self.wait_task(Flow::Acks));
        tasks.push(self.wait_task(Flow::Nacks));
        let seen = self.acks.pushes();
        tasks.push(Box::pin(async move {
            self.acks.pushed_after(seen).await;
            Event::AckPushed
        }));
        // One heartbeat request for every lease held, round after round.
        tasks.push(Box::pin(async move {
            self.beat_round(board).await;
            Event::Beaten
        }));
        let conc = self.cfg.concurrency.max(1) as usize;
        let (mut in_flight, mut claim_pending, mut waiting, mut want_claim) =
            (0usize, false, false, true);
        let mut claim_failures = 0u32;
        // Whether a task waits for the end of a pause.
        let mut resume_pending = false;
        // Jobs the server resolved at claim, still being written to the local cache: they hold
        // no lease and need no working slot (bounded apart, so claims of cache hits never wait
        // on the engine's slots, nor pile up without limit).
        let mut keeping = 0usize;
        let keep_cap = 4 * conc;
        loop {
            let stopping = self.stop.is_stopped();
            if stopping && in_flight == 0 && keeping == 0 && !claim_pending {
                break;
            }
            // A job waiting on its (batched) ack needs no working slot: the next claim goes out
            // while those acks are on their way, so the engine never waits for a round trip.
            // Leases held (working or acking) stay bounded by twice the concurrency.
            let working =
                in_flight.saturating_sub(self.acks.outstanding() + self.nacks.outstanding());
            let held_cap = 2 * conc;
            // Claim in batches: wait until half the slots are free (or none is busy), so one
            // claim round trip serves several jobs instead of one per finished job.
            let batch_ready = conc - working.min(conc) >= conc.div_ceil(2) || working == 0;
            let paused = self.pause.is_paused();
            if paused && !resume_pending && !stopping {
                // No claims while paused (jobs in hand finish); claim again once resumed.
                resume_pending = true;
                tasks.push(Box::pin(async move {
                    self.pause.resumed().await;
                    Event::Resumed
                }));
            }
            if !stopping
                && !paused
                && want_claim
                && !claim_pending
                && working < conc
                && in_flight < held_cap
                && keeping < keep_cap
                && batch_ready
            {
                let free = (conc - working).min(held_cap - in_flight) as u32;
                claim_pending = true;
                want_claim = false;
                tasks.push(Box::pin(async move {
                    Event::Claimed(
                        self.adapters
                            .source
                            .claim(free, self.cfg.claim_wait_ms)
                            .await,
                    )
                }));
            }
            self.metrics.set_gauge(gauges::IN_FLIGHT, in_flight as f64);
            let Some(ev) = tasks.next().await else { break };
            match ev {
                Event::Claimed(Ok(jobs)) => {
                    claim_pending = false;
                    claim_failures = 0;
                    if jobs.is_empty() && !waiting {
                        waiting = true;
                        tasks.push(Box::pin(async {
                            Event::Woken(wake.next(self.cfg.watchdog_ms).await)
                        }));
                    } else if !jobs.is_empty() {
                        want_claim = true;
                    }
                    for job in jobs {
                        self.metrics.inc(names::JOBS_CLAIMED);
                        sum.claimed += 1;
                        if job.resolved {
                            // Finished by the server at claim (a remote cache hit): no lease to
                            // keep, no ack to send; only the local cache to warm.
                            keeping += 1;
                            sum.done += 1;
                            tasks.push(Box::pin(async move {
                                self.keep_resolved(&job).await;
                                Event::Kept
                            }));
                            continue;
                        }
                        if stopping {
                            // Claimed while stopping: give it straight back.
                            self.hand_back(&job.id, &job.lease.token).await;
                            sum.handed_back += 1;
                            continue;
                        }
                        in_flight += 1;
                        board.hold(&job.id, &job.lease.token, job.lease.expires_at);
                        tasks.push(Box::pin(async move {
                            let outcome = self.run_job_with(&job, Some(board)).await;
                            Event::Finished(job.id, outcome)
                        }));
                    }
                }
                Event::Claimed(Err(_)) => {
                    claim_pending = false;
                    self.metrics.inc(names::CLAIM_FAILURES);
                    let d = CLAIM_BACKOFF
                        .delay_ms(claim_failures, None, &self.rng)
                        .max(50);
                    claim_failures = claim_failures.saturating_add(1);
                    tasks.push(Box::pin(async move {
                        self.adapters.clock.sleep(d).await;
                        Event::ClaimAgain
                    }));
                }
                Event::ClaimAgain => want_claim = true,
                Event::Resumed => {
                    resume_pending = false;
                    want_claim = true;
                }
                Event::Beaten => tasks.push(Box::pin(async move {
                    self.beat_round(board).await;
                    Event::Beaten
                })),
                Event::AckPushed => {
                    // A job moved from working to acking: its slot is free for the next claim.
                    let seen = self.acks.pushes();
                    tasks.push(Box::pin(async move {
                        self.acks.pushed_after(seen).await;
                        Event::AckPushed
                    }));
                }
                Event::Waiting(flow) => {
                    // Let the acks (nacks) of jobs finishing together join (for the linger time,
                    // or until every job in flight whose ack is not already on its way waits on
                    // one), then send them as one.
                    let on_the_way = match flow {
                        Flow::Acks => self.acks.outstanding().saturating_sub(self.acks.len()),
                        Flow::Nacks => self.nacks.outstanding().saturating_sub(self.nacks.len()),
                    };
                    let all = in_flight.saturating_sub(on_the_way);
                    tasks.push(Box::pin(async move {
                        let linger = self.adapters.clock.sleep(self.cfg.ack_linger_ms);
                        let everyone = async {
                            match flow {
                                Flow::Acks => self.acks.at_least(all).await,
                                Flow::Nacks => self.nacks.at_least(all).await,
                            }
                        };
                        futures_util::pin_mut!(linger, everyone);
                        futures_util::future::select(linger, everyone).await;
                        self.flush(flow).await;
                        Event::Flushed(flow)
                    }));
                }
                Event::Flushed(flow) => {
                    let left = match flow {
                        Flow::Acks => self.acks.len(),
                        Flow::Nacks => self.nacks.len(),
                    };
                    if left > 0 {
                        tasks.push(Box::pin(async move {
                            self.flush(flow).await;
                            Event::Flushed(flow)
                        }));
                    } else {
                        tasks.push(self.wait_task(flow));
                    }
                }
                Event::Woken(depth) => {
                    waiting = false;
                    want_claim = true;
                    if let Some(d) = depth {
                        self.metrics.set_gauge(gauges::QUEUE_DEPTH, d as f64);
                    }
                }
                Event::Kept => keeping -= 1,
                Event::Finished(id, outcome) => {
                    in_flight -= 1;
                    board.forget(&id);
                    match outcome {
                        JobOutcome::Done(_) => sum.done += 1,
                        JobOutcome::Retry(_) => sum.retried += 1,
                        JobOutcome::Dead(_) => sum.dead += 1,
                        JobOutcome::LeaseLost => sum.lost += 1,
                    }
                    if !waiting {
                        want_claim = true;
                    }
                }
                Event::Stop => {
                    let deadline = self.stop.deadline_ms().unwrap_or(0);
                    let d = deadline.saturating_sub(self.adapters.clock.now_ms());
                    tasks.push(Box::pin(async move {
                        self.adapters.clock.sleep(d).await;
                        Event::Deadline
                    }));
                }
                Event::Deadline => {
                    let left = board.drain();
                    sum.handed_back += left.len() as u64;
                    self.hand_back_all(&left).await;
                    if claim_pending {
                        // A long-poll claim is still out: dropping it would leave its jobs
                        // leased to nobody until their leases expire. Wait for its answer (at
                        // most the claim's wait) and hand those back too.
                        while let Some(ev) = tasks.next().await {
                            if let Event::Claimed(r) = ev {
                                let mut late = Vec::new();
                                for job in r.unwrap_or_default() {
                                    sum.claimed += 1;
                                    if job.resolved {
                                        // Already done on the server: nothing to hand back.
                                        sum.done += 1;
                                        continue;
                                    }
                                    late.push((job.id, job.lease.token));
                                }
                                sum.handed_back += late.len() as u64;
                                self.hand_back_all(&late).await;
                                break;
                            }
                        }
                    }
                    break;
                }
            }
        }
        self.acks.set_driven(false);
        self.nacks.set_driven(false);
        self.metrics.set_gauge(gauges::IN_FLIGHT, 0.0);
        sum
    }

    /// Resolves (to [`Event::Waiting`]) once an ack (nack) is queued.
    fn wait_task(&self, flow: Flow) -> Task<'_> {
        Box::pin(async move {
            match flow {
                Flow::Acks => self.acks.waiting().await,
                Flow::Nacks => self.nacks.waiting().await,
            }
            Event::Waiting(flow)
        })
    }

    /// Sends up to `ack_batch_max` waiting acks (nacks) in one request and answers each job.
    async fn flush(&self, flow: Flow) {
        let max = self.cfg.ack_batch_max as usize;
        match flow {
            Flow::Acks => {
                let batch = self.acks.take(max);
                let items = batch.items();
                if !items.is_empty() {
                    self.metrics.inc(names::ACK_BATCHES);
                    batch.answer(self.adapters.source.ack_many(&items).await);
                }
            }
            Flow::Nacks => {
                let batch = self.nacks.take(max);
                let items = batch.items();
                if !items.is_empty() {
                    self.metrics.inc(names::NACK_BATCHES);
                    batch.answer(self.adapters.source.nack_many(&items).await);
                }
            }
        }
    }

    /// Waits until a heartbeat is due (a third of the shortest lease left; no timer while no
    /// lease is held), then extends every held lease with one request.
    async fn beat_round(&self, board: &LeaseBoard) {
        let wait = loop {
            match board.next_beat_in(self.adapters.clock.now_ms(), 30_000) {
                Some(ms) => break ms,
                None => board.any_held().await,
            }
        };
        self.adapters.clock.sleep(wait).await;
        let leases = board.snapshot();
        if leases.is_empty() {
            return;
        }
        self.metrics.inc(names::HEARTBEAT_BATCHES);
        match self.adapters.source.heartbeat_many(&leases).await {
            Ok(results) if results.len() == leases.len() => {
                for ((id, token), r) in leases.iter().zip(results) {
                    match r {
                        Ok(lease) => {
                            self.metrics.inc(names::HEARTBEATS);
                            board.extended(id, token, lease.expires_at);
                        }
                        Err(Error::LeaseLost(_)) => board.lose(id),
                        Err(_) => {}
                    }
                }
            }
            // Transient (or a malformed answer): try again next round while leases may still
            // be ours; those whose expiry passed are lost (the server re-delivers them).
            _ => {}
        }
        board.lose_expired(self.adapters.clock.now_ms());
    }

    /// Hands leases back in one request, without using attempts; the jobs are ready again at
    /// once.
    async fn hand_back_all(&self, leases: &[(String, String)]) {
        if leases.is_empty() {
            return;
        }
        let failed = match self.adapters.source.release_many(leases).await {
            Ok(results) => results.iter().filter(|r| r.is_err()).count(),
            // Unreachable: the leases expire and the server re-delivers.
            Err(_) => leases.len(),
        };
        self.metrics.add(names::RELEASE_FAILURES, failed as u64);
    }

    /// Hands a lease back without using an attempt; the job is ready again at once.
    async fn hand_back(&self, id: &str, token: &str) {
        if self.adapters.source.release(id, token, "").await.is_err() {
            // Unreachable or already lost: the lease expires and the server re-delivers.
            self.metrics.inc(names::RELEASE_FAILURES);
        }
    }
}
