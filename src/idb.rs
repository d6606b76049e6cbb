//! The IndexedDB-backed local vector cache (`rexie`), implementing
//! [`LocalCache`](ternflow_core::ports::LocalCache).
//!
//! Records are `{ key, vector, expires_at, used_at }` in one object store keyed by `key`, with an
//! index on `used_at` for least-recently-used eviction. Every method opens and finishes its own
//! transaction: a transaction is never held across any other `.await` (IndexedDB auto-commits an
//! idle transaction, and a network round trip would do exactly that).
//!
//! Writes are grouped: a `put` joins a queue, and one task writes everything queued in one
//! transaction (then whatever queued meanwhile, in the next one), so jobs finishing together pay
//! one IndexedDB transaction instead of one each. Each `put` still resolves only once its record
//! is committed. Reads are grouped the same way: the gets of a claimed batch (or of one
//! `embedMany`) start together, join one read queue, and one read-only transaction answers them
//! all. A read of a key the store cannot hold (the handle keeps the store's keys in memory:
//! [`crate::idb_keys`]) is a miss without a request.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use futures_channel::oneshot;

use rexie::{Index, ObjectStore, Rexie, TransactionMode};
use ternflow_core::ports::LocalCache;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsValue;

use crate::idb_keys::KeyFilter;

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
    /// The grouped write carrying this record failed.
    #[error("indexeddb write: {0}")]
    Write(String),
    /// The grouped read carrying this key failed.
    #[error("indexeddb read: {0}")]
    Read(String),
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
    inner: Rc<Inner>,
}

thread_local! {
    static SKIPPED_IN_THREAD: Cell<u64> = const { Cell::new(0) };
}

type WriteReply = oneshot::Sender<Result<(), String>>;
type ReadReply = oneshot::Sender<Result<Option<JsValue>, String>>;

struct Inner {
    db: Rexie,
    max_entries: u32,
    evicted: Cell<u64>,
    /// An upper bound on the records stored (a put counts as one more even when it replaces):
    /// the exact count, one more IndexedDB request per put, is only taken near the bound.
    upper_bound: Cell<Option<u32>>,
    /// Records waiting for the writer task, each with whom to tell.
    queued: RefCell<Vec<(Record, WriteReply)>>,
    /// Whether the writer task runs.
    writing: Cell<bool>,
    /// Keys waiting for the reader task, each with whom to tell.
    reads: RefCell<Vec<(String, ReadReply)>>,
    /// Whether the reader task runs.
    reading: Cell<bool>,
    /// The keys the store may hold.
    keys: Rc<KeyFilter>,
    /// Reads answered "miss" by `keys` without a request.
    skipped_reads: Cell<u64>,
    /// Where the keys this handle stores are announced to the other handles on the database, and
    /// theirs heard (none where `BroadcastChannel` is missing: other handles' writes then stay
    /// unknown here until the next open, which only costs their hits).
    channel: Option<KeyChannel>,
}

/// A `BroadcastChannel` named after the database, and what listens on it.
struct KeyChannel {
    channel: web_sys::BroadcastChannel,
    _listener: Closure<dyn FnMut(web_sys::MessageEvent)>,
}

impl KeyChannel {
    fn open(db_name: &str, keys: Rc<KeyFilter>) -> Option<Self> {
        let channel =
            web_sys::BroadcastChannel::new(&format!("ternflow-idb-keys:{db_name}")).ok()?;
        let listener =
            Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
                // An array of the keys another handle stored; anything else is ignored.
                if let Ok(list) = e.data().dyn_into::<js_sys::Array>() {
                    for k in list.iter() {
                        if let Some(k) = k.as_string() {
                            keys.add(&k);
                        }
                    }
                }
            });
        channel.set_onmessage(Some(listener.as_ref().unchecked_ref()));
        Some(Self {
            channel,
            _listener: listener,
        })
    }

    fn announce(&self, stored: &[&Record]) {
        let list: js_sys::Array = stored.iter().map(|r| JsValue::from_str(&r.key)).collect();
        // Best effort: a handle that misses it reads those keys as misses until it reopens.
        let _ = self.channel.post_message(&list);
    }
}

