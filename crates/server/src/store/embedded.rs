//! The embedded store: the whole state in memory, every change appended to a journal file that is
//! replayed on start.
//!
//! # Journal
//! `DIR/journal.jsonl`, one JSON record per line: the full new state of a job or cache entry, or
//! a fence ceiling. Replay applies them in order (last write wins); a torn final line (a crash
//! mid-write) is ignored. On open, and whenever the journal holds many more records than live
//! entries, it is compacted: the live state is written to a temporary file, synced and renamed
//! over the journal.
//!
//! # Durability ([`Fsync`])
//! Every operation's records are written and flushed to the OS before the operation returns, so a
//! killed process loses nothing. [`Fsync::Always`] also `fdatasync`s each operation, so a power
//! failure loses nothing either, at the cost of a disk sync per call (the default is
//! [`Fsync::Never`]: flush only, like Redis's `appendfsync no`).
//!
//! Locks are not journaled (a restart frees them: their holders' fences stay valid because fences
//! are allocated in journaled blocks of 1 000 and so never repeat). Event ids start at the
//! start-up time in ms × 1000, so they keep growing across restarts.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use ternflow_core::protocol::{
    Attempt, CacheEntry, ClaimedJob, DlqEntry, Enqueued, JobError, JobResult, JobSpec, JobState,
    JobStatus, Lease, LockGrant, NackResponse, QueueDepth, ServerEvent,
};
use tokio::sync::broadcast;

use super::{
    new_token, AckOutcome, Claimed, JobRecord, LockOutcome, NumberedEvent, PutOutcome, Store,
};
use crate::error::{Error, Result};

/// When journal writes reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fsync {
    /// Flush to the OS after every operation (survives a process crash).
    #[default]
    Never,
    /// Also `fdatasync` after every operation (survives power loss).
    Always,
}

const FENCE_BLOCK: u64 = 1_000;
const COMPACT_MIN_RECORDS: u64 = 100_000;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Job {
    id: String,
    text: String,
    model_id: String,
    priority: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    meta: Option<serde_json::Value>,
    trace_id: String,
    seq: u64,
    attempt: u32,
    history: Vec<Attempt>,
    state: St,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "s", rename_all = "lowercase")]
enum St {
    Ready,
    Delayed {
        at: u64,
    },
    Leased {
        token: String,
        fence: u64,
        expires_at: u64,
        worker: String,
        leased_at: u64,
    },
    Done {
        result: JobResult,
        token: String,
        #[serde(default)]
        done_at: u64,
    },
    Dead {
        error: JobError,
        dead_at: u64,
    },
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "lowercase")]
enum Rec {
    Job {
        job: Job,
    },
    Cache {
        key: String,
        entry: Option<CacheEntry>,
    },
    Fence {
        ceiling: u64,
    },
    Forget {
        id: String,
    },
}

#[derive(Debug)]
struct Journal {
    path: PathBuf,
    file: BufWriter<File>,
    fsync: Fsync,
    records: u64,
    dirty: bool,
}

