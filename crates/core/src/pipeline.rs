//! The per-text path: local cache → remote cache → single-flight lock → engine or backend →
//! write-through (remote with the fence, then local) → release.
//!
//! Only the embedding step can fail a text: the caches and the lock service degrade (counted in
//! the metrics) so an unreachable server or a broken IndexedDB slows the worker down without
//! losing work. The job layer ([`crate::queue::job`]) wraps this with leases, heartbeats and retries.

use std::cell::RefCell;

use futures_util::future::join;

use crate::breaker::{Breaker, BreakerState};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::keys::cache_key;
use crate::metrics::{gauges, histograms, names, Metrics};
use crate::ports::{Clock, Embedder, JobSource, LocalCache, Locks, PutOutcome, RemoteCache};
use crate::protocol::{CacheEntry, CachePut, LockGrant, ResultSource, Step, TextInfo, Vector};
use crate::queue::batch_queue::{AckQueue, NackQueue};
use crate::queue::lease_board::LeaseBoard;
use crate::queue::lease_journal::LeaseChanges;
use crate::queue::pause::PauseSignal;
use crate::queue::signal::StopSignal;
use crate::queue::step_log::StepLog;
use crate::ratelimit::RateLimiter;
use crate::retry::jittered_ttl_ms;
use crate::rng::Rng;
use crate::trace::TraceParent;

/// The adapter types a pipeline runs on (one marker type per platform).
pub trait Ports {
    /// The queue.
    type Source: JobSource;
    /// First cache level.
    type Local: LocalCache;
    /// Second cache level.
    type Remote: RemoteCache;
    /// Lock service.
    type Locks: Locks;
    /// The in-worker engine.
    type Engine: Embedder;
    /// The backend fallback.
    type Backend: Embedder;
    /// Time.
    type Clock: Clock;
}

/// A text's vector and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The embedding.
    pub vector: Vec<f32>,
    /// The model that produced it.
    pub model_id: String,
    /// Which step produced it.
    pub source: ResultSource,
}

/// What a caller asks of a batch besides its vectors ([`Pipeline::resolve_many_with`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolveOptions {
    /// Word pieces to embed of each text at most (`None`: whole texts).
    pub max_tokens: Option<u32>,
    /// Say what each vector covers ([`Resolution::info`]).
    pub info: bool,
    /// The caller's trace (a page's `embed(texts, { traceparent })`): every request a text
    /// causes (remote cache, lock, backend) is in it, as a child of its span. `None`: each text
    /// starts a trace of its own.
    pub trace: Option<TraceParent>,
}

/// A batch resolved.
#[derive(Debug)]
pub struct Resolution {
    /// One result per text, in order.
    pub results: Vec<Result<Resolved>>,
    /// What each vector covers of its text, in order: when asked and the engine runs the
    /// batch's model (counted from the texts, for cached vectors too), else `None`.
    pub info: Option<Vec<TextInfo>>,
}

/// What the caller already knows of the remote cache for a text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RemoteHint {
    /// Nothing: ask the remote cache.
    Unknown,
    /// The server looked when the job was claimed and had nothing.
    Absent,
    /// The server's entry at claim time.
    Present(CacheEntry),
}

/// What makes a worker the only one embedding a text (single flight).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SingleFlight {
    /// A lock from the lock service; its fence orders the remote cache write, sent here.
    Lock,
    /// The job's lease: a queue job whose id is the default hash of model and text is leased to
    /// one worker at a time, so no lock is taken. Its fence (leases and locks draw fences from
    /// one counter) orders the remote write, which travels inside the ack (the vector crosses
    /// the network once).
    Lease {
        /// The lease's fence.
        fence: u64,
    },
}

/// The lock currently held for a text, so the heartbeat can renew it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HeldLock {
    pub(crate) key: String,
    pub(crate) grant: LockGrant,
}

