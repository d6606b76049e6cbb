//! [`AppState`]: what every handler shares.

use std::sync::Arc;

use tokio::sync::watch;

use crate::auth::Tokens;
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::embed::{Batcher, Embedder};
use crate::jwt::Keys;
use crate::limits::Limits;
use crate::metrics::Metrics;
use crate::series::Series;
use crate::store::Store;
use crate::tenants::{StoreFactory, Tenants};

/// How often expired cache entries and locks are swept.
pub const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(30);
/// Most entries (and most locks) removed per sweep.
const SWEEP_BATCH: usize = 10_000;

/// A model file's bytes, shared without copying into every response.
#[derive(Clone, Debug)]
pub(crate) struct ModelFile(Arc<Vec<u8>>);

impl AsRef<[u8]> for ModelFile {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Shared server state: one reference count to clone. Axum clones the state for every request,
/// once per layer that holds it; with each of its ~15 fields an `Arc`, those clones and drops
/// were 5.5 % of `perf`'s samples over `ternflow bench-server` (gone from the profile now; the
/// benchmark's jobs/s moved within this machine's noise).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] shares.
#[derive(Clone)]
pub struct Shared {
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) config: Arc<Config>,
    pub(crate) tokens: Arc<Tokens>,
    pub(crate) keys: Arc<Keys>,
    /// Every tenant's store, hub and usage; a handler reaches its caller's through
    /// [`crate::tenants::Ctx`] only.
    pub(crate) tenants: Arc<Tenants>,
    pub(crate) limits: Arc<Limits>,
    /// The locks each token holds here (`max_locks_per_token`).
    pub(crate) lock_holds: Arc<crate::lock_holds::LockHolds>,
    pub(crate) metrics: Arc<Metrics>,
    /// Result verification's per-server state.
    pub(crate) verifier: Arc<crate::integrity::Verifier>,
    /// The dashboard's history of stats samples and alerts (the default tenant's).
    pub(crate) series: Arc<Series>,
    pub(crate) embed: Option<Batcher>,
    /// Counts what the embedder's vectors cover of a text (a done job's `info`).
    pub(crate) counter: Option<Arc<ternflow_engine::Counter>>,
    pub(crate) default_model_id: Arc<str>,
    /// The model file served at `GET /v1/model`.
    pub(crate) model_file: Option<ModelFile>,
    /// Locks this process granted and that were not released (`crate::granted_locks`).
    pub(crate) locks: Arc<crate::granted_locks::GrantedLocks>,
    /// The job deliveries this server traces (`crate::deliveries`).
    pub(crate) deliveries: Arc<crate::deliveries::Deliveries>,
    /// Browser workers' sessions and their latest claims (`crate::sessions`).
    pub(crate) sessions: Arc<crate::sessions::Sessions>,
    shutdown: Arc<watch::Sender<bool>>,
}

impl AppState {
    /// The shared state to change while building (copied once if already shared).
    fn building(&mut self) -> &mut Shared {
        Arc::make_mut(&mut self.0)
    }
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("tenants", &self.tenants)
            .field("config", &self.config)
            .field("tokens", &self.tokens)
            .field("default_model_id", &self.default_model_id)
            .finish_non_exhaustive()
    }
}

impl AppState {
    /// State over `store` with the wall clock and no embedder. Must be called inside a Tokio
    /// runtime (it starts the event hub).
    pub fn new(store: Arc<dyn Store>, tokens: Tokens, config: Config) -> Self {
        let (shutdown, _) = watch::channel(false);
        let metrics = Arc::new(Metrics::default());
        let tenants = Tenants::new(
            store,
            metrics.clone(),
            config.event_ring,
            config.max_open_tenants,
            config.tenant_idle_ms,
        );
        AppState(Arc::new(Shared {
            clock: Arc::new(SystemClock),
            limits: Arc::new(Limits::new(&config)),
            lock_holds: Arc::new(crate::lock_holds::LockHolds::new(
                config.max_locks_per_token,
                config.max_lock_hold_ms,
            )),
            series: Arc::new(Series::new(config.stats_samples)),
            config: Arc::new(config),
            tokens: Arc::new(tokens),
            keys: Arc::new(Keys::default()),
            tenants: Arc::new(tenants),
            metrics,
            verifier: Arc::default(),
            embed: None,
            counter: None,
            default_model_id: Arc::from(""),
            model_file: None,
            locks: Arc::default(),
            deliveries: Arc::default(),
            sessions: Arc::default(),
            shutdown: Arc::new(shutdown),
        }))
    }

