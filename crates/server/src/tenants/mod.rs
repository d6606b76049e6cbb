//! Tenants: every tenant has a store and an event hub of its own, so a token of tenant A can
//! never read, write, claim, lock or hear anything of tenant B — isolation by construction, not
//! by filtering. Static tokens belong to the `default` tenant (the store the server was started
//! with); a signed token names its tenant (`jwt.rs`), whose store the server's [`StoreFactory`]
//! opens on demand: a SQLite database of its own under the data directory, or its own key
//! prefix on Redis. `ctx` holds [`Ctx`], a request's tenant context; `usage` what an open tenant
//! is using (its worker table, counters, quota estimates).
//!
//! # Open tenants are a bounded LRU
//! A tenant's store is opened by its first request and kept while it is used. Each open tenant
//! costs file descriptors and threads (SQLite: the database, its WAL and shared-memory files on
//! two connections, a writer and a reader thread; Redis: a command connection and a
//! subscription), so a server with many small tenants keeps at most
//! [`Config::max_open_tenants`](crate::Config::max_open_tenants) open, least recently used
//! first out, and closes a tenant idle for
//! [`Config::tenant_idle_ms`](crate::Config::tenant_idle_ms). Nothing is lost: the data is in
//! the store, a closed tenant reopens on its next request, and an SSE stream of a closing
//! tenant ends so that its client reconnects (and resumes with `Last-Event-ID`).
//!
//! A tenant in use (a request, a long poll or a background check holds its store) is never
//! closed; only when every other holder is gone. So two instances of one tenant's store never
//! exist at once, and its fence and sequence counters, kept in memory by the SQLite store
//! between group commits, stay its own. When every open tenant is in use, the bound is passed
//! rather than a request refused, and the next idle sweep brings it back.
//!
//! [`Ctx`] (in `ctx.rs`) is the only way a handler gets a tenant's store: the caller's.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use lru::LruCache;

use crate::error::{Error, Result};
use crate::identity::DEFAULT_TENANT;
use crate::metrics::Metrics;
use crate::sse::Hub;
use crate::store::timed::Timed;
use crate::store::Store;

mod ctx;
mod usage;

pub(crate) use ctx::Ctx;
pub use usage::TenantUsage;
pub(crate) use usage::USAGE_FLUSH_EVERY;

/// How long closing a tenant waits to save its last usage counts.
const CLOSE_FLUSH_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Makes the store of a tenant on first use.
pub type StoreFactory = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = Result<Arc<dyn Store>>> + Send>> + Send + Sync,
>;

/// One open tenant: its store, its event hub and its usage counters.
#[derive(Clone, Debug)]
pub(crate) struct Tenant {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) hub: Arc<Hub>,
    pub(crate) usage: Arc<TenantUsage>,
}

struct Open {
    tenant: Tenant,
    last_used_ms: u64,
}

/// The tenants this server serves.
pub(crate) struct Tenants {
    default: Tenant,
    factory: std::sync::OnceLock<StoreFactory>,
    /// What every tenant's store is timed into.
    metrics: Arc<Metrics>,
    open: tokio::sync::Mutex<LruCache<Arc<str>, Open>>,
    ring: usize,
    max_open: usize,
    idle_ms: u64,
    opened: AtomicU64,
    closed: AtomicU64,
}

impl std::fmt::Debug for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenants")
            .field("factory", &self.factory.get().is_some())
            .field("max_open", &self.max_open)
            .finish_non_exhaustive()
    }
}

/// Whether anyone but the registry holds `t` (a request, a long poll, a background check).
fn in_use(t: &Tenant) -> bool {
    Arc::strong_count(&t.store) > 1
}

impl Tenants {
    /// `default`: the default tenant's store. Every tenant's store is timed into `metrics`
    /// (`crate::store::timed`).
    pub(crate) fn new(
        default: Arc<dyn Store>,
        metrics: Arc<Metrics>,
        ring: usize,
        max_open: usize,
        idle_ms: u64,
    ) -> Self {
        let default = Timed::wrap(default, metrics.clone());
        let hub = Hub::start(default.as_ref(), ring);
        Tenants {
            default: Tenant {
                store: default,
                hub,
                usage: Arc::default(),
            },
            factory: std::sync::OnceLock::new(),
            metrics,
            open: tokio::sync::Mutex::new(LruCache::unbounded()),
            ring,
            max_open: max_open.max(1),
            idle_ms,
            opened: AtomicU64::new(0),
            closed: AtomicU64::new(0),
        }
    }

    /// Serves tenants other than `default` with the stores `f` makes (once; later calls are
    /// ignored).
    pub(crate) fn set_factory(&self, f: StoreFactory) {
        let _ = self.factory.set(f);
    }

