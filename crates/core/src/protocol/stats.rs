//! Worker metrics pushes and the server's stats (`GET /v1/stats`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `POST /v1/metrics` body: a worker's metrics snapshot (cumulative counters, current gauges).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WorkerMetrics {
    /// Worker id.
    pub worker: String,
    /// Monotonic counters (`jobs_done`, `cache_hits_local`, …).
    #[serde(default)]
    pub counters: BTreeMap<String, u64>,
    /// Gauges (`in_flight`, `breaker_open`, …).
    #[serde(default)]
    pub gauges: BTreeMap<String, f64>,
}

/// Queue depth by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct QueueDepth {
    /// Claimable now.
    pub ready: u64,
    /// Waiting for a delay or a retry backoff.
    pub delayed: u64,
    /// Leased to workers.
    pub leased: u64,
    /// In the dead-letter queue.
    pub dead: u64,
}

/// `GET /v1/stats` response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Stats {
    /// Queue depth.
    pub queue: QueueDepth,
    /// Server counters since start (`jobs_enqueued`, `jobs_acked`, …).
    pub counters: BTreeMap<String, u64>,
    /// Jobs acked per second over the last minute.
    pub ack_rate: f64,
    /// Latest snapshot per worker.
    pub workers: BTreeMap<String, WorkerMetrics>,
}
