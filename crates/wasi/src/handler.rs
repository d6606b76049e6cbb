//! The incoming HTTP handler (`wasmtime serve`): `POST {"texts": [...]}` through the same
//! pipeline (in-memory local cache → remote cache → lock → engine or backend → write-through),
//! answered with the edge handler's contract (`ternflow_core::http_handler`, shared with it). The pipeline is built at an
//! instance's first request and kept for the requests the host sends to the same instance.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use ternflow_core::http_handler::{self as contract, Reply};
use ternflow_core::Pipeline;

use crate::app::{self, Wasi};
use crate::settings::Settings;

thread_local! {
    static PIPELINE: RefCell<Option<Rc<Pipeline<Wasi>>>> = const { RefCell::new(None) };
    static SERVED: Cell<u64> = const { Cell::new(0) };
}

/// This instance's pipeline, built from the environment on first use.
async fn pipeline() -> Result<Rc<Pipeline<Wasi>>, Reply> {
    if let Some(p) = PIPELINE.with(|p| p.borrow().clone()) {
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

/// Answers one request; also returns how many requests this instance has served (this one
/// included), which shows whether the host reuses instances.
pub async fn handle(method: &str, body: &[u8]) -> (Reply, u64) {
    let served = SERVED.with(|s| {
        s.set(s.get() + 1);
        s.get()
    });
    (answer(method, body).await.unwrap_or_else(|r| r), served)
}

async fn answer(method: &str, body: &[u8]) -> Result<Reply, Reply> {
    let p = pipeline().await?;
    Ok(contract::respond(&p, method, body).await)
}