/// The worker pipeline: the adapters plus the state shared by every job (breakers, limiter,
/// metrics, stop signal).
#[derive(Debug)]
pub struct Pipeline<P: Ports> {
    /// The adapters it runs on.
    pub adapters: Adapters<P>,
    /// Settings.
    pub cfg: Config,
    /// Metrics registry.
    pub metrics: Metrics,
    /// Raised to stop the queue loop.
    pub stop: StopSignal,
    /// Set to pause the queue loop's claims.
    pub pause: PauseSignal,
    /// The share of wall time the engine may compute.
    pub cpu: crate::cpu_budget::CpuBudget,
    pub(crate) rng: Rng,
    pub(crate) engine_breaker: Breaker,
    pub(crate) backend_breaker: Breaker,
    pub(crate) backend_limiter: RateLimiter,
    pub(crate) acks: AckQueue,
    pub(crate) nacks: NackQueue,
    /// The leases the queue loop holds.
    pub(crate) leases: LeaseBoard,
    /// What the running jobs' steps took (sent with their acks).
    pub(crate) steps: StepLog,
}

/// The adapters a [`Pipeline`] is built from and runs on.
pub struct Adapters<P: Ports> {
    /// The queue.
    pub source: P::Source,
    /// First cache level.
    pub local: P::Local,
    /// Second cache level.
    pub remote: P::Remote,
    /// Lock service.
    pub locks: P::Locks,
    /// In-worker engine.
    pub engine: P::Engine,
    /// Backend fallback.
    pub backend: P::Backend,
    /// Time.
    pub clock: P::Clock,
}

impl<P: Ports> std::fmt::Debug for Adapters<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adapters").finish_non_exhaustive()
    }
}

impl<P: Ports> Pipeline<P> {
    /// A pipeline over `adapters` with settings `cfg`.
    pub fn new(adapters: Adapters<P>, cfg: Config) -> Self {
        let seed = if cfg.seed == 0 {
            adapters.clock.now_ms() ^ (cfg.worker_id.len() as u64) << 48
        } else {
            cfg.seed
        };
        Pipeline {
            engine_breaker: Breaker::new(cfg.engine_breaker_failures, cfg.breaker_open_ms),
            backend_breaker: Breaker::new(cfg.backend_breaker_failures, cfg.breaker_open_ms),
            backend_limiter: RateLimiter::new(cfg.backend_rate_per_s, cfg.backend_burst),
            rng: Rng::new(seed),
            adapters,
            cfg,
            metrics: Metrics::new(),
            stop: StopSignal::new(),
            pause: PauseSignal::default(),
            cpu: crate::cpu_budget::CpuBudget::default(),
            acks: AckQueue::default(),
            nacks: NackQueue::default(),
            leases: LeaseBoard::default(),
            steps: StepLog::default(),
        }
    }

    /// Starts recording the leases the queue loop takes and gives up, for
    /// [`Pipeline::take_lease_changes`] (see [`crate::queue::lease_journal`]); nothing is kept
    /// before.
    pub fn watch_leases(&self) {
        self.leases.journal.watch();
    }

    /// The leases the queue loop took and gave up since the last call, once
    /// [`Pipeline::watch_leases`] started recording: the browser mirrors them on the page, which
    /// hands them back when it goes away.
    pub fn take_lease_changes(&self) -> LeaseChanges {
        self.leases.journal.take()
    }

    /// Resolves once [`Pipeline::take_lease_changes`] has something to take.
    pub async fn lease_changes(&self) {
        self.leases.journal.changed().await;
    }

    /// The shared random source (jitter, trace ids).
    pub fn rng(&self) -> &Rng {
        &self.rng
    }

    /// The model a text is embedded with when the caller names none: the engine's, if loaded.
    pub fn default_model(&self) -> Option<String> {
        self.adapters
            .engine
            .model_id()
            .or_else(|| self.adapters.backend.model_id())
    }

    /// Breaker states (engine, backend) now.
    pub fn breakers(&self) -> (BreakerState, BreakerState) {
        let now = self.adapters.clock.now_ms();
        (
            self.engine_breaker.state(now),
            self.backend_breaker.state(now),
        )
    }

    /// Checks a text against the limits before any work is done.
    ///
    /// # Errors
    /// [`Error::BadJob`] `text_too_long` when it is over `max_text_bytes`.
    pub fn validate(&self, text: &str) -> Result<()> {
        if text.len() > self.cfg.max_text_bytes {
            return Err(Error::BadJob {
                code: crate::ErrorCode::TextTooLong,
                message: format!(
                    "text is {} bytes; the limit is {}",
                    text.len(),
                    self.cfg.max_text_bytes
                ),
            });
        }
        Ok(())
    }

