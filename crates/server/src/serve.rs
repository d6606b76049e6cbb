//! [`run`]: the accept loop. HTTP/1.1 over hyper with the connection-level limits axum's own
//! `serve` does not offer: a header read timeout (also the keep-alive idle timeout), a bound on
//! open connections, and a graceful shutdown with a deadline after which stalled connections
//! are closed.
//!
//! HTTP/2 is not served here: browsers speak it only over TLS, which a proxy in front terminates.

use std::future::Future;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tower::ServiceExt;

use crate::state::AppState;

/// Pause after `accept` fails (out of file descriptors): the failure would repeat at once.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves `state` on `listener` until `shutdown` resolves, then stops accepting, ends SSE
/// streams and long polls, lets in-flight requests finish for up to
/// [`Config::shutdown_deadline_ms`](crate::Config::shutdown_deadline_ms), and closes what is
/// still open. Leases live in the store, so workers keep them across a restart (they expire
/// only by time).
///
/// # Errors
/// None in practice: a failed `accept` is logged and retried.
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    state.start_sweeper();
    state.start_sampler();
    let cfg = state.config.clone();
    let router = crate::app(state.clone());
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(cfg.header_timeout_ms))
        .keep_alive(true);
    let graceful = GracefulShutdown::new();
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(cfg.max_connections));
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while conns.try_join_next().is_some() {}
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            state.metrics.add(|c| &c.connections_refused, 1);
            tracing::warn!(%peer, limit = cfg.max_connections, "connection limit reached; closed");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let svc = router
            .clone()
            .map_request(|req: axum::http::Request<Incoming>| req.map(axum::body::Body::new));
        let conn = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc));
        let conn = graceful.watch(conn);
        conns.spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    tracing::info!("shutting down");
    drop(listener);
    state.begin_shutdown();
    let deadline = Duration::from_millis(cfg.shutdown_deadline_ms);
    if tokio::time::timeout(deadline, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            open = conns.len(),
            "shutdown deadline passed; closing the connections still open"
        );
    }
    conns.abort_all();
    while conns.join_next().await.is_some() {}
    Ok(())
}