impl Journal {
    fn append(&mut self, rec: &Rec) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.file, rec)?;
        self.file.write_all(b"\n")?;
        self.records += 1;
        self.dirty = true;
        Ok(())
    }

    fn commit(&mut self) -> std::io::Result<()> {
        if self.dirty {
            self.file.flush()?;
            if self.fsync == Fsync::Always {
                self.file.get_ref().sync_data()?;
            }
            self.dirty = false;
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Inner {
    jobs: HashMap<String, Job>,
    ready: BTreeSet<(i64, u64, String)>,
    delayed: BTreeSet<(u64, u64, String)>,
    leased: BTreeSet<(u64, String)>,
    dead: BTreeSet<(u64, u64, String)>,
    done: BTreeSet<(u64, String)>,
    done_retention_ms: Option<u64>,
    cache: HashMap<String, CacheEntry>,
    locks: HashMap<String, LockGrant>,
    seq: u64,
    fence: u64,
    fence_ceiling: u64,
    journal: Option<Journal>,
    pending: Vec<Rec>,
}

impl Inner {
    fn unindex(&mut self, j: &Job) {
        match &j.state {
            St::Ready => {
                self.ready
                    .remove(&(-(j.priority as i64), j.seq, j.id.clone()));
            }
            St::Delayed { at } => {
                self.delayed.remove(&(*at, j.seq, j.id.clone()));
            }
            St::Leased { expires_at, .. } => {
                self.leased.remove(&(*expires_at, j.id.clone()));
            }
            St::Dead { dead_at, .. } => {
                self.dead.remove(&(*dead_at, j.seq, j.id.clone()));
            }
            St::Done { done_at, .. } => {
                self.done.remove(&(*done_at, j.id.clone()));
            }
        }
    }

    fn index(&mut self, j: &Job) {
        match &j.state {
            St::Ready => {
                self.ready
                    .insert((-(j.priority as i64), j.seq, j.id.clone()));
            }
            St::Delayed { at } => {
                self.delayed.insert((*at, j.seq, j.id.clone()));
            }
            St::Leased { expires_at, .. } => {
                self.leased.insert((*expires_at, j.id.clone()));
            }
            St::Dead { dead_at, .. } => {
                self.dead.insert((*dead_at, j.seq, j.id.clone()));
            }
            St::Done { done_at, .. } => {
                self.done.insert((*done_at, j.id.clone()));
            }
        }
    }

    /// Forgets finished jobs older than the retention (their ids may be enqueued again).
    fn sweep_done(&mut self, now: u64) {
        let Some(keep) = self.done_retention_ms else {
            return;
        };
        while let Some((at, id)) = self.done.first().cloned() {
            if at.saturating_add(keep) > now {
                break;
            }
            self.done.pop_first();
            self.jobs.remove(&id);
            if self.journal.is_some() {
                self.pending.push(Rec::Forget { id });
            }
        }
    }

    /// Stores `j` (re-indexing it) and journals it.
    fn put_job(&mut self, j: Job) {
        if let Some(old) = self.jobs.remove(&j.id) {
            self.unindex(&old);
        }
        self.index(&j);
        if self.journal.is_some() {
            self.pending.push(Rec::Job { job: j.clone() });
        }
        self.jobs.insert(j.id.clone(), j);
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn next_fence(&mut self) -> u64 {
        self.fence += 1;
        if self.fence > self.fence_ceiling {
            self.fence_ceiling = self.fence + FENCE_BLOCK;
            if self.journal.is_some() {
                self.pending.push(Rec::Fence {
                    ceiling: self.fence_ceiling,
                });
            }
        }
        self.fence
    }

    /// Writes pending records; called once per operation.
    fn commit(&mut self) -> Result<()> {
        let Some(journal) = self.journal.as_mut() else {
            self.pending.clear();
            return Ok(());
        };
        let pending = std::mem::take(&mut self.pending);
        for rec in &pending {
            journal
                .append(rec)
                .map_err(|e| Error::Store(format!("journal write: {e}")))?;
        }
        journal
            .commit()
            .map_err(|e| Error::Store(format!("journal flush: {e}")))?;
        let live = (self.jobs.len() + self.cache.len()) as u64;
        if journal.records > COMPACT_MIN_RECORDS && journal.records > 4 * live {
            self.compact()
                .map_err(|e| Error::Store(format!("journal compaction: {e}")))?;
        }
        Ok(())
    }

    fn compact(&mut self) -> std::io::Result<()> {
        let Some(journal) = self.journal.as_mut() else {
            return Ok(());
        };
        let tmp = journal.path.with_extension("jsonl.tmp");
        let mut w = BufWriter::new(File::create(&tmp)?);
        let mut records = 0;
        let mut write = |rec: &Rec| -> std::io::Result<()> {
            serde_json::to_writer(&mut w, rec)?;
            w.write_all(b"\n")?;
            records += 1;
            Ok(())
        };
        write(&Rec::Fence {
            ceiling: self.fence_ceiling.max(self.fence),
        })?;
        for job in self.jobs.values() {
            write(&Rec::Job { job: job.clone() })?;
        }
        for (key, entry) in &self.cache {
            write(&Rec::Cache {
                key: key.clone(),
                entry: Some(entry.clone()),
            })?;
        }
        w.flush()?;
        w.get_ref().sync_all()?;
        drop(w);
        fs::rename(&tmp, &journal.path)?;
        let file = OpenOptions::new().append(true).open(&journal.path)?;
        journal.file = BufWriter::new(file);
        journal.records = records;
        journal.dirty = false;
        Ok(())
    }

    fn expire_lease(&mut self, mut j: Job, max_attempts: u32, now: u64, out: &mut Claimed) {
        if let St::Leased {
            worker, leased_at, ..
        } = &j.state
        {
            let error = JobError {
                code: "lease_expired".to_owned(),
                message: "the lease expired before an ack or nack".to_owned(),
                retryable: true,
            };
            j.history.push(Attempt {
                attempt: j.attempt,
                worker: worker.clone(),
                leased_at: *leased_at,
                ended_at: now,
                error: error.clone(),
            });
            if j.attempt >= max_attempts {
                out.dead.push(j.id.clone());
                j.state = St::Dead {
                    error,
                    dead_at: now,
                };
            } else {
                out.expired.push(j.id.clone());
                j.seq = self.next_seq();
                j.state = St::Ready;
            }
            self.put_job(j);
        }
    }
}

/// The embedded store. See the [module docs](self).
#[derive(Debug)]
pub struct EmbeddedStore {
    inner: Mutex<Inner>,
    events: broadcast::Sender<NumberedEvent>,
    /// Last event id; held while sending so events leave in id order.
    event_seq: Mutex<u64>,
}

impl EmbeddedStore {
    /// A store that keeps nothing on disk (tests, benchmarks).
    pub fn in_memory() -> Self {
        Self::with_inner(Inner::default())
    }

    /// Opens (or creates) the store in `dir`, replaying its journal.
    ///
    /// # Errors
    /// [`Error::Store`] when the directory or journal cannot be read or written, or a record
    /// other than the last is corrupt.
    pub fn open(dir: &Path, fsync: Fsync) -> Result<Self> {
        let io = |what: &str, e: std::io::Error| Error::Store(format!("{what}: {e}"));
        fs::create_dir_all(dir).map_err(|e| io("create data dir", e))?;
        let path = dir.join("journal.jsonl");
        let mut inner = Inner::default();
        if path.exists() {
            let f = File::open(&path).map_err(|e| io("open journal", e))?;
            let lines: Vec<String> = BufReader::new(f)
                .lines()
                .collect::<std::io::Result<_>>()
                .map_err(|e| io("read journal", e))?;
            let n = lines.len();
            for (i, line) in lines.iter().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let rec: Rec = match serde_json::from_str(line) {
                    Ok(r) => r,
                    Err(_) if i + 1 == n => break, // torn final write
                    Err(e) => {
                        return Err(Error::Store(format!(
                            "journal line {} is corrupt: {e}",
                            i + 1
                        )))
                    }
                };
                match rec {
                    Rec::Job { job } => {
                        inner.seq = inner.seq.max(job.seq);
                        if let St::Leased { fence, .. } = &job.state {
                            inner.fence = inner.fence.max(*fence);
                        }
                        if let Some(old) = inner.jobs.remove(&job.id) {
                            inner.unindex(&old);
                        }
                        inner.index(&job);
                        inner.jobs.insert(job.id.clone(), job);
                    }
                    Rec::Cache { key, entry } => match entry {
                        Some(e) => {
                            inner.fence = inner.fence.max(e.fence);
                            inner.cache.insert(key, e);
                        }
                        None => {
                            inner.cache.remove(&key);
                        }
                    },
                    Rec::Fence { ceiling } => inner.fence = inner.fence.max(ceiling),
                    Rec::Forget { id } => {
                        if let Some(old) = inner.jobs.remove(&id) {
                            inner.unindex(&old);
                        }
                    }
                }
            }
        }
        // Fences handed out before the restart may reach the last journaled ceiling.
        inner.fence_ceiling = inner.fence;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| io("open journal", e))?;
        inner.journal = Some(Journal {
            path,
            file: BufWriter::new(file),
            fsync,
            records: 0,
            dirty: false,
        });
        inner.compact().map_err(|e| io("compact journal", e))?;
        Ok(Self::with_inner(inner))
    }

    /// Forgets finished jobs `ms` after their ack (checked at each claim), so the store does not
    /// grow without bound; a forgotten id may be enqueued again. Default: keep them forever
    /// (duplicates of a done job collapse forever).
    pub fn with_done_retention(self, ms: u64) -> Self {
        self.lock().done_retention_ms = Some(ms);
        self
    }

    fn with_inner(inner: Inner) -> Self {
        let (events, _) = broadcast::channel(4_096);
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        EmbeddedStore {
            inner: Mutex::new(inner),
            events,
            event_seq: Mutex::new(start * 1_000),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-applied change visible to callers
        // that matters more than refusing all service, so recover the guard.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn status_of(j: &Job) -> JobStatus {
    let state = match &j.state {
        St::Ready => JobState::Queued { available_at: 0 },
        St::Delayed { at } => JobState::Queued { available_at: *at },
        St::Leased {
            expires_at, worker, ..
        } => JobState::Leased {
            expires_at: *expires_at,
            worker: worker.clone(),
        },
        St::Done { result, .. } => JobState::Done {
            result: result.clone(),
        },
        St::Dead { error, .. } => JobState::Dead {
            error: error.clone(),
            history: j.history.clone(),
        },
    };
    JobStatus {
        id: j.id.clone(),
        attempt: j.attempt,
        state,
    }
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn enqueue(&self, jobs: Vec<JobRecord>, now: u64) -> Result<Vec<Enqueued>> {
        let mut g = self.lock();
        let mut out = Vec::with_capacity(jobs.len());
        for r in jobs {
            if g.jobs.contains_key(&r.id) {
                out.push(Enqueued {
                    id: r.id,
                    new: false,
                });
                continue;
            }
            let seq = g.next_seq();
            let state = if r.available_at > now {
                St::Delayed { at: r.available_at }
            } else {
                St::Ready
            };
            out.push(Enqueued {
                id: r.id.clone(),
                new: true,
            });
            g.put_job(Job {
                id: r.id,
                text: r.text,
                model_id: r.model_id,
                priority: r.priority,
                meta: r.meta,
                trace_id: r.trace_id,
                seq,
                attempt: 0,
                history: Vec::new(),
                state,
            });
        }
        g.commit()?;
        Ok(out)
    }

    async fn claim(
        &self,
        worker: &str,
        max: u32,
        lease_ms: u64,
        max_attempts: u32,
        now: u64,
    ) -> Result<Claimed> {
        let mut g = self.lock();
        let mut out = Claimed::default();
        g.sweep_done(now);
        // Due delayed jobs become ready.
        while let Some((at, _, id)) = g.delayed.first().cloned() {
            if at > now {
                break;
            }
            if let Some(mut j) = g.jobs.get(&id).cloned() {
                j.seq = g.next_seq();
                j.state = St::Ready;
                g.put_job(j);
            } else {
                g.delayed.pop_first();
            }
        }
        // Expired leases are re-queued or dead-lettered.
        while let Some((exp, id)) = g.leased.first().cloned() {
            if exp > now {
                break;
            }
            match g.jobs.get(&id).cloned() {
                Some(j) => g.expire_lease(j, max_attempts, now, &mut out),
                None => {
                    g.leased.pop_first();
                }
            }
        }
        while out.jobs.len() < max as usize {
            let Some((_, _, id)) = g.ready.first().cloned() else {
                break;
            };
            let Some(mut j) = g.jobs.get(&id).cloned() else {
                g.ready.pop_first();
                continue;
            };
            let fence = g.next_fence();
            let token = new_token();
            let expires_at = now + lease_ms;
            j.attempt += 1;
            j.state = St::Leased {
                token: token.clone(),
                fence,
                expires_at,
                worker: worker.to_owned(),
                leased_at: now,
            };
            out.jobs.push(ClaimedJob {
                id: j.id.clone(),
                text: j.text.clone(),
                model_id: j.model_id.clone(),
                attempt: j.attempt,
                traceparent: j.trace_id.clone(),
                lease: Lease {
                    token,
                    fence,
                    expires_at,
                },
                meta: j.meta.clone(),
                cache_checked: false,
                cached: None,
            });
            g.put_job(j);
        }
        g.commit()?;
        Ok(out)
    }

    async fn heartbeat(
        &self,
        id: &str,
        token: &str,
        lease_ms: u64,
        now: u64,
    ) -> Result<Option<Lease>> {
        let mut g = self.lock();
        let Some(mut j) = g.jobs.get(id).cloned() else {
            return Ok(None);
        };
        let lease = match &mut j.state {
            St::Leased {
                token: t,
                fence,
                expires_at,
                ..
            } if t == token => {
                *expires_at = now + lease_ms;
                Lease {
                    token: t.clone(),
                    fence: *fence,
                    expires_at: *expires_at,
                }
            }
            _ => return Ok(None),
        };
        g.put_job(j);
        g.commit()?;
        Ok(Some(lease))
    }

    async fn ack(&self, id: &str, token: &str, result: JobResult, now: u64) -> Result<AckOutcome> {
        let mut g = self.lock();
        let Some(mut j) = g.jobs.get(id).cloned() else {
            return Ok(AckOutcome::Missing);
        };
        match &j.state {
            St::Leased { token: t, .. } if t == token => {}
            St::Done { token: t, .. } if t == token => return Ok(AckOutcome::Repeated),
            _ => return Ok(AckOutcome::Stale),
        }
        j.state = St::Done {
            result,
            token: token.to_owned(),
            done_at: now,
        };
        g.put_job(j);
        g.commit()?;
        Ok(AckOutcome::Done)
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
        let mut g = self.lock();
        let Some(mut j) = g.jobs.get(id).cloned() else {
            return Ok(None);
        };
        let (worker, leased_at) = match &j.state {
            St::Leased {
                token: t,
                worker,
                leased_at,
                ..
            } if t == token => (worker.clone(), *leased_at),
            _ => return Ok(None),
        };
        j.history.push(Attempt {
            attempt: j.attempt,
            worker,
            leased_at,
            ended_at: now,
            error: error.clone(),
        });
        let resp = if !error.retryable || j.attempt >= max_attempts {
            j.state = St::Dead {
                error,
                dead_at: now,
            };
            NackResponse::Dead
        } else {
            j.state = St::Delayed { at: retry_at };
            NackResponse::Retry {
                available_at: retry_at,
            }
        };
        g.put_job(j);
        g.commit()?;
        Ok(Some(resp))
    }

    async fn release(&self, id: &str, token: &str, _now: u64) -> Result<bool> {
        let mut g = self.lock();
        let Some(mut j) = g.jobs.get(id).cloned() else {
            return Ok(false);
        };
        match &j.state {
            St::Leased { token: t, .. } if t == token => {}
            _ => return Ok(false),
        }
        j.attempt = j.attempt.saturating_sub(1);
        j.seq = g.next_seq();
        j.state = St::Ready;
        g.put_job(j);
        g.commit()?;
        Ok(true)
    }

    async fn status(&self, id: &str) -> Result<Option<JobStatus>> {
        Ok(self.lock().jobs.get(id).map(status_of))
    }

    async fn dlq(&self, limit: usize) -> Result<Vec<DlqEntry>> {
        let g = self.lock();
        Ok(g.dead
            .iter()
            .take(limit)
            .filter_map(|(_, _, id)| g.jobs.get(id))
            .filter_map(|j| match &j.state {
                St::Dead { error, dead_at } => Some(DlqEntry {
                    job: JobSpec {
                        id: j.id.clone(),
                        text: j.text.clone(),
                        model_id: j.model_id.clone(),
                        priority: j.priority,
                        meta: j.meta.clone(),
                    },
                    error: error.clone(),
                    history: j.history.clone(),
                    dead_at: *dead_at,
                }),
                _ => None,
            })
            .collect())
    }

    async fn redrive(&self, id: &str, _now: u64) -> Result<bool> {
        let mut g = self.lock();
        let Some(mut j) = g.jobs.get(id).cloned() else {
            return Ok(false);
        };
        if !matches!(j.state, St::Dead { .. }) {
            return Ok(false);
        }
        j.attempt = 0;
        j.seq = g.next_seq();
        j.state = St::Ready;
        g.put_job(j);
        g.commit()?;
        Ok(true)
    }

    async fn depth(&self, now: u64) -> Result<QueueDepth> {
        let g = self.lock();
        let due = g.delayed.iter().take_while(|(at, _, _)| *at <= now).count() as u64;
        Ok(QueueDepth {
            ready: g.ready.len() as u64 + due,
            delayed: g.delayed.len() as u64 - due,
            leased: g.leased.len() as u64,
            dead: g.dead.len() as u64,
        })
    }

    async fn cache_get(&self, key: &str, now: u64) -> Result<Option<CacheEntry>> {
        let g = self.lock();
        Ok(g.cache.get(key).filter(|e| e.expires_at > now).cloned())
    }

    async fn cache_put(&self, key: &str, entry: CacheEntry, now: u64) -> Result<PutOutcome> {
        let mut g = self.lock();
        let live = g.cache.get(key).filter(|e| e.expires_at > now).cloned();
        if let Some(cur) = &live {
            if cur.fence > entry.fence {
                return Ok(PutOutcome::Stale(cur.clone()));
            }
        }
        if g.journal.is_some() {
            g.pending.push(Rec::Cache {
                key: key.to_owned(),
                entry: Some(entry.clone()),
            });
        }
        g.cache.insert(key.to_owned(), entry);
        g.commit()?;
        Ok(PutOutcome::Stored {
            replaced: live.is_some(),
        })
    }

    async fn cache_delete(&self, key: &str) -> Result<bool> {
        let mut g = self.lock();
        let existed = g.cache.remove(key).is_some();
        if existed && g.journal.is_some() {
            g.pending.push(Rec::Cache {
                key: key.to_owned(),
                entry: None,
            });
        }
        g.commit()?;
        Ok(existed)
    }

    async fn lock_acquire(&self, key: &str, ttl_ms: u64, now: u64) -> Result<LockOutcome> {
        let mut g = self.lock();
        if let Some(cur) = g.locks.get(key) {
            if cur.expires_at > now {
                return Ok(LockOutcome::Held {
                    expires_at: cur.expires_at,
                });
            }
        }
        let grant = LockGrant {
            token: new_token(),
            fence: g.next_fence(),
            expires_at: now + ttl_ms,
        };
        g.locks.insert(key.to_owned(), grant.clone());
        g.commit()?;
        Ok(LockOutcome::Granted(grant))
    }

    async fn lock_renew(
        &self,
        key: &str,
        token: &str,
        ttl_ms: u64,
        now: u64,
    ) -> Result<Option<LockGrant>> {
        let mut g = self.lock();
        match g.locks.get_mut(key) {
            Some(cur) if cur.token == token && cur.expires_at > now => {
                cur.expires_at = now + ttl_ms;
                Ok(Some(cur.clone()))
            }
            _ => Ok(None),
        }
    }

    async fn lock_release(&self, key: &str, token: &str) -> Result<bool> {
        let mut g = self.lock();
        if g.locks.get(key).is_some_and(|l| l.token == token) {
            g.locks.remove(key);
            return Ok(true);
        }
        Ok(false)
    }

    async fn publish(&self, event: ServerEvent) -> Result<u64> {
        let mut seq = self.event_seq.lock().unwrap_or_else(|p| p.into_inner());
        *seq += 1;
        // No subscribers is fine.
        let _ = self.events.send((*seq, event));
        Ok(*seq)
    }

    fn subscribe(&self) -> broadcast::Receiver<NumberedEvent> {
        self.events.subscribe()
    }
}