    /// Resolves one text to its vector under `model_id` (the default model when `None`).
    /// `held` receives the lock while it is held, for the caller's heartbeat to renew.
    ///
    /// # Errors
    /// [`Error::BadJob`] for an oversized text or an unknown model; the embedding step's error
    /// when neither the engine nor the backend could embed it.
    pub async fn resolve(
        &self,
        text: &str,
        model_id: Option<&str>,
        trace: &str,
    ) -> Result<Resolved> {
        self.resolve_with(
            text,
            model_id,
            trace,
            &RefCell::new(None),
            SingleFlight::Lock,
            RemoteHint::Unknown,
        )
        .await
    }

    /// Resolves many texts as one batch, answering one result per text in order. Their cache
    /// lookups start together (an adapter that groups reads, like the IndexedDB cache, answers
    /// them in one transaction, and writes likewise), misses are embedded one after the other on
    /// this thread, and one text's failure does not fail the others. `each` is called as each
    /// text finishes, with its index. The caller bounds the batch (the browser worker sends
    /// chunks of 256).
    pub async fn resolve_many(
        &self,
        texts: &[String],
        model_id: Option<&str>,
        each: impl FnMut(usize, &Result<Resolved>),
    ) -> Vec<Result<Resolved>> {
        self.resolve_many_with(texts, model_id, ResolveOptions::default(), each)
            .await
            .results
    }

    /// [`Pipeline::resolve_many`] with `options`: at most `max_tokens` word pieces of each text
    /// (`None`: whole texts), and, with `info`, what each vector covers. A text the limit cuts
    /// gets a vector of its own, which is not the text's embedding: it is cached in the local
    /// cache only, under its own key (`model:texthash.t{max_tokens}`), and never read from or
    /// written to the shared remote cache (whose entries the server checks against whole-text
    /// embeddings). A text within the limit takes the usual path: its vector is the whole
    /// text's. Without the engine to count its word pieces, a text is taken as cut. The texts
    /// are counted once, for both (one request to an engine in a worker of its own).
    pub async fn resolve_many_with(
        &self,
        texts: &[String],
        model_id: Option<&str>,
        options: ResolveOptions,
        each: impl FnMut(usize, &Result<Resolved>),
    ) -> Resolution {
        let max_tokens = options.max_tokens;
        let counted = if max_tokens.is_some() || options.info {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            match self.model_for(model_id) {
                Ok(m) => self.texts_info(&refs, &m, max_tokens).await,
                Err(_) => None,
            }
        } else {
            None
        };
        let cut: Vec<bool> = match (max_tokens, &counted) {
            (None, _) => vec![false; texts.len()],
            (Some(_), Some(c)) => c.iter().map(|i| i.truncated).collect(),
            (Some(_), None) => vec![true; texts.len()],
        };
        let each = RefCell::new(each);
        let each = &each;
        let cut = &cut;
        let caller = options.trace.as_ref();
        let resolving = texts.iter().enumerate().map(|(i, t)| async move {
            let trace = caller
                .map_or_else(|| TraceParent::new_root(&self.rng), |c| c.child(&self.rng))
                .header();
            let r = match max_tokens {
                Some(max) if cut[i] => self.resolve_cut(t, model_id, max, &trace).await,
                _ => self.resolve(t, model_id, &trace).await,
            };
            (each.borrow_mut())(i, &r);
            r
        });
        Resolution {
            results: futures_util::future::join_all(resolving).await,
            info: counted.filter(|_| options.info),
        }
    }

    /// The model a text is embedded with: `model_id`, or the default one.
    fn model_for(&self, model_id: Option<&str>) -> Result<String> {
        match model_id.filter(|m| !m.is_empty()) {
            Some(m) => Ok(m.to_owned()),
            None => self.default_model().ok_or(Error::BadJob {
                code: crate::ErrorCode::NoModel,
                message: "no model id given and no model loaded".into(),
            }),
        }
    }

