//! The queue side of the data path: claiming jobs, keeping their leases, finishing them.
//!
//! - [`claim_loop`]: the claim loop with bounded concurrency, SSE wake-ups and a graceful drain.
//! - [`job`]: one claimed job — retries, ack or nack.
//! - [`batch_queue`]: acks and nacks of jobs that finish together, sent as one request.
//! - `lease_board`: the leases held, kept alive by one batched heartbeat.
//! - [`lease_journal`]: what changed in them since an adapter last looked (the page's mirror).
//! - [`signal`]: the stop signal the loop awaits.
//! - [`pause`]: pausing the loop (no claims) and resuming it, without a stop.
//! - `step_log`: what each running job's steps took, sent with its ack.

pub mod batch_queue;
pub mod claim_loop;
pub mod job;
pub(crate) mod lease_board;
pub mod lease_journal;
pub mod pause;
pub mod signal;
pub(crate) mod step_log;
