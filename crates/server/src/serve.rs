//! [`run`]: the accept loop. HTTP/1.1 over hyper with the connection-level limits axum's own
//! `serve` does not offer: a header read timeout (also the keep-alive idle timeout), a bound on
//! open connections (in all, and per client address, so one client's idle sockets cannot use
//! up everyone's), and a graceful shutdown with a deadline after which stalled connections
//! are closed.
//!
//! HTTP/2 is not served here: browsers speak it only over TLS, which a proxy in front terminates.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tower::ServiceExt;

use crate::state::AppState;

/// Open connections per client address.
type Peers = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// One open connection of an address, counted until it drops. Hand-written: a count per key
/// with a guard is all it is, and `tower`'s limits are per service, not per peer.
struct PeerSlot {
    peers: Peers,
    ip: IpAddr,
}

impl PeerSlot {
    /// A slot for `ip`, or `None` when it already has `max` connections open.
    fn take(peers: &Peers, ip: IpAddr, max: usize) -> Option<PeerSlot> {
        let mut p = peers.lock().unwrap_or_else(|e| e.into_inner());
        let n = p.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            peers: peers.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut p = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = p.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                p.remove(&self.ip);
            }
        }
    }
}

/// Pause after `accept` fails (out of file descriptors): the failure would repeat at once.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Makes a write past the file-size limit (`ulimit -f`, `RLIMIT_FSIZE`) fail with `EFBIG`
/// instead of killing the process with `SIGXFSZ` (the default action): the store then answers
/// 503 and `/readyz` says why, and nothing is lost. Call it once, first thing in `main`.
pub fn ignore_file_size_signal() {
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to SIG_IGN installs no handler code.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

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
    state.start_usage_flusher();
    let cfg = state.config.clone();
    let router = crate::app(state.clone());
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(cfg.header_timeout_ms))
        .keep_alive(true);
    let graceful = GracefulShutdown::new();
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(cfg.max_connections));
    let peers: Peers = Arc::default();
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
        let Some(per_ip) = PeerSlot::take(&peers, peer.ip(), cfg.max_connections_per_ip) else {
            state.metrics.add(|c| &c.connections_refused, 1);
            tracing::debug!(%peer, limit = cfg.max_connections_per_ip, "per-address connection limit reached; closed");
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
            drop((permit, per_ip));
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
    // What the tenants counted since the flusher's last step.
    state.tenants.flush_usage().await;
    Ok(())
}