    /// `guard`: what makes this worker the only one embedding the text (see [`SingleFlight`]).
    pub(crate) async fn resolve_with(
        &self,
        text: &str,
        model_id: Option<&str>,
        trace: &str,
        held: &RefCell<Option<HeldLock>>,
        guard: SingleFlight,
        hint: RemoteHint,
    ) -> Result<Resolved> {
        self.validate(text)?;
        let model = self.model_for(model_id)?;
        let key = cache_key(&model, text);

        if let Some(v) = self
            .timed(trace, Step::LocalCache, self.local_get(&key), |_| true)
            .await
        {
            return Ok(Resolved {
                vector: v,
                model_id: model,
                source: ResultSource::Local,
            });
        }
        let remote = match hint {
            RemoteHint::Unknown => {
                self.timed(
                    trace,
                    Step::RemoteCache,
                    self.remote_get(&key, &model, trace),
                    |_| true,
                )
                .await
            }
            RemoteHint::Absent => {
                self.metrics.inc(names::REMOTE_MISSES);
                None
            }
            RemoteHint::Present(e) => self.remote_entry(Some(e), &model),
        };
        if let Some(v) = remote {
            if self.keeps_locally(guard) {
                self.local_put(&key, &v).await;
            }
            return Ok(Resolved {
                vector: v,
                model_id: model,
                source: ResultSource::Remote,
            });
        }

        // Single flight: one worker embeds a key at a time; the others wait and re-check.
        let outcome = match guard {
            SingleFlight::Lease { .. } => LockOutcome::GaveUp, // the lease already guards it
            SingleFlight::Lock => {
                self.timed(
                    trace,
                    Step::Lock,
                    self.lock_or_wait(&key, &model, trace),
                    |_| true,
                )
                .await
            }
        };
        let grant = match outcome {
            LockOutcome::Held(g) => Some(g),
            LockOutcome::FilledMeanwhile(v) => {
                self.local_put(&key, &v).await;
                return Ok(Resolved {
                    vector: v,
                    model_id: model,
                    source: ResultSource::Remote,
                });
            }
            LockOutcome::GaveUp => None,
        };
        if let Some(g) = &grant {
            *held.borrow_mut() = Some(HeldLock {
                key: key.clone(),
                grant: g.clone(),
            });
        }

        // A lease-guarded job's remote write travels with its ack (the vector crosses the
        // network once); everything else writes through here.
        let result = self
            .embed_and_store(&key, text, &model, trace, held, guard)
            .await;

        // Still held only when embedding failed: release it so others need not wait for the TTL.
        let released = held.borrow_mut().take();
        if let Some(h) = released {
            let _ = self
                .adapters
                .locks
                .release(&h.key, &h.grant.token, trace)
                .await;
        }
        result
    }

    /// What embedding each of `texts` under `model` with `max_tokens` covers, in order: the
    /// engine's count when it runs `model` (word pieces counted, nothing embedded), else `None`.
    async fn texts_info(
        &self,
        texts: &[&str],
        model: &str,
        max_tokens: Option<u32>,
    ) -> Option<Vec<TextInfo>> {
        if self.adapters.engine.model_id().as_deref() != Some(model) {
            return None;
        }
        self.adapters
            .engine
            .info(texts, max_tokens)
            .await
            .filter(|i| i.len() == texts.len())
    }

    /// A text cut at `max` word pieces: its vector is kept in the local cache only (see
    /// [`Pipeline::resolve_many_with`]).
    async fn resolve_cut(
        &self,
        text: &str,
        model_id: Option<&str>,
        max: u32,
        trace: &str,
    ) -> Result<Resolved> {
        self.validate(text)?;
        let model = self.model_for(model_id)?;
        let key = format!("{}.t{max}", cache_key(&model, text));
        if let Some(v) = self.local_get(&key).await {
            return Ok(Resolved {
                vector: v,
                model_id: model,
                source: ResultSource::Local,
            });
        }
        let (vector, source) = self.embed(text, &model, Some(max), trace).await?;
        self.local_put(&key, &vector).await;
        Ok(Resolved {
            vector,
            model_id: model,
            source,
        })
    }

