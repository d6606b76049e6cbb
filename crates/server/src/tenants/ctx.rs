//! [`Ctx`]: a request's tenant context, the one way a handler reaches a store.
//!
//! It is made from the caller's [`Identity`] (put on the request by the auth gate), so a
//! handler gets the store, event hub and usage of the caller's tenant and no other: there is
//! no tenant name to pass, and the shared [`AppState`] holds no tenant's data. Background work
//! a handler starts (a sampled verification, an undo) takes the `Ctx` with it.

use std::ops::Deref;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::TenantUsage;
use crate::error::{Error, Result};
use crate::identity::Identity;
use crate::sse::Hub;
use crate::state::AppState;
use crate::store::Store;

/// The caller's tenant (see the [module docs](self)); dereferences to the shared state.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    app: AppState,
    /// The tenant's store.
    pub(crate) store: Arc<dyn Store>,
    /// The tenant's event hub.
    pub(crate) hub: Arc<Hub>,
    /// The tenant's name.
    pub(crate) tenant: Arc<str>,
    /// What the tenant uses (workers, counters, queue estimate).
    pub(crate) usage: Arc<TenantUsage>,
}

impl Deref for Ctx {
    type Target = AppState;

    fn deref(&self) -> &AppState {
        &self.app
    }
}

impl Ctx {
    /// The context of `caller`'s tenant, opening it when it is closed.
    ///
    /// # Errors
    /// 403 when this server serves no such tenant; 503 when its store cannot be opened.
    pub(crate) async fn for_caller(app: &AppState, caller: &Identity) -> Result<Ctx> {
        let t = app.tenants.get(&caller.tenant, app.now()).await?;
        Ok(Ctx {
            app: app.clone(),
            store: t.store,
            hub: t.hub,
            tenant: caller.tenant.clone(),
            usage: t.usage,
        })
    }
}

impl FromRequestParts<AppState> for Ctx {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self> {
        // Only routes behind the auth gate have a caller; a route without one has no tenant.
        let caller = parts
            .extensions
            .get::<Identity>()
            .ok_or(Error::Unauthorized)?;
        Ctx::for_caller(app, caller).await
    }
}
