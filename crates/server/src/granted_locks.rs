//! The single-flight locks this server granted and that were not released yet, of every
//! tenant (keyed `tenant/key`): what `locks_held` counts, what a lock that runs out unreleased
//! is counted as (`lock_leaked`: its holder died holding it), and what an operator lists and
//! breaks (`GET /v1/locks`, `POST /v1/locks/{key}/break`; `ternflow locks`). The store keeps the
//! locks themselves; this is the server's memory of whom it gave which, so a lock granted by
//! another server of a fleet is listed and broken on that server.

use std::collections::HashMap;
use std::sync::Mutex;

/// Most locks remembered (a server's grants are bounded by tokens × `max_locks_per_token`; past
/// this, new grants are not remembered until expired ones are forgotten).
const MAX_REMEMBERED: usize = 1_000_000;

/// One lock this server granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Granted {
    /// The holder's lock token.
    pub token: String,
    /// The holder's writer identity, when it had a token.
    pub sub: Option<String>,
    /// When this token first got the lock (renewals keep it).
    pub granted_at: u64,
    /// When it runs out unless renewed.
    pub expires_at: u64,
}

/// See the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct GrantedLocks {
    locks: Mutex<HashMap<String, Granted>>,
}

impl GrantedLocks {
    /// `token` got (or renewed) the lock on `key` until `expires_at`. Returns how many locks
    /// were found to have leaked: the key's previous holder, if its lock had run out unreleased.
    pub(crate) fn granted(
        &self,
        key: &str,
        token: &str,
        sub: Option<&str>,
        expires_at: u64,
        now: u64,
    ) -> u64 {
        let mut l = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        let mut leaked = 0;
        let granted_at = match l.get(key) {
            Some(g) if g.token == token => g.granted_at,
            Some(g) => {
                leaked = u64::from(g.expires_at <= now);
                now
            }
            None if l.len() >= MAX_REMEMBERED => return 0,
            None => now,
        };
        l.insert(
            key.to_owned(),
            Granted {
                token: token.to_owned(),
                sub: sub.map(str::to_owned),
                granted_at,
                expires_at,
            },
        );
        leaked
    }

    /// `token` released `key`: forgotten (when it is still the holder remembered).
    pub(crate) fn released(&self, key: &str, token: &str) {
        let mut l = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        if l.get(key).is_some_and(|g| g.token == token) {
            l.remove(key);
        }
    }

    /// The live locks at `now`, after forgetting the ones that ran out (returned as leaked).
    pub(crate) fn live(&self, now: u64) -> (u64, u64) {
        let mut l = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        let before = l.len();
        l.retain(|_, g| g.expires_at > now);
        let leaked = (before - l.len()) as u64;
        (l.len() as u64, leaked)
    }

    /// The live locks whose key starts with `prefix` (a tenant's `tenant/`), oldest grant
    /// first, at most `limit`.
    pub(crate) fn list(&self, prefix: &str, now: u64, limit: usize) -> Vec<(String, Granted)> {
        let l = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<(String, Granted)> = l
            .iter()
            .filter(|(k, g)| k.starts_with(prefix) && g.expires_at > now)
            .map(|(k, g)| (k.clone(), g.clone()))
            .collect();
        out.sort_by_key(|(k, g)| (g.granted_at, k.clone()));
        out.truncate(limit);
        out
    }

    /// The remembered holder of `key`, if its lock is live at `now`.
    pub(crate) fn holder(&self, key: &str, now: u64) -> Option<Granted> {
        let l = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        l.get(key).filter(|g| g.expires_at > now).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewals_keep_the_grant_time_and_a_new_holder_after_expiry_counts_a_leak() {
        let g = GrantedLocks::default();
        assert_eq!(g.granted("t/k", "a", Some("w1"), 1_000, 0), 0);
        assert_eq!(g.granted("t/k", "a", Some("w1"), 2_000, 900), 0);
        assert_eq!(g.holder("t/k", 1_500).unwrap().granted_at, 0);
        // "a" never released; its lock ran out at 2 000 and "b" takes the key.
        assert_eq!(g.granted("t/k", "b", None, 5_000, 2_500), 1);
        let h = g.holder("t/k", 2_500).unwrap();
        assert_eq!((h.token.as_str(), h.granted_at, h.sub), ("b", 2_500, None));
        g.released("t/k", "a");
        assert!(
            g.holder("t/k", 2_500).is_some(),
            "a stale token forgets nothing"
        );
        g.released("t/k", "b");
        assert_eq!(g.holder("t/k", 2_500), None);
    }

    #[test]
    fn live_forgets_and_counts_what_ran_out_and_list_is_per_prefix() {
        let g = GrantedLocks::default();
        g.granted("acme/x", "1", None, 100, 0);
        g.granted("acme/y", "2", None, 1_000, 10);
        g.granted("zeta/y", "3", None, 1_000, 5);
        let listed: Vec<String> = g
            .list("acme/", 50, 10)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(listed, ["acme/x", "acme/y"]);
        assert_eq!(g.live(200), (2, 1));
        assert_eq!(g.live(200), (2, 0), "counted once");
        assert_eq!(g.list("acme/", 200, 10).len(), 1);
    }
}
