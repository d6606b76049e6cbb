//! The in-memory local cache, the one every runtime uses: the whole local level where there is no
//! IndexedDB (edge isolates, Node, the WASI worker, native tests) and the hot tier in front of
//! IndexedDB in the browser. Bounded by bytes and by entries: a Workers isolate has 128 MB for
//! the engine, the model and this cache together, so a count alone (384-dimensional vectors or
//! 1 024-dimensional ones) is no bound. Entries expire at their deadline; the least recently used
//! goes first beyond either bound (the `lru` crate: O(1) per operation).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use lru::LruCache;

use crate::error::{Error, Result};
use crate::ports::LocalCache;

/// Bytes counted per entry besides its key and vector (the map node, the `Vec` header, the
/// expiry): an estimate, so that many short keys cannot hide behind a byte bound.
pub const ENTRY_OVERHEAD: usize = 96;

/// Default byte bound: with the 17.5 MiB engine and the model, well inside a 128 MB isolate.
pub const DEFAULT_MAX_BYTES: usize = 32 << 20;

#[derive(Debug)]
struct Inner {
    /// Vectors and their expiry (Unix ms).
    map: LruCache<String, (Vec<f32>, u64)>,
    bytes: usize,
}

/// Vectors by key, least recently used evicted first once over `max_bytes` or `max_entries`.
/// Cloning shares it.
#[derive(Debug, Clone)]
pub struct MemLocal {
    inner: Rc<RefCell<Inner>>,
    max_bytes: usize,
    max_entries: usize,
    /// When set, every call fails (tests: a broken store).
    pub broken: Rc<Cell<bool>>,
}

fn cost(key: &str, v: &[f32]) -> usize {
    key.len() + std::mem::size_of_val(v) + ENTRY_OVERHEAD
}

impl Default for MemLocal {
    fn default() -> Self {
        MemLocal::new(DEFAULT_MAX_BYTES, usize::MAX)
    }
}

impl MemLocal {
    /// An empty cache of at most `max_bytes` (counted as key + vector + [`ENTRY_OVERHEAD`]) and
    /// `max_entries` (at least 1) entries.
    pub fn new(max_bytes: usize, max_entries: usize) -> Self {
        MemLocal {
            inner: Rc::new(RefCell::new(Inner {
                map: LruCache::unbounded(),
                bytes: 0,
            })),
            max_bytes,
            max_entries: max_entries.max(1),
            broken: Rc::default(),
        }
    }

    /// Entries stored (expired ones included until they are read or evicted).
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

    /// Whether `key` is stored (expired or not), without touching its recency.
    pub fn contains(&self, key: &str) -> bool {
        self.inner.borrow().map.contains(key)
    }

    fn check(&self) -> Result<()> {
        if self.broken.get() {
            Err(Error::LocalCache("broken".into()))
        } else {
            Ok(())
        }
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
}

impl LocalCache for MemLocal {
    async fn get(&self, key: &str, now_ms: u64) -> Result<Option<Vec<f32>>> {
        self.check()?;
        Ok(self.get_now(key, now_ms))
    }

    async fn put(&self, key: &str, vector: &[f32], expires_at: u64, _now_ms: u64) -> Result<()> {
        self.check()?;
        self.put_now(key, vector, expires_at);
        Ok(())
    }

    async fn remove(&self, keys: &[String]) -> Result<()> {
        self.check()?;
        let mut i = self.inner.borrow_mut();
        for k in keys {
            if let Some((k, (v, _))) = i.map.pop_entry(k.as_str()) {
                i.bytes -= cost(&k, &v);
            }
        }
        Ok(())
    }

    async fn clear(&self) -> Result<()> {
        self.check()?;
        let mut i = self.inner.borrow_mut();
        i.map.clear();
        i.bytes = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::FakeClock;

    fn v(n: usize) -> Vec<f32> {
        vec![0.5; n]
    }

    #[test]
    fn bounded_by_bytes_evicting_the_least_recently_used() {
        let one = cost("k0", &v(384));
        let c = MemLocal::new(3 * one, usize::MAX);
        for k in ["k0", "k1", "k2"] {
            c.put_now(k, &v(384), u64::MAX);
        }
        assert_eq!(c.len(), 3);
        assert!(c.get_now("k0", 0).is_some()); // k0 is now the most recent
        c.put_now("k3", &v(384), u64::MAX);
        assert_eq!(c.len(), 3);
        assert!(!c.contains("k1"), "the least recently used went first");
        assert!(c.contains("k0"));
        assert!(c.bytes() <= c.max_bytes());
        assert_eq!(c.bytes(), 3 * one);
    }

    #[test]
    fn also_bounded_by_entries_with_expiry_and_removal() {
        let c = MemLocal::new(usize::MAX, 2);
        FakeClock::default().run(async {
            c.put("a", &[1.0], 100, 0).await.unwrap();
            c.put("b", &[2.0], 100, 0).await.unwrap();
            assert_eq!(c.get("a", 10).await.unwrap(), Some(vec![1.0])); // a is now recent
            c.put("c", &[3.0], 100, 0).await.unwrap();
            assert!(!c.contains("b"), "the least recently used went");
            assert!(c.contains("a") && c.contains("c"));
            assert_eq!(
                c.get("a", 100).await.unwrap(),
                None,
                "expired at its deadline"
            );
            assert!(!c.contains("a"), "and dropped");
            c.remove(&["c".to_owned(), "missing".to_owned()])
                .await
                .unwrap();
            assert!(c.is_empty());
            assert_eq!(c.bytes(), 0);
            c.broken.set(true);
            assert!(c.get("x", 0).await.is_err());
        });
    }

    #[test]
    fn replacing_clearing_and_oversized_entries_keep_the_byte_count_exact() {
        let c = MemLocal::new(1 << 20, usize::MAX);
        c.put_now("a", &v(10), u64::MAX);
        c.put_now("a", &v(20), u64::MAX);
        assert_eq!(c.bytes(), cost("a", &v(20)));
        c.put_now("huge", &v(1 << 20), u64::MAX);
        assert!(
            !c.contains("huge"),
            "an entry larger than the cache is not kept"
        );
        FakeClock::default().run(async { c.clear().await.unwrap() });
        assert_eq!((c.len(), c.bytes()), (0, 0));
    }
}