    async fn embed_and_store(
        &self,
        key: &str,
        text: &str,
        model: &str,
        trace: &str,
        held: &RefCell<Option<HeldLock>>,
        guard: SingleFlight,
    ) -> Result<Resolved> {
        let (mut vector, source) = self.embed(text, model, None, trace).await?;
        if guard == SingleFlight::Lock {
            vector = self
                .write_remote(key, text, vector, model, trace, held)
                .await;
        }
        // The remote cache holds the value now: let waiting workers go while we fill our own
        // cache (two independent round trips, overlapped).
        let released = held.borrow_mut().take();
        let release = async {
            if let Some(h) = released {
                // Best effort: an unreleased lock expires by itself.
                let _ = self
                    .adapters
                    .locks
                    .release(&h.key, &h.grant.token, trace)
                    .await;
            }
        };
        let keep = async {
            if self.keeps_locally(guard) {
                self.local_put(key, &vector).await;
            }
        };
        join(keep, release).await;
        Ok(Resolved {
            vector,
            model_id: model.to_owned(),
            source,
        })
    }

    /// Writes through to the remote cache with the lock's fence; returns the vector every
    /// worker must agree on (a newer writer's, on a fence conflict).
    async fn write_remote(
        &self,
        key: &str,
        text: &str,
        mut vector: Vec<f32>,
        model: &str,
        trace: &str,
        held: &RefCell<Option<HeldLock>>,
    ) -> Vec<f32> {
        // The fence may have been renewed by the heartbeat: read it now.
        let fence = held.borrow().as_ref().map_or(0, |h| h.grant.fence);
        let put = CachePut {
            model_id: model.to_owned(),
            vector: Vector(vector.clone()),
            fence,
            ttl_ms: Some(self.cfg.remote_ttl_ms),
            text: Some(text.to_owned()),
            worker: Some(self.cfg.worker_id.clone()),
        };
        match self.adapters.remote.put(key, &put, trace).await {
            Ok(PutOutcome::Stored) => {}
            Ok(PutOutcome::Conflict(newer)) => {
                // A newer writer won: its value is the one every worker must agree on.
                self.metrics.inc(names::FENCE_CONFLICTS);
                if newer.model_id == model {
                    vector = newer.vector.0;
                }
            }
            Err(_) => self.metrics.inc(names::REMOTE_ERRORS),
        }
        vector
    }

    async fn local_get(&self, key: &str) -> Option<Vec<f32>> {
        match self
            .adapters
            .local
            .get(key, self.adapters.clock.now_ms())
            .await
        {
            Ok(Some(v)) => {
                self.metrics.inc(names::LOCAL_HITS);
                Some(v)
            }
            Ok(None) => {
                self.metrics.inc(names::LOCAL_MISSES);
                None
            }
            Err(_) => {
                self.metrics.inc(names::LOCAL_ERRORS);
                None
            }
        }
    }

    /// Whether a vector found or made under `guard` goes into the local cache: always for the
    /// page's own texts; for a queue job (its lease the guard) as [`Config::queue_local_writes`]
    /// says.
    pub(crate) fn keeps_locally(&self, guard: SingleFlight) -> bool {
        guard == SingleFlight::Lock || self.cfg.queue_local_writes
    }

    pub(crate) async fn local_put(&self, key: &str, v: &[f32]) {
        let now = self.adapters.clock.now_ms();
        let exp = now + jittered_ttl_ms(self.cfg.local_ttl_ms, self.cfg.ttl_jitter, &self.rng);
        if self.adapters.local.put(key, v, exp, now).await.is_err() {
            self.metrics.inc(names::LOCAL_ERRORS);
        }
    }

    async fn remote_get(&self, key: &str, model: &str, trace: &str) -> Option<Vec<f32>> {
        match self.adapters.remote.get(key, trace).await {
            Ok(e) => self.remote_entry(e, model),
            Err(_) => {
                self.metrics.inc(names::REMOTE_ERRORS);
                None
            }
        }
    }

