//! Browser tests of the IndexedDB cache, run in a real dedicated Web Worker in each browser
//! engine the test command drives (Chromium, Firefox, WebKit).
#![cfg(target_arch = "wasm32")]

use ternflow::idb::{IdbCache, Record};
use ternflow_core::ports::LocalCache;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_dedicated_worker);

/// The database `name`, emptied (left over from an earlier run), opened with room for `max`.
async fn fresh(name: &str, max: u32) -> IdbCache {
    IdbCache::delete(name).await.expect("delete old db");
    IdbCache::open(name, max).await.expect("open db")
}

#[wasm_bindgen_test]
async fn record_round_trips_through_indexeddb() {
    let name = "ternflow-test-roundtrip";
    let cache = fresh(name, 100).await;
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
    let cache = fresh(name, 3).await;
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

/// Waits (up to 2 s) until `cache` has read the store's keys.
async fn keys_loaded(cache: &IdbCache) {
    for _ in 0..200 {
        if cache.keys_known() {
            return;
        }
        gloo_timers::future::TimeoutFuture::new(10).await;
    }
    panic!("the store's keys were not loaded within 2 s");
}

#[wasm_bindgen_test]
async fn a_read_of_a_key_the_store_cannot_hold_skips_indexeddb() {
    let name = "ternflow-test-keys-skip";
    let first = fresh(name, 100).await;
    first.put("m:kept", &[1.0], 10_000, 1_000).await.unwrap();
    first.close();

    // A new handle learns the stored keys from IndexedDB itself.
    let cache = IdbCache::open(name, 100).await.expect("reopen");
    keys_loaded(&cache).await;
    assert_eq!(cache.get("m:kept", 2_000).await.unwrap(), Some(vec![1.0]));
    assert_eq!(
        cache.skipped_reads(),
        0,
        "a stored key is read from IndexedDB"
    );
    assert_eq!(cache.get("m:never", 2_000).await.unwrap(), None);
    assert_eq!(
        cache.skipped_reads(),
        1,
        "a key never stored is a miss without a read"
    );

    // Its own writes, deletions and evictions keep the keys true.
    cache.put("m:new", &[2.0], 10_000, 2_000).await.unwrap();
    assert_eq!(cache.get("m:new", 2_000).await.unwrap(), Some(vec![2.0]));
    cache.remove(&["m:new".to_string()]).await.unwrap();
    assert_eq!(cache.get("m:new", 2_000).await.unwrap(), None);
    assert_eq!(cache.skipped_reads(), 2, "a deleted key is known gone");
    cache.clear().await.unwrap();
    assert_eq!(cache.get("m:kept", 2_000).await.unwrap(), None);
    assert_eq!(cache.skipped_reads(), 3, "cleared");
    cache.close();
}

#[wasm_bindgen_test]
async fn another_handle_hears_of_the_keys_stored_through_this_one() {
    let name = "ternflow-test-keys-broadcast";
    let writer = fresh(name, 100).await;
    let reader = IdbCache::open(name, 100).await.expect("open db again");
    keys_loaded(&reader).await;
    assert_eq!(reader.get("m:shared", 1_000).await.unwrap(), None);
    assert_eq!(reader.skipped_reads(), 1);

    // Stored by the other handle after this one read the keys: only the announcement on the
    // database's BroadcastChannel can tell this one.
    writer.put("m:shared", &[3.0], 10_000, 1_000).await.unwrap();
    let mut got = None;
    for _ in 0..200 {
        got = reader.get("m:shared", 1_000).await.unwrap();
        if got.is_some() {
            break;
        }
        gloo_timers::future::TimeoutFuture::new(10).await;
    }
    assert_eq!(got, Some(vec![3.0]), "heard within 2 s");
    writer.close();
    reader.close();
}

#[wasm_bindgen_test]
fn runs_inside_a_dedicated_worker() {
    use wasm_bindgen::JsCast;
    let global = js_sys::global();
    assert!(global
        .dyn_into::<web_sys::DedicatedWorkerGlobalScope>()
        .is_ok());
}

/// The engine a `User-Agent` names: `webkit` for WebKit without Blink (Safari, WebKitGTK's
/// MiniBrowser), `chromium` for Blink, `firefox` for Gecko.
fn engine_of(ua: &str) -> Option<&'static str> {
    if ua.contains("Firefox/") && ua.contains("Gecko/") {
        Some("firefox")
    } else if ua.contains("Chrome/") {
        Some("chromium")
    } else if ua.contains("AppleWebKit/") {
        Some("webkit")
    } else {
        None
    }
}

