//! An in-memory local cache bounded by bytes (and entries), with O(1) lookups and evictions
//! over the `lru` crate: the edge isolate's only local tier (a Workers isolate has 128 MB for
//! the engine, the model and this cache together), and the hot tier in front of IndexedDB.

use std::cell::RefCell;

use lru::LruCache;
use ternflow_core::ports::LocalCache;

/// Bytes counted per entry besides its key and vector (the map node, the `Vec` header, the
/// expiry): an estimate, so that many short keys cannot hide behind a byte bound.
pub const ENTRY_OVERHEAD: usize = 96;

/// Default byte bound of the edge cache: with the 17.5 MiB engine and the model, well inside a
/// 128 MB isolate.
pub const DEFAULT_MAX_BYTES: usize = 32 << 20;

#[derive(Debug)]
struct Inner {
    map: LruCache<String, (Vec<f32>, u64)>,
    bytes: usize,
}

/// Vectors by key, least recently used evicted first once over `max_bytes` or `max_entries`.
#[derive(Debug)]
pub struct ByteLru {
    inner: RefCell<Inner>,
    max_bytes: usize,
    max_entries: usize,
}

fn cost(key: &str, v: &[f32]) -> usize {
    key.len() + std::mem::size_of_val(v) + ENTRY_OVERHEAD
}

impl ByteLru {
    /// An empty cache of at most `max_bytes` (counted as key + vector + [`ENTRY_OVERHEAD`]) and
    /// `max_entries` entries.
    pub fn new(max_bytes: usize, max_entries: usize) -> Self {
        ByteLru {
            inner: RefCell::new(Inner {
                map: LruCache::unbounded(),
                bytes: 0,
            }),
            max_bytes,
            max_entries: max_entries.max(1),
        }
    }

    /// Entries stored.
    pub fn len(&self) -> usize {
        self.inner.borrow().map.len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes counted for what is stored.
    pub fn bytes(&self) -> usize {
        self.inner.borrow().bytes
    }

    /// The bound in bytes.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    fn get_now(&self, key: &str, now_ms: u64) -> Option<Vec<f32>> {
        let mut i = self.inner.borrow_mut();
        match i.map.get(key) {
            Some((v, exp)) if *exp > now_ms => Some(v.clone()),
            Some(_) => {
                if let Some((k, (v, _))) = i.map.pop_entry(key) {
                    i.bytes -= cost(&k, &v);
                }
                None
            }
            None => None,
        }
    }

    fn put_now(&self, key: &str, vector: &[f32], expires_at: u64) {
        let add = cost(key, vector);
        let mut i = self.inner.borrow_mut();
        if add > self.max_bytes {
            return; // larger than the whole cache: not kept
        }
        if let Some((old, _)) = i.map.put(key.to_owned(), (vector.to_vec(), expires_at)) {
            i.bytes -= cost(key, &old);
        }
        i.bytes += add;
        while i.bytes > self.max_bytes || i.map.len() > self.max_entries {
            match i.map.pop_lru() {
                Some((k, (v, _))) => i.bytes -= cost(&k, &v),
                None => break,
            }
        }
    }

    fn remove_now(&self, keys: &[String]) {
        let mut i = self.inner.borrow_mut();
        for k in keys {
            if let Some((k, (v, _))) = i.map.pop_entry(k.as_str()) {
                i.bytes -= cost(&k, &v);
            }
        }
    }
}

impl Default for ByteLru {
    fn default() -> Self {
        ByteLru::new(DEFAULT_MAX_BYTES, usize::MAX)
    }
}

impl LocalCache for ByteLru {
    async fn get(&self, key: &str, now_ms: u64) -> ternflow_core::Result<Option<Vec<f32>>> {
        Ok(self.get_now(key, now_ms))
    }

    async fn put(
        &self,
        key: &str,
        vector: &[f32],
        expires_at: u64,
        _now_ms: u64,
    ) -> ternflow_core::Result<()> {
        self.put_now(key, vector, expires_at);
        Ok(())
    }

    async fn remove(&self, keys: &[String]) -> ternflow_core::Result<()> {
        self.remove_now(keys);
        Ok(())
    }

    async fn clear(&self) -> ternflow_core::Result<()> {
        let mut i = self.inner.borrow_mut();
        i.map.clear();
        i.bytes = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(n: usize) -> Vec<f32> {
        vec![0.5; n]
    }

    #[test]
    fn bounded_by_bytes_evicting_the_least_recently_used() {
        let one = cost("k0", &v(384));
        let c = ByteLru::new(3 * one, usize::MAX);
        for k in ["k0", "k1", "k2"] {
            c.put_now(k, &v(384), u64::MAX);
        }
        assert_eq!(c.len(), 3);
        assert!(c.get_now("k0", 0).is_some()); // k0 is now the most recent
        c.put_now("k3", &v(384), u64::MAX);
        assert_eq!(c.len(), 3);
        assert!(
            c.get_now("k1", 0).is_none(),
            "the least recently used went first"
        );
        assert!(c.get_now("k0", 0).is_some());
        assert!(c.bytes() <= c.max_bytes());
        assert_eq!(c.bytes(), 3 * one);
    }

    #[test]
    fn replacing_removing_and_expiry_keep_the_byte_count_exact() {
        let c = ByteLru::new(1 << 20, usize::MAX);
        c.put_now("a", &v(10), 100);
        c.put_now("a", &v(20), 100);
        assert_eq!(c.bytes(), cost("a", &v(20)));
        assert!(c.get_now("a", 100).is_none(), "expired at its time");
        assert_eq!(c.bytes(), 0);
        c.put_now("b", &v(5), u64::MAX);
        c.remove_now(&["b".to_owned(), "missing".to_owned()]);
        assert_eq!((c.len(), c.bytes()), (0, 0));
        c.put_now("huge", &v(1 << 20), u64::MAX);
        assert!(c.is_empty(), "an entry larger than the cache is not kept");
    }

    #[test]
    fn also_bounded_by_entries() {
        let c = ByteLru::new(usize::MAX, 2);
        for k in ["a", "b", "c"] {
            c.put_now(k, &v(1), u64::MAX);
        }
        assert_eq!(c.len(), 2);
        assert!(c.get_now("a", 0).is_none());
    }
}
