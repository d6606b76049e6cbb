//! The IndexedDB-backed local vector cache (`rexie`), implementing
//! [`LocalCache`](ternflow_core::ports::LocalCache).
//!
//! Records are `{ key, vector, expires_at, used_at }` in one object store keyed by `key`, with an
//! index on `used_at` for least-recently-used eviction. Every method opens and finishes its own
//! transaction: a transaction is never held across any other `.await` (IndexedDB auto-commits an
//! idle transaction, and a network round trip would do exactly that).

use std::cell::Cell;

use rexie::{Index, ObjectStore, Rexie, TransactionMode};
use ternflow_core::ports::LocalCache;
use wasm_bindgen::JsValue;

const STORE: &str = "vectors";
const BY_USE: &str = "used_at";
/// Version 3: vectors stored as `Float32Array`. A record of an older layout reads as a local
/// cache error (a miss) and is overwritten by the next put.
const DB_VERSION: u32 = 3;
/// A hit rewrites `used_at` only when it is older than this, so reads stay cheap.
const TOUCH_AFTER_MS: f64 = 60_000.0;

/// Errors of the IndexedDB cache.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdbError {
    /// IndexedDB refused or failed a request.
    #[error("indexeddb: {0}")]
    Rexie(#[from] rexie::Error),
    /// A stored record did not have the expected shape.
    #[error("indexeddb record: {0}")]
    Decode(String),
}

impl From<IdbError> for ternflow_core::Error {
    fn from(e: IdbError) -> Self {
        ternflow_core::Error::LocalCache(e.to_string())
    }
}

/// One cached vector.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The cache key (model id + text hash).
    pub key: String,
    /// The embedding.
    pub vector: Vec<f32>,
    /// Expiry, Unix ms.
    pub expires_at: f64,
    /// Last read or write, Unix ms (eviction order).
    pub used_at: f64,
}

/// A handle on the IndexedDB database holding cached vectors.
#[derive(Debug)]
pub struct IdbCache {
    db: Rexie,
    max_entries: u32,
    evicted: Cell<u64>,
    /// An upper bound on the records stored (a put counts as one more even when it replaces):
    /// the exact count, one more IndexedDB request per put, is only taken near the bound.
    upper_bound: Cell<Option<u32>>,
    last_expiry: Cell<Option<u64>>,
}

impl IdbCache {
    /// Opens (creating or upgrading if needed) the database `name`, keeping at most
    /// `max_entries` records.
    ///
    /// # Errors
    /// Fails when IndexedDB is unavailable or refuses the open.
    pub async fn open(name: &str, max_entries: u32) -> Result<Self, IdbError> {
        let db = Rexie::builder(name)
            .version(DB_VERSION)
            .add_object_store(
                ObjectStore::new(STORE)
                    .key_path("key")
                    .add_index(Index::new(BY_USE, "used_at")),
            )
            .build()
            .await?;
        Ok(Self {
            db,
            max_entries: max_entries.max(1),
            evicted: Cell::new(0),
            upper_bound: Cell::new(None),
            last_expiry: Cell::new(None),
        })
    }

    /// Deletes the database `name` (tests use it to start clean).
    ///
    /// # Errors
    /// Fails when IndexedDB refuses the deletion.
    pub async fn delete(name: &str) -> Result<(), IdbError> {
        Rexie::builder(name).delete().await?;
        Ok(())
    }

    /// Stores `record`, replacing any record with the same key, then evicts the least recently
    /// used records beyond the bound — all in one transaction.
    ///
    /// # Errors
    /// Fails when the write transaction fails.
    pub async fn put_record(&self, record: &Record) -> Result<(), IdbError> {
        let value = encode(record);
        let tx = self.db.transaction(&[STORE], TransactionMode::ReadWrite)?;
        let store = tx.store(STORE)?;
        store.put(&value, None).await?;
        let bound = self.upper_bound.get().map(|n| n.saturating_add(1));
        let n = match bound {
            Some(n) if n <= self.max_entries => n,
            _ => store.count(None).await?,
        };
        let mut kept = n;
        if n > self.max_entries {
            let excess = n - self.max_entries;
            let oldest = store
                .index(BY_USE)?
                .get_all_keys(None, Some(excess))
                .await?;
            for k in oldest {
                store.delete(k).await?;
            }
            self.evicted.set(self.evicted.get() + u64::from(excess));
            kept = self.max_entries;
        }
        tx.done().await?;
        self.upper_bound.set(Some(kept));
        Ok(())
    }