    /// The tenant `name`, opened when it is not. Private to this module: a handler reaches a
    /// tenant only through [`Ctx`], for its caller's identity.
    ///
    /// # Errors
    /// 403 when the server serves no other tenant than `default`; 503 when its store cannot
    /// be opened.
    async fn get(&self, name: &Arc<str>, now_ms: u64) -> Result<Tenant> {
        if &**name == DEFAULT_TENANT {
            return Ok(self.default.clone());
        }
        let Some(factory) = self.factory.get() else {
            return Err(Error::Forbidden(format!(
                "this server serves only the {DEFAULT_TENANT:?} tenant, not {name:?}"
            )));
        };
        // Held while a store is opened or closed, so that one tenant never has two stores.
        let mut open = self.open.lock().await;
        if let Some(o) = open.get_mut(name) {
            o.last_used_ms = now_ms;
            return Ok(o.tenant.clone());
        }
        while open.len() >= self.max_open {
            if !self.close_lru(&mut open).await {
                break;
            }
        }
        let store = match factory(name.to_string()).await {
            Ok(s) => s,
            // Out of file descriptors or threads (a cap above what the process may hold, or
            // connections using them): close up to a quarter of the idle tenants nobody holds,
            // least recently used first, and try once more.
            Err(first) => {
                let mut freed = 0;
                while freed < open.len().div_ceil(4).max(1) && self.close_lru(&mut open).await {
                    freed += 1;
                }
                if freed == 0 {
                    return Err(first);
                }
                tracing::warn!(
                    tenant = %name, closed = freed, error = %first,
                    "opening a tenant failed; closed idle tenants and tried again"
                );
                factory(name.to_string()).await?
            }
        };
        let store = Timed::wrap(store, self.metrics.clone());
        let hub = Hub::start(store.as_ref(), self.ring);
        let t = Tenant {
            store,
            hub,
            usage: Arc::default(),
        };
        open.put(
            name.clone(),
            Open {
                tenant: t.clone(),
                last_used_ms: now_ms,
            },
        );
        self.opened.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(tenant = %name, open = open.len(), "tenant opened");
        Ok(t)
    }