    /// A remote entry as a hit (right model, not expired) or a miss.
    fn remote_entry(&self, e: Option<CacheEntry>, model: &str) -> Option<Vec<f32>> {
        match e {
            Some(e) if e.model_id == model && e.expires_at > self.adapters.clock.now_ms() => {
                self.metrics.inc(names::REMOTE_HITS);
                Some(e.vector.0)
            }
            _ => {
                self.metrics.inc(names::REMOTE_MISSES);
                None
            }
        }
    }

    async fn lock_or_wait(&self, key: &str, model: &str, trace: &str) -> LockOutcome {
        let policy = self.cfg.lock_wait;
        let mut tries = 0;
        loop {
            tries += 1;
            match self
                .adapters
                .locks
                .acquire(key, self.cfg.lock_ttl_ms, trace)
                .await
            {
                Ok(Some(g)) => {
                    self.metrics.inc(names::LOCKS_ACQUIRED);
                    // After waiting, the holder we waited for may have written the entry and
                    // unlocked between our last cache check and this acquire: check once more
                    // before embedding it a second time.
                    if tries > 1 {
                        if let Some(v) = self.remote_get(key, model, trace).await {
                            let _ = self.adapters.locks.release(key, &g.token, trace).await;
                            return LockOutcome::FilledMeanwhile(v);
                        }
                    }
                    return LockOutcome::Held(g);
                }
                Ok(None) => self.metrics.inc(names::LOCK_FAILURES),
                Err(_) => {
                    // Lock service down: go on without single flight (the fence still orders
                    // the writes).
                    self.metrics.inc(names::LOCK_FAILURES);
                    return LockOutcome::GaveUp;
                }
            }
            if !policy.allows(tries) {
                return LockOutcome::GaveUp;
            }
            self.adapters
                .clock
                .sleep(policy.delay_ms(tries - 1, None, &self.rng).max(1))
                .await;
            if let Some(v) = self.remote_get(key, model, trace).await {
                return LockOutcome::FilledMeanwhile(v);
            }
        }
    }

    /// Runs `f` as `step` of the job whose requests carry `trace`, timed into [`StepLog`] when
    /// that job is being recorded (a queue job); `ok` says whether its output is a success.
    async fn timed<T>(
        &self,
        trace: &str,
        step: Step,
        f: impl std::future::Future<Output = T>,
        ok: impl Fn(&T) -> bool,
    ) -> T {
        if !self.steps.is_open(trace) {
            return f.await;
        }
        let t0 = self.adapters.clock.now_us();
        let r = f.await;
        self.steps
            .record(trace, step, t0, self.adapters.clock.now_us(), ok(&r));
        r
    }

    /// Embeds with the engine when it can run this model, else with the backend (breaker and rate
    /// limit guard the backend; a breaker guards the engine too).
    async fn embed(
        &self,
        text: &str,
        model: &str,
        max_tokens: Option<u32>,
        trace: &str,
    ) -> Result<(Vec<f32>, ResultSource)> {
        let now = self.adapters.clock.now_ms();
        let engine_error = if self.adapters.engine.model_id().as_deref() != Some(model) {
            Error::Engine(match self.adapters.engine.model_id() {
                None => "engine not loaded".into(),
                Some(m) => format!("engine runs model {m}, job wants {model}"),
            })
        } else if max_tokens.is_some() && !self.adapters.engine.cuts() {
            // Not a failure of the engine: it embeds whole texts only here.
            Error::Engine("the engine cannot embed part of a text here".into())
        } else if !self.engine_breaker.try_acquire(now) {
            Error::Engine("engine breaker open".into())
        } else {
            // Within the CPU budget: this waits while the engine has used its share.
            self.cpu.begin(&self.adapters.clock).await;
            let t0 = self.adapters.clock.now_ms();
            let r = self
                .timed(
                    trace,
                    Step::Engine,
                    self.adapters.engine.embed_with(text, max_tokens, trace),
                    Result::is_ok,
                )
                .await;
            self.cpu.end(self.adapters.clock.now_ms());
            match r {
                Ok(v) => {
                    self.engine_breaker.success();
                    self.metrics.inc(names::ENGINE_EMBEDS);
                    self.metrics.observe_ms(
                        histograms::ENGINE_LATENCY,
                        self.adapters.clock.now_ms().saturating_sub(t0) as f64,
                    );
                    self.update_breaker_gauges();
                    return Ok((v, ResultSource::Engine));
                }
                Err(e) => {
                    self.engine_breaker.failure(self.adapters.clock.now_ms());
                    self.metrics.inc(names::ENGINE_ERRORS);
                    e
                }
            }
        };
        let r = self.embed_backend(text, model, max_tokens, trace).await;
        self.update_breaker_gauges();
        match r {
            Ok(v) => Ok((v, ResultSource::Backend)),
            Err(e @ Error::BadJob { .. }) => Err(e),
            Err(e) => Err(match e {
                Error::BackendUnavailable(m) => {
                    Error::BackendUnavailable(format!("{m}; engine: {engine_error}"))
                }
                other => other,
            }),
        }
    }

