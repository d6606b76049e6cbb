//! [`Timed`]: a [`Store`] that times every operation of the store it wraps, by operation
//! (`ternflow_store_op_duration_seconds{op}`) and counts the ones that fail
//! (`ternflow_store_op_errors_total{op}`): the "database spike" an operator is paged for. The
//! server wraps each tenant's store in one when it opens it (`crate::tenants`), so every store
//! (SQLite, memory, Redis, Redis Cluster) is measured the same way and none of them knows.
//!
//! An operation's label is its method's name: a closed set.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use ternflow_core::protocol::{
    CacheEntry, DlqEntry, Enqueued, JobError, JobResult, JobStatus, Lease, LockGrant, NackResponse,
    QueueDepth, ServerEvent,
};
use tokio::sync::broadcast;

use super::{
    AckInput, AckOutcome, Budget, CacheStore, Claimed, DonePage, EventBus, Fenced, IntegrityStore,
    JobRecord, LockOutcome, LockStore, NumberedEvent, PutOutcome, Quarantine, QueueStore, Released,
    ResultScan, Spend, Standing, Store, UsageStore, Written,
};
use crate::error::Result;
use crate::metrics::Metrics;

/// See the [module docs](self).
#[derive(Debug)]
pub struct Timed {
    inner: Arc<dyn Store>,
    metrics: Arc<Metrics>,
}

impl Timed {
    /// `inner`, timed into `metrics`.
    pub fn wrap(inner: Arc<dyn Store>, metrics: Arc<Metrics>) -> Arc<dyn Store> {
        Arc::new(Timed { inner, metrics })
    }

    async fn time<T>(
        &self,
        op: &'static str,
        call: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let start = Instant::now();
        let r = call.await;
        self.metrics
            .families
            .store_op(op, start.elapsed().as_secs_f64(), r.is_ok());
        r
    }
}

#[async_trait]
impl QueueStore for Timed {
    async fn enqueue(&self, jobs: Vec<JobRecord>, now: u64) -> Result<Vec<Enqueued>> {
        self.time("enqueue", self.inner.enqueue(jobs, now)).await
    }

    async fn claim(
        &self,
        worker: &str,
        sub: Option<&str>,
        max: u32,
        lease_ms: u64,
        max_attempts: u32,
        now: u64,
    ) -> Result<Claimed> {
        let call = self
            .inner
            .claim(worker, sub, max, lease_ms, max_attempts, now);
        self.time("claim", call).await
    }

    async fn heartbeat(
        &self,
        id: &str,
        token: &str,
        lease_ms: u64,
        hold_ms: u64,
        now: u64,
    ) -> Result<Option<Lease>> {
        let call = self.inner.heartbeat(id, token, lease_ms, hold_ms, now);
        self.time("heartbeat", call).await
    }

    async fn heartbeat_many(
        &self,
        leases: Vec<(String, String)>,
        lease_ms: u64,
        hold_ms: u64,
        now: u64,
    ) -> Result<Vec<Option<Lease>>> {
        let call = self.inner.heartbeat_many(leases, lease_ms, hold_ms, now);
        self.time("heartbeat_many", call).await
    }

    async fn ack(&self, id: &str, token: &str, result: JobResult, now: u64) -> Result<AckOutcome> {
        self.time("ack", self.inner.ack(id, token, result, now))
            .await
    }

    async fn ack_many(&self, acks: Vec<AckInput>, now: u64) -> Result<Vec<AckOutcome>> {
        self.time("ack_many", self.inner.ack_many(acks, now)).await
    }

    async fn nack(
        &self,
        id: &str,
        token: &str,
        error: JobError,
        retry_at: u64,
        max_attempts: u32,
        now: u64,
    ) -> Result<Option<NackResponse>> {
        let call = self
            .inner
            .nack(id, token, error, retry_at, max_attempts, now);
        self.time("nack", call).await
    }

    async fn release(
        &self,
        id: &str,
        token: &str,
        free: u32,
        max_attempts: u32,
        now: u64,
    ) -> Result<Released> {
        let call = self.inner.release(id, token, free, max_attempts, now);
        self.time("release", call).await
    }

    async fn status(&self, id: &str) -> Result<Option<JobStatus>> {
        self.time("status", self.inner.status(id)).await
    }

    async fn dlq(&self, limit: usize) -> Result<Vec<DlqEntry>> {
        self.time("dlq", self.inner.dlq(limit)).await
    }

    async fn redrive(&self, id: &str, now: u64) -> Result<bool> {
        self.time("redrive", self.inner.redrive(id, now)).await
    }

    async fn depth(&self, now: u64) -> Result<QueueDepth> {
        self.time("depth", self.inner.depth(now)).await
    }

    async fn probe_write(&self, now: u64) -> Result<()> {
        self.time("probe_write", self.inner.probe_write(now)).await
    }
}

#[async_trait]
impl CacheStore for Timed {
    async fn cache_get(&self, key: &str, now: u64) -> Result<Option<CacheEntry>> {
        self.time("cache_get", self.inner.cache_get(key, now)).await
    }

    async fn cache_get_many(&self, keys: &[String], now: u64) -> Result<Vec<Option<CacheEntry>>> {
        self.time("cache_get_many", self.inner.cache_get_many(keys, now))
            .await
    }