    /// Closes `t`, held by no one else: its store's threads and connections end before this
    /// returns (off the async threads), its hub's streams end, its long polls are woken.
    async fn close(&self, name: &str, t: Tenant) {
        t.hub.wake_all();
        // Under the registry's lock, so bounded: a store that cannot answer must not hold up
        // every other tenant's requests for its timeout. What is lost is at most the last
        // flusher step's counts (said in docs/security.md).
        match tokio::time::timeout(CLOSE_FLUSH_WAIT, t.usage.flush(t.store.as_ref())).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(tenant = %name, error = %e, "the tenant's last usage counts were not saved");
            }
            Err(_) => {
                tracing::warn!(tenant = %name, "the tenant's last usage counts were not saved in time");
            }
        }
        let Tenant { store, hub, usage } = t;
        drop((hub, usage));
        // Dropping a SQLite store joins its threads; not on a runtime thread.
        let _ = tokio::task::spawn_blocking(move || drop(store)).await;
        self.closed.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(tenant = %name, "tenant closed");
    }

    /// Closes every tenant idle for `idle_ms` and held by no one (the sweeper's step).
    pub(crate) async fn close_idle(&self, now_ms: u64) -> usize {
        let mut open = self.open.lock().await;
        let idle: Vec<Arc<str>> = open
            .iter()
            .filter(|(_, o)| {
                o.last_used_ms.saturating_add(self.idle_ms) <= now_ms && !in_use(&o.tenant)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for name in &idle {
            if let Some(o) = open.pop(name) {
                self.close(name, o.tenant).await;
            }
        }
        // Past the bound (every tenant was in use when one more opened): back under it.
        while open.len() > self.max_open {
            if !self.close_lru(&mut open).await {
                break;
            }
        }
        idle.len()
    }

    /// Closes the least recently used tenant nobody holds; `false` when every one is held.
    async fn close_lru(&self, open: &mut LruCache<Arc<str>, Open>) -> bool {
        let victim = open
            .iter()
            .rev()
            .find(|(_, o)| !in_use(&o.tenant))
            .map(|(k, _)| k.clone());
        let Some(victim) = victim else { return false };
        if let Some(o) = open.pop(&victim) {
            self.close(&victim, o.tenant).await;
        }
        true
    }

    /// The default tenant and every open one, by name (the sweeper visits them all).
    pub(crate) async fn all(&self) -> Vec<(Arc<str>, Tenant)> {
        let mut v = vec![(Arc::from(DEFAULT_TENANT), self.default.clone())];
        let open = self.open.lock().await;
        v.extend(open.iter().map(|(k, o)| (k.clone(), o.tenant.clone())));
        v
    }

    /// The default tenant (the server's own sampler and dashboard history).
    pub(crate) fn default_tenant(&self) -> &Tenant {
        &self.default
    }

    /// Open tenants now (not counting `default`), and tenants opened and closed since start.
    pub(crate) async fn counts(&self) -> (usize, u64, u64) {
        let n = self.open.lock().await.len();
        (
            n,
            self.opened.load(Ordering::Relaxed),
            self.closed.load(Ordering::Relaxed),
        )
    }

    /// Adds every open tenant's counts to its store (the flusher's step, and shutdown's), all
    /// at once: a store that cannot answer holds up only its own tenant (each waits at most its
    /// store's timeout).
    pub(crate) async fn flush_usage(&self) {
        let tenants = self.all().await;
        let flushes = tenants
            .iter()
            .filter(|(name, _)| &**name != DEFAULT_TENANT)
            .map(|(name, t)| async move {
                if let Err(e) = t.usage.flush(t.store.as_ref()).await {
                    tracing::warn!(tenant = %name, error = %e, "saving usage counts failed; kept for the next try");
                }
            });
        futures_util::future::join_all(flushes).await;
    }

    /// Wakes every tenant's long polls (shutdown).
    pub(crate) async fn wake_all(&self) {
        for (_, t) in self.all().await {
            t.hub.wake_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Mutex, Weak};

    use super::*;
    use crate::store::memory::MemoryStore;

    /// A factory that fails while `room` stores are alive, as opening a SQLite tenant does once
    /// the process is out of file descriptors.
    fn scarce(room: usize) -> (StoreFactory, Arc<Mutex<Vec<Weak<MemoryStore>>>>) {
        let alive: Arc<Mutex<Vec<Weak<MemoryStore>>>> = Arc::default();
        let a = alive.clone();
        let f: StoreFactory = Arc::new(move |_| {
            let a = a.clone();
            Box::pin(async move {
                let mut v = a.lock().unwrap();
                v.retain(|w| w.strong_count() > 0);
                if v.len() >= room {
                    return Err(Error::Store("Too many open files (os error 24)".into()));
                }
                let s = Arc::new(MemoryStore::new());
                v.push(Arc::downgrade(&s));
                Ok(s as Arc<dyn Store>)
            })
        });
        (f, alive)
    }

    #[tokio::test]
    async fn a_failed_open_closes_idle_tenants_and_tries_again() {
        let t = Tenants::new(
            Arc::new(MemoryStore::new()),
            Arc::default(),
            16,
            100,
            60_000,
        );
        let (f, _alive) = scarce(4);
        t.set_factory(f);
        for (i, name) in ["a", "b", "c", "d"].iter().enumerate() {
            t.get(&Arc::from(*name), i as u64).await.unwrap();
        }
        // Below the cap of 100, but out of room: the least recently used idle tenant goes.
        let held = t.get(&Arc::from("e"), 10).await.unwrap();
        let open: Vec<String> = t.all().await.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(open, ["default", "e", "d", "c", "b"], "a closed");
        assert_eq!(t.counts().await, (4, 5, 1));
        // Every open tenant held: nothing can be closed, and the error is the store's.
        let all = t.all().await;
        let e = t.get(&Arc::from("f"), 11).await.unwrap_err();
        assert!(e.to_string().contains("Too many open files"), "{e}");
        drop((all, held));
        // Reopening a closed tenant works the same way.
        t.get(&Arc::from("a"), 12).await.unwrap();
        assert_eq!(t.counts().await.0, 4);
    }

    #[tokio::test]
    async fn the_cap_closes_the_least_recently_used_idle_tenant() {
        let t = Tenants::new(Arc::new(MemoryStore::new()), Arc::default(), 16, 2, 60_000);
        t.set_factory(scarce(100).0);
        let a = t.get(&Arc::from("a"), 1).await.unwrap();
        t.get(&Arc::from("b"), 2).await.unwrap();
        // `a` is held (a request in flight): `b` is closed instead, though used later.
        t.get(&Arc::from("c"), 3).await.unwrap();
        let open: Vec<String> = t.all().await.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(open, ["default", "c", "a"]);
        drop(a);
        // Idle for the idle time: closed by the sweep.
        assert_eq!(t.close_idle(3 + 60_000).await, 2);
        assert_eq!(t.counts().await, (0, 3, 3));
    }
}