/// The test command names the engine each browser step is meant to run in
/// (`TERNFLOW_TEST_ENGINE`, read when the tests are built): a driver that silently started
/// another browser fails here instead of passing in the wrong engine.
#[wasm_bindgen_test]
fn runs_in_the_engine_the_test_command_names() {
    let navigator =
        js_sys::Reflect::get(&js_sys::global(), &"navigator".into()).expect("navigator");
    let ua = js_sys::Reflect::get(&navigator, &"userAgent".into())
        .ok()
        .and_then(|v| v.as_string())
        .expect("navigator.userAgent");
    let engine = engine_of(&ua);
    web_sys::console::log_1(&format!("engine: {engine:?} ({ua})").into());
    assert!(engine.is_some(), "an engine the tests know: {ua}");
    if let Some(want) = option_env!("TERNFLOW_TEST_ENGINE") {
        assert_eq!(engine, Some(want), "{ua}");
    }
}

#[wasm_bindgen_test]
fn the_engine_is_read_from_each_user_agent() {
    let cases = [
        ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/156.0.0.0 Safari/537.36", "chromium"),
        ("Mozilla/5.0 (X11; Linux x86_64; rv:153.0) Gecko/20100101 Firefox/153.0", "firefox"),
        ("Mozilla/5.0 (X11; Ubuntu; Linux x86_64) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.0 Safari/605.1.15", "webkit"),
    ];
    for (ua, want) in cases {
        assert_eq!(engine_of(ua), Some(want), "{ua}");
    }
    assert_eq!(engine_of("curl/8.0"), None);
}

/// Private browsing, a blocked database, storage the browser will not give: IndexedDB refuses
/// the open, and the worker's local cache is in memory only, never a failure. Here the worker's
/// `indexedDB` is shadowed by one whose `open` throws as Firefox's does in a private window.
#[wasm_bindgen_test]
async fn an_indexeddb_that_refuses_to_open_is_a_memory_only_cache() {
    use ternflow::local::AnyLocal;
    use wasm_bindgen::JsValue;
    let global = js_sys::global();
    let key = JsValue::from_str("indexedDB");
    let refusing = js_sys::Object::new();
    let open = js_sys::Function::new_no_args(
        "throw new DOMException('The operation is insecure.', 'SecurityError')",
    );
    js_sys::Reflect::set(&refusing, &"open".into(), &open).unwrap();
    let descriptor = js_sys::Object::new();
    js_sys::Reflect::set(&descriptor, &"value".into(), &refusing).unwrap();
    js_sys::Reflect::set(&descriptor, &"configurable".into(), &JsValue::TRUE).unwrap();
    js_sys::Object::define_property(&global, &key, &descriptor);
    let local = AnyLocal::open("ternflow-test-refused", 10, 1 << 20).await;
    // The real one back for the other tests (the shadow was an own property of the global).
    js_sys::Reflect::delete_property(&global, &key).unwrap();
    let local = local.expect("a refused IndexedDB is not an error");
    assert_eq!(local.kind(), "memory");
    assert_eq!(local.get("m:k", 1).await.unwrap(), None);
    local.put("m:k", &[0.5, -1.0], 10_000, 1).await.unwrap();
    assert_eq!(local.get("m:k", 2).await.unwrap(), Some(vec![0.5, -1.0]));
    // And with IndexedDB back, the same call opens it.
    let again = AnyLocal::open("ternflow-test-refused", 10, 1 << 20)
        .await
        .unwrap();
    assert_eq!(again.kind(), "indexeddb");
}
