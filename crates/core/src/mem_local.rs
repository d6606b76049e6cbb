//! The in-memory local cache: the first cache level where there is no IndexedDB (the WASI
//! worker, edge isolates) and in native tests. Entries expire at their deadline and the least
//! recently used entry goes beyond the size bound (the `lru` crate: O(1) per operation).

use std::cell::{Cell, RefCell};
use std::num::NonZeroUsize;
use std::rc::Rc;

use lru::LruCache;

use crate::error::{Error, Result};
use crate::ports::LocalCache;

/// A vector and its expiry (Unix ms).
type Entry = (Vec<f32>, u64);

/// A local cache in memory, with expiry and an entry bound. Cloning shares it.
#[derive(Debug, Clone)]
pub struct MemLocal {
    inner: Rc<RefCell<LruCache<String, Entry>>>,
    /// When set, every call fails (tests: a broken store).
    pub broken: Rc<Cell<bool>>,
}

impl MemLocal {
    /// An empty cache holding at most `max_entries` (at least 1).
    pub fn new(max_entries: usize) -> Self {
        let cap = NonZeroUsize::new(max_entries.max(1)).unwrap_or(NonZeroUsize::MIN);
        MemLocal {
            inner: Rc::new(RefCell::new(LruCache::new(cap))),
            broken: Rc::default(),
        }
    }

    /// Entries stored (expired ones included until they are read or evicted).
    pub fn len(&self) -> usize {
        self.inner.borrow().len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` is stored (expired or not), without touching its recency.
    pub fn contains(&self, key: &str) -> bool {
        self.inner.borrow().contains(key)
    }

    fn check(&self) -> Result<()> {
        if self.broken.get() {
            Err(Error::LocalCache("broken".into()))
        } else {
            Ok(())
        }
    }
}

impl LocalCache for MemLocal {
    async fn get(&self, key: &str, now_ms: u64) -> Result<Option<Vec<f32>>> {
        self.check()?;
        let mut m = self.inner.borrow_mut();
        match m.get(key) {
            Some((v, exp)) if *exp > now_ms => Ok(Some(v.clone())),
            Some(_) => {
                m.pop(key);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    async fn put(&self, key: &str, vector: &[f32], expires_at: u64, _now_ms: u64) -> Result<()> {
        self.check()?;
        self.inner
            .borrow_mut()
            .put(key.to_owned(), (vector.to_vec(), expires_at));
        Ok(())
    }

    async fn remove(&self, keys: &[String]) -> Result<()> {
        self.check()?;
        let mut m = self.inner.borrow_mut();
        for k in keys {
            m.pop(k);
        }
        Ok(())
    }

    async fn clear(&self) -> Result<()> {
        self.check()?;
        self.inner.borrow_mut().clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::FakeClock;

    #[test]
    fn expires_and_evicts_the_least_recently_used() {
        let c = MemLocal::new(2);
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
            c.remove(&["c".to_owned()]).await.unwrap();
            assert!(c.is_empty());
            c.broken.set(true);
            assert!(c.get("x", 0).await.is_err());
        });
    }
}
