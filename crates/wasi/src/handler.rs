//! The incoming HTTP handler (`wasmtime serve`): `POST {"texts": [...]}` through the same
//! pipeline (in-memory local cache → remote cache → lock → engine or backend → write-through),
//! answered with the edge handler's contract (`ternflow_core::http_handler`, shared with it).
//! The pipeline (one engine, one local cache) is built at an instance's first request and kept
//! for the requests the host sends to the same instance; on WASI 0.3 those may run at once
//! (`wasmtime serve --max-instance-concurrent-reuse-count`, 16 by default), and requests that
//! arrive while it is being built wait for that one build.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use futures_util::lock::Mutex;
use ternflow_core::http_handler::{self as contract, Reply};
use ternflow_core::Pipeline;

use crate::app::{self, Wasi};
use crate::settings::Settings;

thread_local! {
    static PIPELINE: RefCell<Option<Rc<Pipeline<Wasi>>>> = const { RefCell::new(None) };
    static BUILDING: Rc<Mutex<()>> = Rc::new(Mutex::new(()));
    static SERVED: Cell<u64> = const { Cell::new(0) };
    static IN_FLIGHT: Cell<u64> = const { Cell::new(0) };
}

fn built() -> Option<Rc<Pipeline<Wasi>>> {
    PIPELINE.with(|p| p.borrow().clone())
}

/// This instance's pipeline, built from the environment on first use (once, however many
/// requests wait for it).
async fn pipeline() -> Result<Rc<Pipeline<Wasi>>, Reply> {
    if let Some(p) = built() {
        return Ok(p);
    }
    let building = BUILDING.with(Rc::clone);
    let _one_at_a_time = building.lock().await;
    if let Some(p) = built() {
        return Ok(p);
    }
    let settings = Settings::parse(|k| std::env::var(k).ok(), &[])
        .map_err(|e| contract::error(503, "bad_config", &e))?;
    let (p, _) = app::build(&settings, "wasi-handler")
        .await
        .map_err(|e| contract::error(503, "bad_model", &e))?;
    let p = Rc::new(p);
    PIPELINE.with(|slot| *slot.borrow_mut() = Some(p.clone()));
    Ok(p)
}

/// What an instance says of itself with each answer.
#[derive(Debug, Clone, Copy)]
pub struct Instance {
    /// Requests this instance has served, this one included (whether the host reuses it).
    pub served: u64,
    /// Requests in flight on this instance when this one arrived, this one included (whether
    /// the host sends it several at once: WASI 0.3 only).
    pub in_flight: u64,
}

/// Answers one request; also says how the host uses this instance.
pub async fn handle(method: &str, body: &[u8]) -> (Reply, Instance) {
    let served = SERVED.with(|s| {
        s.set(s.get() + 1);
        s.get()
    });
    let in_flight = IN_FLIGHT.with(|n| {
        n.set(n.get() + 1);
        n.get()
    });
    let reply = answer(method, body).await.unwrap_or_else(|r| r);
    IN_FLIGHT.with(|n| n.set(n.get() - 1));
    (reply, Instance { served, in_flight })
}

async fn answer(method: &str, body: &[u8]) -> Result<Reply, Reply> {
    let p = pipeline().await?;
    Ok(contract::respond(&p, method, body).await)
}
