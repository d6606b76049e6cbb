//! The IndexedDB-backed local vector cache (`rexie`).
//!
//! Records are plain objects `{ key, vector, expires_at }` in one object store keyed by `key`.
//! Every method opens and finishes its own transaction: a transaction is never held across any
//! other `.await` (IndexedDB auto-commits an idle transaction).

use rexie::{ObjectStore, Rexie, TransactionMode};
use serde::{Deserialize, Serialize};
use wasm_bindgen::JsValue;

const STORE: &str = "vectors";
const DB_VERSION: u32 = 1;

/// Errors of the IndexedDB cache.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdbError {
    /// IndexedDB refused or failed a request.
    #[error("indexeddb: {0}")]
    Rexie(#[from] rexie::Error),
    /// A stored record did not have the expected shape.
    #[error("indexeddb record: {0}")]
    Decode(#[from] serde_wasm_bindgen::Error),
}

/// One cached vector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The cache key (model id + text hash).
    pub key: String,
    /// The embedding.
    pub vector: Vec<f32>,
    /// Expiry, milliseconds since the Unix epoch.
    pub expires_at: f64,
}

/// A handle on the IndexedDB database holding cached vectors.
#[derive(Debug)]
pub struct IdbCache {
    db: Rexie,
}

impl IdbCache {
    /// Opens (creating if needed) the database `name`.
    ///
    /// # Errors
    /// Fails when IndexedDB is unavailable or refuses the open.
    pub async fn open(name: &str) -> Result<Self, IdbError> {
        let db = Rexie::builder(name)
            .version(DB_VERSION)
            .add_object_store(ObjectStore::new(STORE).key_path("key"))
            .build()
            .await?;
        Ok(Self { db })
    }

    /// Deletes the database `name` (used by tests to start clean).
    ///
    /// # Errors
    /// Fails when IndexedDB refuses the deletion.
    pub async fn delete(name: &str) -> Result<(), IdbError> {
        Rexie::builder(name).delete().await?;
        Ok(())
    }

    /// Stores `record`, replacing any record with the same key.
    ///
    /// # Errors
    /// Fails when the write transaction fails.
    pub async fn put(&self, record: &Record) -> Result<(), IdbError> {
        let value = serde_wasm_bindgen::to_value(record)?;
        let tx = self.db.transaction(&[STORE], TransactionMode::ReadWrite)?;
        tx.store(STORE)?.put(&value, None).await?;
        tx.done().await?;
        Ok(())
    }

    /// Reads the record stored under `key`, if any.
    ///
    /// # Errors
    /// Fails when the read fails or the stored value is not a [`Record`].
    pub async fn get(&self, key: &str) -> Result<Option<Record>, IdbError> {
        let tx = self.db.transaction(&[STORE], TransactionMode::ReadOnly)?;
        let value = tx.store(STORE)?.get(JsValue::from_str(key)).await?;
        tx.done().await?;
        match value {
            Some(v) if !v.is_undefined() => Ok(Some(serde_wasm_bindgen::from_value(v)?)),
            _ => Ok(None),
        }
    }

    /// Closes the database connection.
    pub fn close(self) {
        self.db.close();
    }
}
