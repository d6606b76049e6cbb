//! The local cache a worker gets: IndexedDB where the global scope has it (browsers, Web
//! Workers) behind a small in-memory LRU of hot entries (a repeated text is answered without an
//! IndexedDB transaction; IndexedDB keeps everything across reloads), otherwise a bounded
//! in-memory LRU alone (edge isolates such as Cloudflare Workers, Node).

use ternflow_core::cache::mem_local::MemLocal;
use ternflow_core::ports::LocalCache;
use wasm_bindgen::JsValue;

use crate::error::WorkerError;
use crate::idb::IdbCache;

/// Entries kept in memory in front of IndexedDB.
pub const HOT_ENTRIES: usize = 2_048;
/// Bytes kept in memory in front of IndexedDB.
pub const HOT_BYTES: usize = 8 << 20;

/// IndexedDB, or memory where there is no IndexedDB.
#[derive(Debug)]
pub enum AnyLocal {
    /// IndexedDB through rexie, behind an in-memory LRU of hot entries.
    Idb(IdbCache, MemLocal),
    /// In memory, for runtimes without IndexedDB (lost when the isolate ends).
    Memory(MemLocal),
}

impl AnyLocal {
    /// IndexedDB database `name` when the global scope has `indexedDB` and it opens, else
    /// memory; at most `max_entries` either way, and in memory at most `max_bytes` (see
    /// [`MemLocal`]). IndexedDB that refuses the open (private browsing, a blocked or broken
    /// database, storage the browser will not give) is a memory-only cache, never a failure:
    /// [`AnyLocal::kind`] says `memory`, the gauge `local_cache_memory_only` is 1 in `stats()`.
    /// A database evicted between visits opens empty: misses, not errors.
    ///
    /// # Errors
    /// None today (the `Result` is kept for the callers' `?`).
    pub async fn open(name: &str, max_entries: u32, max_bytes: usize) -> Result<Self, WorkerError> {
        let has_idb = js_sys::Reflect::get(&js_sys::global(), &JsValue::from_str("indexedDB"))
            .is_ok_and(|v| !v.is_undefined() && !v.is_null());
        let memory = || AnyLocal::Memory(MemLocal::new(max_bytes, max_entries as usize));
        if !has_idb {
            return Ok(memory());
        }
        match IdbCache::open(name, max_entries).await {
            Ok(db) => {
                let hot = MemLocal::new(
                    HOT_BYTES.min(max_bytes),
                    HOT_ENTRIES.min(max_entries as usize),
                );
                Ok(AnyLocal::Idb(db, hot))
            }
            Err(e) => {
                web_sys::console::warn_1(&JsValue::from_str(&format!(
                    "ternflow: IndexedDB refused to open ({e}); the local cache is in memory only"
                )));
                Ok(memory())
            }
        }
    }

    /// `"indexeddb"` or `"memory"`.
    pub fn kind(&self) -> &'static str {
        match self {
            AnyLocal::Idb(..) => "indexeddb",
            AnyLocal::Memory(_) => "memory",
        }
    }

    /// The in-memory tier (the hot entries in front of IndexedDB, or the whole cache).
    pub fn memory(&self) -> &MemLocal {
        match self {
            AnyLocal::Idb(_, m) | AnyLocal::Memory(m) => m,
        }
    }

    /// The IndexedDB cache, if that is what this is.
    pub fn as_idb(&self) -> Option<&IdbCache> {
        match self {
            AnyLocal::Idb(c, _) => Some(c),
            AnyLocal::Memory(_) => None,
        }
    }
}

impl LocalCache for AnyLocal {
    async fn get(&self, key: &str, now_ms: u64) -> ternflow_core::Result<Option<Vec<f32>>> {
        match self {
            AnyLocal::Idb(c, hot) => {
                if let Some(v) = hot.get(key, now_ms).await? {
                    return Ok(Some(v));
                }
                match c.get_with_expiry(key, now_ms).await? {
                    Some((v, exp)) => {
                        hot.put(key, &v, exp, now_ms).await?;
                        Ok(Some(v))
                    }
                    None => Ok(None),
                }
            }
            AnyLocal::Memory(c) => c.get(key, now_ms).await,
        }
    }

    async fn put(
        &self,
        key: &str,
        vector: &[f32],
        expires_at: u64,
        now_ms: u64,
    ) -> ternflow_core::Result<()> {
        match self {
            AnyLocal::Idb(c, hot) => {
                hot.put(key, vector, expires_at, now_ms).await?;
                c.put(key, vector, expires_at, now_ms).await
            }
            AnyLocal::Memory(c) => c.put(key, vector, expires_at, now_ms).await,
        }
    }

    async fn remove(&self, keys: &[String]) -> ternflow_core::Result<()> {
        match self {
            AnyLocal::Idb(c, hot) => {
                hot.remove(keys).await?;
                c.remove(keys).await
            }
            AnyLocal::Memory(c) => c.remove(keys).await,
        }
    }

    async fn clear(&self) -> ternflow_core::Result<()> {
        match self {
            AnyLocal::Idb(c, hot) => {
                hot.clear().await?;
                c.clear().await
            }
            AnyLocal::Memory(c) => c.clear().await,
        }
    }
}