impl Drop for KeyChannel {
    fn drop(&mut self) {
        self.channel.set_onmessage(None);
        self.channel.close();
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdbCache")
            .field("max_entries", &self.max_entries)
            .field("queued", &self.queued.borrow().len())
            .finish_non_exhaustive()
    }
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
        let keys = Rc::new(KeyFilter::loading(max_entries));
        // Listening before the keys are read: a write announced meanwhile joins them.
        let channel = KeyChannel::open(name, keys.clone());
        let inner = Rc::new(Inner {
            db,
            max_entries: max_entries.max(1),
            evicted: Cell::new(0),
            upper_bound: Cell::new(None),
            queued: RefCell::new(Vec::new()),
            writing: Cell::new(false),
            reads: RefCell::new(Vec::new()),
            reading: Cell::new(false),
            keys,
            skipped_reads: Cell::new(0),
            channel,
        });
        // The store's keys, in the background: until they are in, reads go to IndexedDB. (A
        // weak handle until the task runs, so a `close` right after `open` still closes.)
        let loader = Rc::downgrade(&inner);
        wasm_bindgen_futures::spawn_local(async move {
            let Some(inner) = loader.upgrade() else {
                return;
            };
            match inner.stored_keys().await {
                Ok(keys) => inner.keys.loaded(keys),
                Err(_) => inner.keys.failed(),
            }
        });
        Ok(Self { inner })
    }

    /// Whether this handle knows the store's keys (so a read of any other key skips IndexedDB).
    pub fn keys_known(&self) -> bool {
        self.inner.keys.is_ready()
    }

    /// Reads answered "miss" without a request to IndexedDB since this handle opened.
    pub fn skipped_reads(&self) -> u64 {
        self.inner.skipped_reads.get()
    }

    /// Reads answered "miss" without a request by every handle of this thread since it started
    /// (a worker's pipeline, and its database handle with it, is replaced at every `stop()`).
    pub fn skipped_reads_in_thread() -> u64 {
        SKIPPED_IN_THREAD.with(Cell::get)
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
    /// used records beyond the bound. Grouped with the other records queued at the same time into
    /// one transaction (see the [module docs](self)); resolves once it is committed.
    ///
    /// # Errors
    /// Fails when the write transaction carrying it fails.
    pub async fn put_record(&self, record: &Record) -> Result<(), IdbError> {
        let (reply, done) = oneshot::channel();
        self.inner.queued.borrow_mut().push((record.clone(), reply));
        if !self.inner.writing.replace(true) {
            // A task of its own, not this caller's future: a caller that is dropped (its job
            // lost the lease) must not strand the records queued behind it.
            let inner = self.inner.clone();
            wasm_bindgen_futures::spawn_local(async move { inner.write_queued().await });
        }
        match done.await {
            Ok(r) => r.map_err(IdbError::Write),
            Err(_) => Err(IdbError::Write("the writer stopped".into())),
        }
    }
}

impl Inner {
    /// Every key in the store, in one read-only transaction.
    async fn stored_keys(&self) -> Result<Vec<String>, IdbError> {
        let tx = self.db.transaction(&[STORE], TransactionMode::ReadOnly)?;
        let keys = tx.store(STORE)?.get_all_keys(None, None).await?;
        drop(tx);
        Ok(keys.into_iter().filter_map(|k| k.as_string()).collect())
    }

