//! Tokens from the page: where `server.token` is a function, the worker asks the page for a
//! fresh one ([`FromWorker::TokenNeeded`]) before its token expires and on a 401, and applies
//! what the page sends ([`ToWorker::Token`](ternflow_core::messages::ToWorker::Token)).

use std::cell::RefCell;
use std::rc::Rc;

use futures_channel::oneshot;
use ternflow_core::messages::FromWorker;
use ternflow_core::ports::Clock;

use crate::clock::BrowserClock;
use crate::state::STATE;

/// How long a worker waits for the page to answer [`FromWorker::TokenNeeded`], ms.
const TOKEN_WAIT_MS: u64 = 10_000;

thread_local! {
    /// Who waits for the page's next token.
    static TOKEN_WAITERS: RefCell<Vec<oneshot::Sender<String>>> = const { RefCell::new(Vec::new()) };
}

/// A token source that asks the page and waits for its answer (at most [`TOKEN_WAIT_MS`]).
pub(crate) fn page_token_source() -> crate::http::TokenSource {
    Rc::new(|| {
        Box::pin(async {
            let (tx, rx) = oneshot::channel();
            let first = TOKEN_WAITERS.with(|w| {
                let mut w = w.borrow_mut();
                w.push(tx);
                w.len() == 1
            });
            if first {
                crate::page::post(&FromWorker::TokenNeeded {});
            }
            let timer = BrowserClock.sleep(TOKEN_WAIT_MS);
            futures_util::pin_mut!(timer);
            match futures_util::future::select(rx, timer).await {
                futures_util::future::Either::Left((Ok(t), _)) => Some(t),
                _ => None,
            }
        })
    })
}

/// Applies a fresh token from the page: every clone of the current client uses it from the next
/// request (leases, in-flight jobs and the queue loop are untouched), and whoever waited for it
/// gets it.
pub(crate) fn apply_token(token: &str) {
    if let Some(p) = STATE.with(|s| s.borrow().pipeline.clone()) {
        p.adapters.source.set_token(token);
    }
    for w in TOKEN_WAITERS.with(|w| std::mem::take(&mut *w.borrow_mut())) {
        let _ = w.send(token.to_owned());
    }
}