    async fn embed_backend(
        &self,
        text: &str,
        model: &str,
        max_tokens: Option<u32>,
        trace: &str,
    ) -> Result<Vec<f32>> {
        let now = self.adapters.clock.now_ms();
        if let Some(m) = self.adapters.backend.model_id() {
            if m != model {
                return Err(Error::BadJob {
                    code: crate::ErrorCode::ModelMismatch,
                    message: format!("job wants model {model}; the backend runs {m}"),
                });
            }
        }
        if max_tokens.is_some() && !self.adapters.backend.cuts() {
            // Not the backend's failure either: it embeds whole texts only.
            return Err(Error::BackendUnavailable(
                "the backend cannot embed part of a text".into(),
            ));
        }
        if !self.backend_breaker.try_acquire(now) {
            self.metrics.inc(names::BACKEND_REFUSED);
            return Err(Error::BackendUnavailable("backend breaker open".into()));
        }
        if let Err(wait) = self.backend_limiter.try_take(now) {
            // Not a failure of the backend: give the half-open trial back untouched.
            self.backend_breaker.release_trial();
            self.metrics.inc(names::BACKEND_REFUSED);
            return Err(Error::BackendUnavailable(format!(
                "backend rate limited for {wait} ms"
            )));
        }
        self.metrics.inc(names::BACKEND_CALLS);
        let called = self.timed(
            trace,
            Step::Backend,
            self.adapters.backend.embed_with(text, max_tokens, trace),
            Result::is_ok,
        );
        match called.await {
            Ok(v) => {
                self.backend_breaker.success();
                if let Some(m) = self.adapters.backend.model_id() {
                    if m != model {
                        return Err(Error::BadJob {
                            code: crate::ErrorCode::ModelMismatch,
                            message: format!("job wants model {model}; the backend runs {m}"),
                        });
                    }
                }
                Ok(v)
            }
            Err(e) => {
                if e.is_retryable() {
                    self.backend_breaker.failure(self.adapters.clock.now_ms());
                } else {
                    self.backend_breaker.success();
                }
                self.metrics.inc(names::BACKEND_ERRORS);
                Err(e)
            }
        }
    }

    /// Refreshes the breaker gauges from the breakers' state now.
    pub fn update_breaker_gauges(&self) {
        let (e, b) = self.breakers();
        self.metrics.set_gauge(gauges::ENGINE_BREAKER, e.as_gauge());
        self.metrics
            .set_gauge(gauges::BACKEND_BREAKER, b.as_gauge());
    }

    /// Drops local entries named by an `invalidate` event.
    pub async fn invalidate(&self, keys: &[String]) {
        match self.adapters.local.remove(keys).await {
            Ok(()) => self.metrics.add(names::INVALIDATIONS, keys.len() as u64),
            Err(_) => self.metrics.inc(names::LOCAL_ERRORS),
        }
    }

    /// The server's event stream had a gap (a `reset` event): `invalidate` events may have been
    /// missed, so no local entry can be trusted. Empties the local cache (the remote cache, which
    /// the server keeps right, refills it).
    pub async fn resync(&self) {
        self.metrics.inc(names::RESETS);
        if self.adapters.local.clear().await.is_err() {
            self.metrics.inc(names::LOCAL_ERRORS);
        }
    }
}

enum LockOutcome {
    Held(LockGrant),
    FilledMeanwhile(Vec<f32>),
    GaveUp,
}