    /// Answers the queued reads, one read-only transaction per round (its gets issued together),
    /// until the queue is empty.
    async fn read_queued(&self) {
        loop {
            let batch: Vec<(String, ReadReply)> = self.reads.borrow_mut().drain(..).collect();
            if batch.is_empty() {
                self.reading.set(false);
                return;
            }
            match self.get_values(batch.iter().map(|(k, _)| k.as_str())).await {
                Ok(values) => {
                    for ((_, reply), v) in batch.into_iter().zip(values) {
                        let _ = reply.send(v.map_err(|e| e.to_string()));
                    }
                }
                Err(e) => {
                    let e = e.to_string();
                    for (_, reply) in batch {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    /// The stored values of `keys`, in one read-only transaction.
    async fn get_values<'k>(
        &self,
        keys: impl Iterator<Item = &'k str>,
    ) -> Result<Vec<Result<Option<JsValue>, IdbError>>, IdbError> {
        let tx = self.db.transaction(&[STORE], TransactionMode::ReadOnly)?;
        let store = tx.store(STORE)?;
        let gets = keys.map(|k| store.get(JsValue::from_str(k)));
        let values = futures_util::future::join_all(gets).await;
        // A read-only transaction with nothing left to do completes by itself: waiting for its
        // `complete` event would only add a round trip to every read.
        drop(tx);
        Ok(values
            .into_iter()
            .map(|r| r.map_err(IdbError::from))
            .collect())
    }

    /// Writes what is queued, one transaction per round, until the queue is empty.
    async fn write_queued(&self) {
        loop {
            let batch: Vec<(Record, WriteReply)> = self.queued.borrow_mut().drain(..).collect();
            if batch.is_empty() {
                self.writing.set(false);
                return;
            }
            let records: Vec<&Record> = batch.iter().map(|(r, _)| r).collect();
            let result = self.put_records(&records).await.map_err(|e| e.to_string());
            for (_, reply) in batch {
                let _ = reply.send(result.clone());
            }
        }
    }

    /// Stores `records` and evicts beyond the bound, in one transaction.
    async fn put_records(&self, records: &[&Record]) -> Result<(), IdbError> {
        let tx = self.db.transaction(&[STORE], TransactionMode::ReadWrite)?;
        let store = tx.store(STORE)?;
        // Every put issued at once and only the last one awaited (a failed put aborts the
        // transaction, which `done` reports): awaiting each in turn cost a round trip to the
        // browser's IndexedDB backend per record.
        store
            .put_all(records.iter().map(|r| (encode(r), None)))
            .await?;
        let added = u32::try_from(records.len()).unwrap_or(u32::MAX);
        let bound = self.upper_bound.get().map(|n| n.saturating_add(added));
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
            for k in &oldest {
                if let Some(k) = k.as_string() {
                    self.keys.remove(&k);
                }
            }
            // Issued together, as the puts above (a full cache evicts on every write).
            let deletes = oldest.into_iter().map(|k| store.delete(k));
            for r in futures_util::future::join_all(deletes).await {
                r?;
            }
            self.evicted.set(self.evicted.get() + u64::from(excess));
            kept = self.max_entries;
        }
        tx.done().await?;
        self.upper_bound.set(Some(kept));
        for r in records {
            self.keys.add(&r.key);
        }
        if let Some(c) = &self.channel {
            c.announce(records);
        }
        Ok(())
    }
}

impl IdbCache {
    /// Reads the record stored under `key`, if any (expired or not).
    ///
    /// # Errors
    /// Fails when the read fails or the stored value is not a [`Record`].
    /// Grouped with the other reads queued at the same time into one transaction (see the
    /// [module docs](self)).
    pub async fn get_record(&self, key: &str) -> Result<Option<Record>, IdbError> {
        if !self.inner.keys.may_hold(key) {
            let n = &self.inner.skipped_reads;
            n.set(n.get() + 1);
            SKIPPED_IN_THREAD.with(|n| n.set(n.get() + 1));
            return Ok(None);
        }
        let (reply, answer) = oneshot::channel();
        self.inner.reads.borrow_mut().push((key.to_owned(), reply));
        if !self.inner.reading.replace(true) {
            // Its own task, as for writes: a dropped caller must not strand the reads behind it.
            let inner = self.inner.clone();
            wasm_bindgen_futures::spawn_local(async move { inner.read_queued().await });
        }
        let value = match answer.await {
            Ok(r) => r.map_err(IdbError::Read)?,
            Err(_) => return Err(IdbError::Read("the reader stopped".into())),
        };
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
        let tx = self
            .inner
            .db
            .transaction(&[STORE], TransactionMode::ReadOnly)?;
        let n = tx.store(STORE)?.count(None).await?;
        tx.done().await?;
        Ok(n)
    }

    /// Records evicted by the size bound since this handle opened.
    pub fn evicted(&self) -> u64 {
        self.inner.evicted.get()
    }

    async fn delete_keys(&self, keys: &[String]) -> Result<(), IdbError> {
        let tx = self
            .inner
            .db
            .transaction(&[STORE], TransactionMode::ReadWrite)?;
        let store = tx.store(STORE)?;
        let deletes = keys.iter().map(|k| store.delete(JsValue::from_str(k)));
        for r in futures_util::future::join_all(deletes).await {
            r?;
        }
        tx.done().await?;
        for k in keys {
            self.inner.keys.remove(k);
        }
        Ok(())
    }

    /// Deletes every record, in one transaction.
    ///
    /// # Errors
    /// Fails when the transaction fails.
    pub async fn clear_all(&self) -> Result<(), IdbError> {
        let tx = self
            .inner
            .db
            .transaction(&[STORE], TransactionMode::ReadWrite)?;
        tx.store(STORE)?.clear().await?;
        tx.done().await?;
        self.inner.upper_bound.set(Some(0));
        self.inner.keys.clear();
        Ok(())
    }

    /// Closes the database connection (once no grouped write holds it).
    pub fn close(self) {
        if let Ok(inner) = Rc::try_unwrap(self.inner) {
            inner.db.close();
        }
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
    /// A live vector and its expiry (Unix ms), so a memory layer in front can keep the same
    /// deadline. An expired record is deleted; a hit older than a minute is touched (LRU).
    ///
    /// # Errors
    /// When IndexedDB fails.
    pub async fn get_with_expiry(
        &self,
        key: &str,
        now_ms: u64,
    ) -> ternflow_core::Result<Option<(Vec<f32>, u64)>> {
        let now = now_ms as f64;
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
        Ok(Some((rec.vector, rec.expires_at as u64)))
    }
}

impl LocalCache for IdbCache {
    async fn get(&self, key: &str, now_ms: u64) -> ternflow_core::Result<Option<Vec<f32>>> {
        Ok(self.get_with_expiry(key, now_ms).await?.map(|(v, _)| v))
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

    async fn clear(&self) -> ternflow_core::Result<()> {
        Ok(self.clear_all().await?)
    }
}
