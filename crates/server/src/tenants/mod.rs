//! Tenants: every tenant has a store and an event hub of its own, so a token of tenant A can
//! never read, write, claim, lock or hear anything of tenant B — isolation by construction, not
//! by filtering. Static tokens belong to the `default` tenant (the store the server was started
//! with); a signed token names its tenant (`jwt.rs`), whose store is made on first use by the
//! server's [`StoreFactory`]: a SQLite database of its own under the data directory, or its own
//! key prefix on Redis.
//!
//! The [`Ctx`] extractor is how a handler gets the state of the caller's tenant: the same
//! [`AppState`] with the tenant's store and hub in place of the default ones.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::error::{Error, Result};
use crate::limits::Caller;
use crate::sse::Hub;
use crate::state::AppState;
use crate::store::Store;

/// The tenant of static tokens and of the store the server starts with.
pub const DEFAULT_TENANT: &str = "default";

/// Most tenants one server holds stores for (each has its own database or key prefix).
pub const MAX_TENANTS: usize = 1_024;

/// Makes the store of a tenant on first use.
pub type StoreFactory = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = Result<Arc<dyn Store>>> + Send>> + Send + Sync,
>;

/// One tenant's store and event hub.
#[derive(Clone, Debug)]
pub(crate) struct Tenant {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) hub: Arc<Hub>,
}

/// The tenants this server serves.
pub(crate) struct Tenants {
    default: Tenant,
    factory: Option<StoreFactory>,
    others: tokio::sync::Mutex<HashMap<String, Tenant>>,
    ring: usize,
}

impl std::fmt::Debug for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenants")
            .field("factory", &self.factory.is_some())
            .finish_non_exhaustive()
    }
}

impl Tenants {
    pub(crate) fn new(default: Tenant, ring: usize) -> Self {
        Tenants {
            default,
            factory: None,
            others: tokio::sync::Mutex::new(HashMap::new()),
            ring,
        }
    }

    pub(crate) fn with_factory(mut self, f: StoreFactory) -> Self {
        self.factory = Some(f);
        self
    }

    /// The tenant `name`, its store made on first use.
    ///
    /// # Errors
    /// 403 when the server serves no other tenant than `default`; 503 when the store cannot
    /// be made or the server holds [`MAX_TENANTS`] already.
    pub(crate) async fn get(&self, name: &str) -> Result<Tenant> {
        if name == DEFAULT_TENANT {
            return Ok(self.default.clone());
        }
        let Some(factory) = &self.factory else {
            return Err(Error::Forbidden("a tenant this server serves"));
        };
        // Held while a store is made, so two first requests of a tenant make one store.
        let mut others = self.others.lock().await;
        if let Some(t) = others.get(name) {
            return Ok(t.clone());
        }
        if others.len() >= MAX_TENANTS {
            return Err(Error::Unavailable(format!(
                "this server already serves {MAX_TENANTS} tenants"
            )));
        }
        let store = factory(name.to_owned()).await?;
        let hub = Hub::start(store.as_ref(), self.ring);
        let t = Tenant { store, hub };
        others.insert(name.to_owned(), t.clone());
        tracing::info!(tenant = %name, "tenant store opened");
        Ok(t)
    }

    /// Every tenant opened so far (the sweeper visits them all).
    pub(crate) async fn all(&self) -> Vec<Tenant> {
        let mut v = vec![self.default.clone()];
        v.extend(self.others.lock().await.values().cloned());
        v
    }

    /// Wakes every tenant's long polls (shutdown).
    pub(crate) async fn wake_all(&self) {
        for t in self.all().await {
            t.hub.wake_all();
        }
    }
}

/// The state of the caller's tenant (see the [module docs](self)).
#[derive(Debug, Clone)]
pub(crate) struct Ctx(pub(crate) AppState);

impl FromRequestParts<AppState> for Ctx {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let tenant = parts
            .extensions
            .get::<Caller>()
            .map(|c| c.tenant.clone())
            .unwrap_or_else(|| DEFAULT_TENANT.into());
        let t = state.tenants.get(&tenant).await?;
        let mut s = state.clone();
        s.store = t.store;
        s.hub = t.hub;
        s.tenant = tenant;
        Ok(Ctx(s))
    }
}