    /// Every [`SWEEP_EVERY`], closes idle tenants, removes expired cache entries and locks
    /// from every open tenant's store (Redis expires them itself) and samples each signed
    /// tenant's cache bytes, until shutdown.
    pub(crate) fn start_sweeper(&self) {
        let tenants = self.tenants.clone();
        let clock = self.clock.clone();
        let metrics = self.metrics.clone();
        let limits = self.limits.clone();
        let lock_holds = self.lock_holds.clone();
        let mut stop = self.shutdown.subscribe();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(SWEEP_EVERY) => {}
                    _ = stop.changed() => return,
                }
                limits.tidy();
                lock_holds.tidy(clock.now_ms());
                let closed = tenants.close_idle(clock.now_ms()).await;
                if closed > 0 {
                    tracing::info!(closed, "idle tenants closed");
                }
                for (name, t) in tenants.all().await {
                    match t.store.sweep(clock.now_ms(), SWEEP_BATCH).await {
                        Ok(n) => metrics.add(|c| &c.cache_swept, n),
                        Err(e) => tracing::warn!(error = %e, "sweep of expired entries failed"),
                    }
                    // The cache-bytes quota's sample (the operator's own tenant has none).
                    if &*name != crate::identity::DEFAULT_TENANT {
                        let now = clock.now_ms();
                        match t.store.cache_bytes(now).await {
                            Ok(b) => t.usage.cache_sampled(now, b),
                            Err(e) => tracing::warn!(error = %e, "reading cache bytes failed"),
                        }
                    }
                }
            }
        });
    }

    /// Every [`USAGE_FLUSH_EVERY`](crate::tenants::USAGE_FLUSH_EVERY), adds each open tenant's
    /// counts to its store (`TenantUsage::flush`), until shutdown (which flushes once more).
    pub(crate) fn start_usage_flusher(&self) {
        let tenants = self.tenants.clone();
        let mut stop = self.shutdown.subscribe();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(crate::tenants::USAGE_FLUSH_EVERY) => {}
                    _ = stop.changed() => return,
                }
                tenants.flush_usage().await;
            }
        });
    }

    /// Every [`Config::stats_sample_ms`], takes a sample for the dashboard's history
    /// ([`AppState::record_sample`]), until shutdown.
    pub(crate) fn start_sampler(&self) {
        let state = self.clone();
        let every = std::time::Duration::from_millis(self.config.stats_sample_ms.max(10));
        let mut stop = self.shutdown.subscribe();
        tokio::spawn(async move {
            loop {
                state.record_sample().await;
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = stop.changed() => return,
                }
            }
        });
    }

    /// Takes one sample of the default tenant's queue and this server's metrics into the
    /// dashboard's history (the sampler's step; tests call it with a fake clock). A store that
    /// cannot answer leaves a gap.
    pub async fn record_sample(&self) {
        let now = self.now();
        let locks = self.locks_held();
        let operator = self.tenants.default_tenant();
        match operator.store.depth(now).await {
            Ok(depth) => {
                let workers = operator.usage.workers.rows(now);
                self.series
                    .record(now, depth, &self.metrics, workers, locks);
            }
            Err(e) => tracing::warn!(error = %e, "stats sample: queue depth"),
        }
    }

    /// Accepts tokens signed with `keys` (short-lived, per tenant; see [`crate::jwt`]).
    pub fn with_keys(mut self, keys: Keys) -> Self {
        self.building().keys = Arc::new(keys);
        self
    }

    /// Serves tenants other than `default`, each with the store `factory` makes for it.
    pub fn with_tenant_stores(self, factory: StoreFactory) -> Self {
        self.tenants.set_factory(factory);
        self
    }

    /// Uses `clock` for every time decision (tests pass a [`crate::clock::FakeClock`]).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.building().clock = clock;
        self
    }

    /// Serves `POST /v1/embed` with `embedder`; its model id becomes the default for jobs.
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        let batcher = Batcher::start(
            embedder.clone(),
            self.config.embed_batch,
            self.config.embed_queue,
            self.config.engine_nice,
            self.metrics.clone(),
        );
        let s = self.building();
        s.default_model_id = Arc::from(embedder.model_id());
        s.counter = embedder.counter().map(Arc::new);
        s.embed = Some(batcher);
        self
    }

    /// Serves `bytes` (the model file the embedder was loaded from) at `GET /v1/model`.
    pub fn with_model_file(mut self, bytes: Vec<u8>) -> Self {
        self.building().model_file = Some(ModelFile(Arc::new(bytes)));
        self
    }

    /// Result verification's state ([`crate::integrity::Verifier::settle`] waits for its
    /// background checks).
    pub fn verifier(&self) -> &Arc<crate::integrity::Verifier> {
        &self.verifier
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// `token` (of writer `sub`) got or renewed the lock on `key` (tenant-prefixed) until
    /// `expires_at`: remembered, and a previous holder whose lock ran out counted as leaked.
    pub(crate) fn track_lock(&self, key: &str, token: &str, sub: Option<&str>, expires_at: u64) {
        let leaked = self.locks.granted(key, token, sub, expires_at, self.now());
        if leaked > 0 {
            self.metrics.add(|c| &c.lock_leaked, leaked);
        }
    }

    pub(crate) fn forget_lock(&self, key: &str, token: &str) {
        self.locks.released(key, token);
    }

    /// Every server counter by name, and `locks_held`: the map `GET /v1/stats` and the
    /// dashboard show.
    pub(crate) fn counter_map(&self) -> std::collections::BTreeMap<String, u64> {
        let mut counters: std::collections::BTreeMap<String, u64> = self
            .metrics
            .counters
            .list()
            .into_iter()
            .map(|(k, _, v)| (k.to_owned(), v))
            .collect();
        counters.insert("locks_held".to_owned(), self.locks_held());
        counters
    }

    /// Locks granted here that are live; expired ones count as leaked and are forgotten.
    pub(crate) fn locks_held(&self) -> u64 {
        let (live, leaked) = self.locks.live(self.now());
        if leaked > 0 {
            self.metrics.add(|c| &c.lock_leaked, leaked);
        }
        live
    }

    /// A receiver that turns `true` when shutdown begins.
    pub(crate) fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Starts shutting down: SSE streams end, long-polls return, new claims are refused.
    pub fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
        let tenants = self.tenants.clone();
        tokio::spawn(async move { tenants.wake_all().await });
    }
}
