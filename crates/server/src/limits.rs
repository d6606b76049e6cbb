//! Per-token limits: a request rate (token bucket, `governor`) and open SSE streams. Applied
//! after authentication, keyed by the token's digest, so unknown tokens (401) never add keys.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::config::Config;
use crate::error::{Error, Result};

/// Claim buckets kept before they are started afresh.
const MAX_CLAIM_BUCKETS: usize = 100_000;

/// Who is calling: the token's digest and tenant, put on the request by the auth gate.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub(crate) key: [u8; 32],
    pub(crate) tenant: Arc<str>,
    /// A signed token's own claim limit, per minute.
    pub(crate) claims_per_min: Option<u32>,
    /// The token's role.
    pub(crate) role: crate::auth::Role,
    /// Who writes with this token, for result provenance and verification
    /// ([`crate::integrity::writer_id`]).
    pub(crate) sub: Arc<str>,
}

impl Caller {
    /// The caller as the writer of results, under the worker name it gives.
    pub(crate) fn writer(&self, worker: Option<&str>) -> crate::integrity::Writer {
        crate::integrity::Writer {
            tenant: self.tenant.clone(),
            sub: self.sub.clone(),
            worker: crate::integrity::worker_name(worker),
        }
    }
}

/// See the [module docs](self).
pub(crate) struct Limits {
    rate: DefaultKeyedRateLimiter<[u8; 32]>,
    max_streams: usize,
    streams: Mutex<HashMap<[u8; 32], usize>>,
    /// Per-token claim buckets of tokens that carry `claims_per_min` (each its own quota).
    claims: Mutex<HashMap<[u8; 32], DefaultDirectRateLimiter>>,
}

impl std::fmt::Debug for Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limits")
            .field("max_streams", &self.max_streams)
            .finish_non_exhaustive()
    }
}

impl Limits {
    pub(crate) fn new(cfg: &Config) -> Self {
        let per_s = NonZeroU32::new(cfg.rate_per_token.max(1)).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(cfg.rate_burst.max(1)).unwrap_or(NonZeroU32::MIN);
        Limits {
            rate: RateLimiter::keyed(Quota::per_second(per_s).allow_burst(burst)),
            max_streams: cfg.max_streams_per_token,
            streams: Mutex::new(HashMap::new()),
            claims: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one request from the caller's bucket.
    ///
    /// # Errors
    /// 429 with `Retry-After` (whole seconds, at least 1) when the bucket is empty.
    pub(crate) fn check_rate(&self, caller: &Caller) -> Result<()> {
        match self.rate.check_key(&caller.key) {
            Ok(()) => Ok(()),
            Err(not_until) => {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                Err(Error::TooManyRequests {
                    message: "this token is over its request rate".to_owned(),
                    retry_after_s: wait.as_secs_f64().ceil().max(1.0) as u64,
                })
            }
        }
    }

    /// Counts an SSE stream for the caller until the guard drops.
    ///
    /// # Errors
    /// 429 when the token already has `max_streams_per_token` open.
    pub(crate) fn open_stream(self: &Arc<Self>, caller: &Caller) -> Result<StreamGuard> {
        let mut s = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        let n = s.entry(caller.key).or_insert(0);
        if *n >= self.max_streams {
            return Err(Error::TooManyRequests {
                message: format!(
                    "this token already has {} event streams open",
                    self.max_streams
                ),
                retry_after_s: 5,
            });
        }
        *n += 1;
        Ok(StreamGuard {
            limits: self.clone(),
            key: caller.key,
        })
    }

    /// Takes one claim from the caller's own claim bucket, when its token sets one.
    ///
    /// # Errors
    /// 429 with `Retry-After` beyond `claims_per_min`.
    pub(crate) fn check_claim(&self, caller: &Caller) -> Result<()> {
        let Some(per_min) = caller.claims_per_min.and_then(NonZeroU32::new) else {
            return Ok(());
        };
        let mut m = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        let bucket = m
            .entry(caller.key)
            .or_insert_with(|| RateLimiter::direct(Quota::per_minute(per_min)));
        bucket.check().map_err(|not_until| Error::TooManyRequests {
            message: format!("this token may claim {per_min} times a minute"),
            retry_after_s: not_until
                .wait_time_from(DefaultClock::default().now())
                .as_secs_f64()
                .ceil()
                .max(1.0) as u64,
        })
    }

    /// Forgets buckets that are full again (called by the sweeper), so the tables stay small.
    pub(crate) fn tidy(&self) {
        self.rate.retain_recent();
        self.rate.shrink_to_fit();
        // Signed tokens live minutes: past the bound, start the buckets afresh (a full bucket
        // for a token that had used some is the only leniency).
        let mut m = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() > MAX_CLAIM_BUCKETS {
            m.clear();
        }
    }
}

/// An open SSE stream, counted against its token.
#[derive(Debug)]
pub(crate) struct StreamGuard {
    limits: Arc<Limits>,
    key: [u8; 32],
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut s = self
            .limits
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = s.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                s.remove(&self.key);
            }
        }
    }
}