    async fn cache_put(
        &self,
        key: &str,
        entry: CacheEntry,
        by: Fenced,
        now: u64,
    ) -> Result<PutOutcome> {
        self.time("cache_put", self.inner.cache_put(key, entry, by, now))
            .await
    }

    async fn cache_delete(&self, key: &str) -> Result<bool> {
        self.time("cache_delete", self.inner.cache_delete(key))
            .await
    }

    async fn cache_bytes(&self, now: u64) -> Result<u64> {
        self.time("cache_bytes", self.inner.cache_bytes(now)).await
    }

    async fn sweep(&self, now: u64, limit: usize) -> Result<u64> {
        self.time("sweep", self.inner.sweep(now, limit)).await
    }
}

#[async_trait]
impl LockStore for Timed {
    async fn lock_acquire(&self, key: &str, ttl_ms: u64, now: u64) -> Result<LockOutcome> {
        self.time("lock_acquire", self.inner.lock_acquire(key, ttl_ms, now))
            .await
    }

    async fn lock_renew(
        &self,
        key: &str,
        token: &str,
        ttl_ms: u64,
        now: u64,
    ) -> Result<Option<LockGrant>> {
        let call = self.inner.lock_renew(key, token, ttl_ms, now);
        self.time("lock_renew", call).await
    }

    async fn lock_release(&self, key: &str, token: &str) -> Result<bool> {
        self.time("lock_release", self.inner.lock_release(key, token))
            .await
    }
}

#[async_trait]
impl EventBus for Timed {
    async fn publish(&self, event: ServerEvent) -> Result<u64> {
        self.time("publish", self.inner.publish(event)).await
    }

    fn subscribe(&self) -> broadcast::Receiver<NumberedEvent> {
        self.inner.subscribe()
    }

    fn last_event_id(&self) -> u64 {
        self.inner.last_event_id()
    }
}

#[async_trait]
impl ResultScan for Timed {
    async fn scan_done(&self, cursor: &str, limit: usize) -> Result<DonePage> {
        self.time("scan_done", self.inner.scan_done(cursor, limit))
            .await
    }
}

#[async_trait]
impl IntegrityStore for Timed {
    async fn standing(&self, sub: &str) -> Result<Standing> {
        self.time("standing", self.inner.standing(sub)).await
    }

    async fn add_verified(&self, sub: &str, n: u64) -> Result<u64> {
        self.time("add_verified", self.inner.add_verified(sub, n))
            .await
    }

    async fn quarantine(&self, sub: &str, q: Quarantine) -> Result<bool> {
        self.time("quarantine", self.inner.quarantine(sub, q)).await
    }

    async fn lift_quarantine(&self, sub: &str) -> Result<bool> {
        self.time("lift_quarantine", self.inner.lift_quarantine(sub))
            .await
    }

    async fn quarantined(&self, limit: usize) -> Result<Vec<(String, Quarantine)>> {
        self.time("quarantined", self.inner.quarantined(limit))
            .await
    }

    async fn note_written(&self, sub: &str, items: Vec<Written>) -> Result<()> {
        self.time("note_written", self.inner.note_written(sub, items))
            .await
    }

    async fn written_by(&self, sub: &str) -> Result<Vec<Written>> {
        self.time("written_by", self.inner.written_by(sub)).await
    }

    async fn job_inputs(&self, ids: &[String]) -> Result<Vec<Option<(String, String)>>> {
        self.time("job_inputs", self.inner.job_inputs(ids)).await
    }

    async fn requeue_done(&self, ids: &[String], now: u64) -> Result<Vec<String>> {
        self.time("requeue_done", self.inner.requeue_done(ids, now))
            .await
    }

    async fn propose(&self, id: &str, sub: &str, digest: &str) -> Result<Vec<(String, String)>> {
        self.time("propose", self.inner.propose(id, sub, digest))
            .await
    }

    async fn clear_proposals(&self, id: &str) -> Result<()> {
        self.time("clear_proposals", self.inner.clear_proposals(id))
            .await
    }
}

#[async_trait]
impl super::BudgetStore for Timed {
    async fn spend(&self, budgets: &[Budget], cost: u32) -> Result<Option<Spend>> {
        self.time("spend", self.inner.spend(budgets, cost)).await
    }
}

#[async_trait]
impl UsageStore for Timed {
    async fn add_usage(&self, deltas: &[(String, u64)]) -> Result<()> {
        self.time("add_usage", self.inner.add_usage(deltas)).await
    }

    async fn usage(&self) -> Result<std::collections::BTreeMap<String, u64>> {
        self.time("usage", self.inner.usage()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    #[tokio::test]
    async fn every_operation_is_timed_under_its_own_name() {
        let metrics = Arc::new(Metrics::default());
        let store = Timed::wrap(Arc::new(MemoryStore::default()), metrics.clone());
        store.depth(0).await.unwrap();
        store.depth(0).await.unwrap();
        store.cache_get("k", 0).await.unwrap();
        let text = metrics.render(Some(QueueDepth::default()), 0, 0);
        assert!(
            text.contains("ternflow_store_op_duration_seconds_count{op=\"depth\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("ternflow_store_op_duration_seconds_count{op=\"cache_get\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("ternflow_store_op_errors_total{op=\"depth\"} 0\n"),
            "{text}"
        );
    }
}
