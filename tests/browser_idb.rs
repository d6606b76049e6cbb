//! Browser tests of the IndexedDB cache, run in a real dedicated Web Worker in headless Chromium.
#![cfg(target_arch = "wasm32")]

use ternflow::idb::{IdbCache, Record};
use ternflow_core::ports::LocalCache;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_dedicated_worker);

#[wasm_bindgen_test]
async fn record_round_trips_through_indexeddb() {
    let name = "ternflow-test-roundtrip";
    IdbCache::delete(name).await.expect("delete old db");
    let cache = IdbCache::open(name, 100).await.expect("open db");
    assert_eq!(cache.get_record("m1:abc").await.expect("get"), None);

    let record = Record {
        key: "m1:abc".into(),
        vector: vec![0.25, -1.5, 3.0e-7, f32::MAX],
        expires_at: 1.7e12,
        used_at: 1.0,
    };
    cache.put_record(&record).await.expect("put");
    assert_eq!(
        cache.get_record("m1:abc").await.expect("get"),
        Some(record.clone())
    );

    // Overwrite keeps one record per key.
    let newer = Record {
        vector: vec![1.0],
        ..record
    };
    cache.put_record(&newer).await.expect("put again");
    assert_eq!(cache.get_record("m1:abc").await.expect("get"), Some(newer));
    assert_eq!(cache.count().await.expect("count"), 1);
    cache.close();

    // Persisted: a new connection sees the same record.
    let reopened = IdbCache::open(name, 100).await.expect("reopen");
    let got = reopened.get_record("m1:abc").await.expect("get");
    assert_eq!(got.map(|r| r.vector), Some(vec![1.0]));
    reopened.close();
}

#[wasm_bindgen_test]
async fn ttl_expiry_and_lru_eviction_at_the_size_bound() {
    let name = "ternflow-test-bound";
    IdbCache::delete(name).await.expect("delete old db");
    let cache = IdbCache::open(name, 3).await.expect("open db");
    for (i, key) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        let t = 1_000 + i as u64;
        cache.put(key, &[i as f32], 10_000, t).await.expect("put");
    }
    assert_eq!(cache.count().await.unwrap(), 3, "bounded at 3");
    assert_eq!(cache.evicted(), 2);
    assert_eq!(cache.get("a", 2_000).await.unwrap(), None, "oldest evicted");
    assert_eq!(cache.get("b", 2_000).await.unwrap(), None);
    assert_eq!(cache.get("e", 2_000).await.unwrap(), Some(vec![4.0]));
    // Expired entries read as misses and are deleted.
    assert_eq!(cache.get("e", 10_000).await.unwrap(), None);
    assert_eq!(cache.count().await.unwrap(), 2);
    // Invalidation.
    cache.remove(&["d".to_string()]).await.unwrap();
    assert_eq!(cache.get("d", 2_000).await.unwrap(), None);
    // A `reset` event empties it; the size bound still holds afterwards.
    cache.put("x", &[9.0], 10_000, 3_000).await.unwrap();
    assert_eq!(cache.count().await.unwrap(), 2, "c and x");
    cache.clear().await.unwrap();
    assert_eq!(cache.count().await.unwrap(), 0);
    assert_eq!(cache.get("x", 3_000).await.unwrap(), None);
    for (i, key) in ["p", "q", "r", "s"].iter().enumerate() {
        cache
            .put(key, &[i as f32], 10_000, 4_000 + i as u64)
            .await
            .unwrap();
    }
    assert_eq!(
        cache.count().await.unwrap(),
        3,
        "bounded at 3 after a clear"
    );
    cache.close();
}

#[wasm_bindgen_test]
fn runs_inside_a_dedicated_worker() {
    use wasm_bindgen::JsCast;
    let global = js_sys::global();
    assert!(global
        .dyn_into::<web_sys::DedicatedWorkerGlobalScope>()
        .is_ok());
}