    /// Reads the record stored under `key`, if any (expired or not).
    ///
    /// # Errors
    /// Fails when the read fails or the stored value is not a [`Record`].
    pub async fn get_record(&self, key: &str) -> Result<Option<Record>, IdbError> {
        let tx = self.db.transaction(&[STORE], TransactionMode::ReadOnly)?;
        let value = tx.store(STORE)?.get(JsValue::from_str(key)).await?;
        // A read-only transaction with nothing left to do completes by itself: waiting for its
        // `complete` event would only add a round trip to every hit.
        drop(tx);
        match value {
            Some(v) if v.is_object() => Ok(Some(decode(&v)?)),
            _ => Ok(None),
        }
    }

    /// Records stored.
    ///
    /// # Errors
    /// Fails when the count request fails.
    pub async fn count(&self) -> Result<u32, IdbError> {
        let tx = self.db.transaction(&[STORE], TransactionMode::ReadOnly)?;
        let n = tx.store(STORE)?.count(None).await?;
        tx.done().await?;
        Ok(n)
    }

    /// Records evicted by the size bound since this handle opened.
    pub fn evicted(&self) -> u64 {
        self.evicted.get()
    }

    async fn delete_keys(&self, keys: &[String]) -> Result<(), IdbError> {
        let tx = self.db.transaction(&[STORE], TransactionMode::ReadWrite)?;
        let store = tx.store(STORE)?;
        for k in keys {
            store.delete(JsValue::from_str(k)).await?;
        }
        tx.done().await?;
        Ok(())
    }

    /// Closes the database connection.
    pub fn close(self) {
        self.db.close();
    }
}

/// A record as a plain JS object whose vector is a `Float32Array` (stored by structured clone as
/// one binary blob: far cheaper to write and read back than an array of numbers).
fn encode(r: &Record) -> JsValue {
    let o = js_sys::Object::new();
    let set = |k: &str, v: &JsValue| {
        // Setting a property on a fresh plain object cannot fail.
        let _ = js_sys::Reflect::set(&o, &JsValue::from_str(k), v);
    };
    set("key", &JsValue::from_str(&r.key));
    set(
        "vector",
        &js_sys::Float32Array::from(r.vector.as_slice()).into(),
    );
    set("expires_at", &JsValue::from_f64(r.expires_at));
    set("used_at", &JsValue::from_f64(r.used_at));
    o.into()
}

fn decode(v: &JsValue) -> Result<Record, IdbError> {
    use wasm_bindgen::JsCast;
    let get =
        |k: &str| js_sys::Reflect::get(v, &JsValue::from_str(k)).unwrap_or(JsValue::UNDEFINED);
    let bad = |what: &str| IdbError::Decode(what.to_owned());
    let vector = get("vector")
        .dyn_into::<js_sys::Float32Array>()
        .map_err(|_| bad("vector is not a Float32Array"))?
        .to_vec();
    Ok(Record {
        key: get("key")
            .as_string()
            .ok_or_else(|| bad("key is not a string"))?,
        vector,
        expires_at: get("expires_at")
            .as_f64()
            .ok_or_else(|| bad("expires_at"))?,
        used_at: get("used_at").as_f64().ok_or_else(|| bad("used_at"))?,
    })
}

impl IdbCache {
    /// The expiry (Unix ms) of the record the last successful [`LocalCache::get`] returned, so a
    /// memory layer in front can keep the same deadline.
    pub fn last_expiry(&self) -> Option<u64> {
        self.last_expiry.get()
    }
}

impl LocalCache for IdbCache {
    async fn get(&self, key: &str, now_ms: u64) -> ternflow_core::Result<Option<Vec<f32>>> {
        let now = now_ms as f64;
        self.last_expiry.set(None);
        let Some(mut rec) = self.get_record(key).await? else {
            return Ok(None);
        };
        if rec.expires_at <= now {
            self.delete_keys(&[key.to_owned()]).await?;
            return Ok(None);
        }
        if now - rec.used_at > TOUCH_AFTER_MS {
            rec.used_at = now;
            self.put_record(&rec).await?;
        }
        self.last_expiry.set(Some(rec.expires_at as u64));
        Ok(Some(rec.vector))
    }

    async fn put(
        &self,
        key: &str,
        vector: &[f32],
        expires_at: u64,
        now_ms: u64,
    ) -> ternflow_core::Result<()> {
        let rec = Record {
            key: key.to_owned(),
            vector: vector.to_vec(),
            expires_at: expires_at as f64,
            used_at: now_ms as f64,
        };
        Ok(self.put_record(&rec).await?)
    }

    async fn remove(&self, keys: &[String]) -> ternflow_core::Result<()> {
        Ok(self.delete_keys(keys).await?)
    }
}
