//! Browser tests of the IndexedDB cache, run in a real dedicated Web Worker in headless Chromium.
#![cfg(target_arch = "wasm32")]

use ternflow::idb::{IdbCache, Record};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_dedicated_worker);

#[wasm_bindgen_test]
async fn record_round_trips_through_indexeddb() {
    let name = "ternflow-test-roundtrip";
    IdbCache::delete(name).await.expect("delete old db");
    let cache = IdbCache::open(name).await.expect("open db");
    assert_eq!(cache.get("m1:abc").await.expect("get"), None);

    let record = Record {
        key: "m1:abc".into(),
        vector: vec![0.25, -1.5, 3.0e-7, f32::MAX],
        expires_at: 1.7e12,
    };
    cache.put(&record).await.expect("put");
    assert_eq!(cache.get("m1:abc").await.expect("get"), Some(record.clone()));

    // Overwrite keeps one record per key.
    let newer = Record { vector: vec![1.0], ..record };
    cache.put(&newer).await.expect("put again");
    assert_eq!(cache.get("m1:abc").await.expect("get"), Some(newer));
    cache.close();

    // Persisted: a new connection sees the same record.
    let reopened = IdbCache::open(name).await.expect("reopen");
    assert_eq!(reopened.get("m1:abc").await.expect("get").map(|r| r.vector), Some(vec![1.0]));
    reopened.close();
}

#[wasm_bindgen_test]
fn runs_inside_a_dedicated_worker() {
    use wasm_bindgen::JsCast;
    let global = js_sys::global();
    assert!(global.dyn_into::<web_sys::DedicatedWorkerGlobalScope>().is_ok());
}
