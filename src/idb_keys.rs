//! Which keys the IndexedDB cache may hold, kept in memory, so that the read of a key it cannot
//! hold answers "miss" without a request to IndexedDB.
//!
//! At 0 % hits every claimed job used to cost an IndexedDB `get` (the browser's IndexedDB thread
//! pool, its main thread and the worker's side of each request) only to learn that the text was
//! never cached: an ablation that skipped those reads saved 0.07–0.16 ms of CPU per job
//! (docs/worker.md). The filter is loaded once per handle, in the background, from the store's
//! keys (`getAllKeys`), and kept up to date by this handle's writes and deletions and by the writes
//! of other handles on the same database (other workers, other tabs), which each announce the keys
//! they stored on a `BroadcastChannel` named after the database.
//!
//! It is an optimisation, never a source of truth. It can say "may hold" for a key that is not
//! there (deleted elsewhere, or a collision of the 64-bit hashes it keeps): the read then goes to
//! IndexedDB as before. It can say "cannot hold" for a key another context stored a moment ago
//! whose announcement has not arrived yet: that read is a miss, and the job embeds the text (or
//! finds it in the remote cache) as it would have had the record not been written; the vector
//! is the same. Until the keys are loaded, if loading them failed, or once it holds more than
//! twice the store's bound (keys other handles announced and then evicted never leave it), every
//! read goes to IndexedDB.
// Only `idb` (wasm32) uses it; it has no browser dependency, so its tests run natively too.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use std::cell::RefCell;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};

/// The keys, as 64-bit hashes (≈ 16 bytes per key in memory instead of the key's ~50).
#[derive(Debug)]
pub(crate) struct KeyFilter {
    state: RefCell<State>,
    /// The most keys kept. This handle's own evictions remove keys, but other handles' do not
    /// reach it, so keys they announced and later evicted stay "may hold"; past this many the
    /// filter turns itself off (every read to IndexedDB, as before it) rather than grow.
    cap: usize,
}

#[derive(Debug)]
enum State {
    /// The store's keys are being read; what this handle stored meanwhile.
    Loading(HashSet<u64>),
    /// Every key the store may hold.
    Ready(HashSet<u64>),
    /// The keys could not be read: every read goes to IndexedDB.
    Off,
}

fn hash(key: &str) -> u64 {
    // SipHash with fixed keys: the same key gives the same hash in every handle.
    let mut h = std::hash::DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

impl KeyFilter {
    /// A filter whose keys are still to be loaded (every key "may" be held until then), for a
    /// store bounded at `max_entries`: it keeps at most twice that many keys (plus 1 024).
    pub(crate) fn loading(max_entries: u32) -> Self {
        Self {
            state: RefCell::new(State::Loading(HashSet::new())),
            cap: (max_entries as usize)
                .saturating_mul(2)
                .saturating_add(1024),
        }
    }

    /// Whether the store may hold `key`: false only when the keys are known and `key` is not
    /// among them.
    pub(crate) fn may_hold(&self, key: &str) -> bool {
        match &*self.state.borrow() {
            State::Ready(keys) => keys.contains(&hash(key)),
            State::Loading(_) | State::Off => true,
        }
    }

    /// Whether the keys are loaded (reads of unknown keys now skip IndexedDB).
    pub(crate) fn is_ready(&self) -> bool {
        matches!(&*self.state.borrow(), State::Ready(_))
    }

    /// `key` was stored (here or elsewhere).
    pub(crate) fn add(&self, key: &str) {
        let mut state = self.state.borrow_mut();
        if let State::Loading(keys) | State::Ready(keys) = &mut *state {
            keys.insert(hash(key));
            if keys.len() > self.cap {
                *state = State::Off;
            }
        }
    }

    /// `key` was deleted by this handle.
    pub(crate) fn remove(&self, key: &str) {
        // While loading, the keys read may still list it (their snapshot can predate the
        // deletion): it then stays "may hold", which only costs a read.
        if let State::Loading(keys) | State::Ready(keys) = &mut *self.state.borrow_mut() {
            keys.remove(&hash(key));
        }
    }

    /// Every record was deleted by this handle.
    pub(crate) fn clear(&self) {
        if let State::Loading(keys) | State::Ready(keys) = &mut *self.state.borrow_mut() {
            keys.clear();
        }
    }

    /// The store's keys were read: with what this handle stored meanwhile, they are every key
    /// it may hold.
    pub(crate) fn loaded(&self, stored: impl IntoIterator<Item = String>) {
        let mut state = self.state.borrow_mut();
        if let State::Loading(added) = &mut *state {
            let mut keys = std::mem::take(added);
            keys.extend(stored.into_iter().map(|k| hash(&k)));
            *state = if keys.len() > self.cap {
                State::Off
            } else {
                State::Ready(keys)
            };
        }
    }

    /// The keys could not be read.
    pub(crate) fn failed(&self) {
        *self.state.borrow_mut() = State::Off;
    }
}

#[cfg(test)]
mod tests {
    use super::KeyFilter;

    #[test]
    fn every_key_may_be_held_until_the_keys_are_loaded() {
        let f = KeyFilter::loading(100);
        assert!(f.may_hold("m:a") && !f.is_ready());
        f.add("m:b");
        f.loaded(["m:c".to_owned()]);
        assert!(f.is_ready());
        assert!(f.may_hold("m:b"), "stored while loading");
        assert!(f.may_hold("m:c"), "loaded");
        assert!(!f.may_hold("m:a"), "neither");
    }

    #[test]
    fn writes_and_deletions_keep_it_true() {
        let f = KeyFilter::loading(100);
        f.loaded(Vec::new());
        f.add("m:a");
        f.add("m:b");
        f.remove("m:a");
        assert!(!f.may_hold("m:a") && f.may_hold("m:b"));
        f.clear();
        assert!(!f.may_hold("m:b"));
    }

    #[test]
    fn past_twice_the_store_bound_it_turns_itself_off_rather_than_grow() {
        let f = KeyFilter::loading(0);
        f.loaded(Vec::new());
        for i in 0..1024 {
            f.add(&format!("m:{i}"));
        }
        assert!(f.is_ready() && !f.may_hold("m:x"));
        f.add("m:one-too-many");
        assert!(
            !f.is_ready() && f.may_hold("m:x"),
            "off: every read to IndexedDB"
        );
    }

    #[test]
    fn a_filter_that_failed_to_load_sends_every_read_to_indexeddb() {
        let f = KeyFilter::loading(100);
        f.failed();
        assert!(f.may_hold("m:a") && !f.is_ready());
        f.loaded(Vec::new());
        assert!(f.may_hold("m:a"), "a late load does not switch it back on");
    }
}
