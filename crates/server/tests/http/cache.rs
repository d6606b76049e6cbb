//! The remote cache (fences, TTLs, invalidation) and the locks that guard its writes.

use axum::http::StatusCode;
use serde_json::{json, Value};
use ternflow_server::{app, Config};

use crate::common::{call_raw, lock_fence, state_with, Api, ADMIN, WORKER};
use crate::{ack_body, error_code, vector};

#[tokio::test]
async fn cache_fences_and_invalidation() {
    let (state, clock) = state_with(Config::default());
    let app = app(state);
    let api = Api(app.clone());
    let model = "00000000deadbeef";
    let key = ternflow_core::keys::cache_key(model, "some text");
    let key = key.as_str();
    let put = |fence: u64| json!({"model_id": model, "vector": vector(), "fence": fence, "ttl_ms": 10_000});
    let r = api.get(Some(WORKER), &format!("/v1/cache/{key}")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    // A fence the server never issued for this key (here the largest u64) is refused, so it
    // cannot lock honest writers out for the entry's TTL.
    let r = api
        .put(Some(WORKER), &format!("/v1/cache/{key}"), put(u64::MAX))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert_eq!(error_code(&r.json), "bad_fence");
    let lock = lock_fence(&app, key).await;
    let r = api
        .put(Some(WORKER), &format!("/v1/cache/{key}"), put(lock))
        .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "the honest holder after the forgery: {}",
        r.text
    );
    let exp = r.json["expires_at"].as_u64().unwrap();
    assert!(
        (1_009_000..=1_011_000).contains(&exp),
        "ttl ± 10 % jitter: {exp}"
    );
    // A claimed job whose text the cache holds is finished by the claim itself...
    api.enqueue(json!({"jobs": [{"id": "hit", "text": "some text", "model_id": model}]}))
        .await;
    let job = &api.claim(1).await[0];
    assert_eq!(
        (job["resolved"].clone(), job["cached"]["fence"].clone()),
        (json!(true), json!(lock)),
        "{job}"
    );
    let r = api.get(Some(WORKER), "/v1/jobs/hit").await;
    assert_eq!(
        (r.json["state"].clone(), r.json["result"]["source"].clone()),
        (json!("done"), json!("remote")),
        "{}",
        r.text
    );
    // ...and an ack sent anyway (a worker that predates `resolved`) is a harmless repeat.
    let tok = job["lease"]["token"].as_str().unwrap();
    let r = api
        .post(Some(WORKER), "/v1/jobs/hit/ack", ack_body(tok))
        .await;
    assert_eq!(
        (r.status, r.json["first"].clone()),
        (StatusCode::OK, json!(false))
    );
    let r = api.get(Some(ADMIN), "/metrics").await;
    assert!(
        r.text.contains("ternflow_jobs_resolved_at_claim_total 1\n"),
        "{}",
        r.text
    );
    // Once the entry is gone (invalidated), a job lease on the same text (a newer fence)
    // writes through its ack...
    let r = api.delete(Some(ADMIN), &format!("/v1/cache/{key}")).await;
    assert!(r.status.is_success(), "{}", r.text);
    api.enqueue(json!({"jobs": [{"id": "j", "text": "some text", "model_id": model}]}))
        .await;
    let job = &api.claim(1).await[0];
    assert_eq!(job["resolved"], Value::Null, "{job}");
    let lease = job["lease"].clone();
    let newer = lease["fence"].as_u64().unwrap();
    assert!(newer > lock);
    let mut body = ack_body(lease["token"].as_str().unwrap());
    body["cache"] = json!({"key": key, "fence": 0, "ttl_ms": 10_000});
    let r = api.post(Some(WORKER), "/v1/jobs/j/ack", body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    // ...so the lock holder, still live, now holds an older fence.
    let r = api
        .put(Some(WORKER), &format!("/v1/cache/{key}"), put(lock))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(error_code(&r.json), "stale_fence");
    assert_eq!(
        r.json["entry"]["fence"], newer,
        "the body carries the stored entry, fenced with the lease's fence (not the body's 0)"
    );
    let r = api.get(Some(WORKER), &format!("/v1/cache/{key}")).await;
    assert_eq!(
        (r.status, r.json["fence"].clone()),
        (StatusCode::OK, json!(newer))
    );
    let bad = json!({"model_id": "ffffffffffffffff", "vector": vector(), "fence": lock});
    let r = api
        .put(Some(WORKER), &format!("/v1/cache/{key}"), bad)
        .await;
    assert_eq!(error_code(&r.json), "model_mismatch");
    let r = api.put(Some(WORKER), "/v1/cache/bad%20key", put(1)).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    clock.advance(40_000);
    let r = api.get(Some(WORKER), &format!("/v1/cache/{key}")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "expired");
    let fresh = lock_fence(&app, key).await;
    let r = api
        .put(Some(WORKER), &format!("/v1/cache/{key}"), put(fresh))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    // A worker may not delete entries (a visitor could wipe the tenant's cache and, through
    // the `invalidate` events, every browser's copies); an admin may.
    let r = api.delete(Some(WORKER), &format!("/v1/cache/{key}")).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    let r = api.get(Some(WORKER), &format!("/v1/cache/{key}")).await;
    assert_eq!(r.status, StatusCode::OK, "still there");
    let r = api.delete(Some(ADMIN), &format!("/v1/cache/{key}")).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = api.delete(Some(ADMIN), &format!("/v1/cache/{key}")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn lock_contention_and_compare_and_delete() {
    let (state, clock) = state_with(Config::default());
    let app = app(state);
    let api = Api(app.clone());
    let r = api
        .post(Some(WORKER), "/v1/locks/k1", json!({"ttl_ms": 5_000}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let g1 = r.json.clone();
    let r = call_raw(&app, "POST", "/v1/locks/k1", Some(WORKER), None, Vec::new()).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(error_code(&r.json), "lock_held");
    assert_eq!(r.headers["retry-after"], "5");
    let tok1 = g1["token"].as_str().unwrap();
    let r = api
        .post(
            Some(WORKER),
            "/v1/locks/k1/renew",
            json!({"token": tok1, "ttl_ms": 8_000}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json["fence"], g1["fence"]);
    let r = api
        .delete_with(Some(WORKER), "/v1/locks/k1", json!({"token": "nope"}))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "compare-and-delete");
    let r = api
        .delete_with(Some(WORKER), "/v1/locks/k1", json!({"token": tok1}))
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = api.post_empty(Some(WORKER), "/v1/locks/k1").await;
    assert!(r.json["fence"].as_u64() > g1["fence"].as_u64());
    // Let it leak: expire without release.
    clock.advance(60_000);
    let r = api.get(Some(ADMIN), "/metrics").await;
    assert!(
        r.text.contains("ternflow_lock_leaked_total 1\n"),
        "{}",
        r.text
    );
    assert!(r.text.contains("ternflow_locks_held 0\n"));
}

/// One token holds one key at most `max_lock_hold_ms`, renewals and re-takes included: each grant
/// and renewal runs to the hold's end at the latest, then the key is refused to that token (429)
/// until it has left it alone as long; other tokens take it.
#[tokio::test]
async fn a_token_holds_one_lock_at_most_the_hold() {
    let (state, clock) = state_with(Config {
        max_lock_hold_ms: 60_000,
        ..Config::default()
    });
    let api = Api(app(state));
    let ttl = json!({"ttl_ms": 30_000});
    let r = api.post(Some(WORKER), "/v1/locks/h", ttl.clone()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let t0 = r.json["expires_at"].as_u64().unwrap() - 30_000;
    let token = r.json["token"].as_str().unwrap().to_owned();
    // Released after 20 s and taken again: the 20 s count.
    clock.advance(20_000);
    let r = api
        .delete_with(Some(WORKER), "/v1/locks/h", json!({"token": token}))
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = api.post(Some(WORKER), "/v1/locks/h", ttl.clone()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json["expires_at"].as_u64().unwrap(), t0 + 50_000);
    let token = r.json["token"].as_str().unwrap().to_owned();
    // Renewed 25 s later: 15 s of the hold are left, so the lock runs 15 s, not 30.
    clock.advance(25_000);
    let r = api
        .post(
            Some(WORKER),
            "/v1/locks/h/renew",
            json!({"token": token, "ttl_ms": 30_000}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.json["expires_at"].as_u64().unwrap(),
        t0 + 60_000,
        "cut to the hold's end"
    );
    clock.advance(15_000);
    let r = api
        .post(Some(WORKER), "/v1/locks/h/renew", json!({"token": token}))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert_eq!(error_code(&r.json), "lock_lost");
    let r = api.post(Some(WORKER), "/v1/locks/h", ttl.clone()).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
    assert_eq!(
        r.headers["retry-after"], "60",
        "until it has left the key alone for a hold"
    );
    let r = api.post(Some(WORKER), "/v1/locks/other", ttl.clone()).await;
    assert_eq!(r.status, StatusCode::OK, "other keys: {}", r.text);
    let r = api
        .post_empty(Some(crate::common::WORKER_B64), "/v1/locks/h")
        .await;
    assert_eq!(r.status, StatusCode::OK, "other tokens: {}", r.text);
    let token_b = r.json["token"].as_str().unwrap().to_owned();
    let r = api
        .delete_with(
            Some(crate::common::WORKER_B64),
            "/v1/locks/h",
            json!({"token": token_b}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    clock.advance(60_000);
    let r = api.post(Some(WORKER), "/v1/locks/h", ttl).await;
    assert_eq!(r.status, StatusCode::OK, "a hold later: {}", r.text);
}

/// One token holds at most `max_locks_per_token` locks at once on a server: past it an acquire
/// answers 429 with `Retry-After` (until its first lock expires), another token is not
/// counted, and a release or an expiry makes room.
#[tokio::test]
async fn a_token_holds_at_most_its_share_of_locks() {
    let (state, clock) = state_with(Config {
        max_locks_per_token: 2,
        ..Config::default()
    });
    let api = Api(app(state));
    let mut grants = Vec::new();
    for key in ["h1", "h2"] {
        let r = api
            .post(
                Some(WORKER),
                &format!("/v1/locks/{key}"),
                json!({"ttl_ms": 30_000}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        grants.push(r.json["token"].as_str().unwrap().to_owned());
    }
    clock.advance(10_000);
    let r = api
        .post(Some(WORKER), "/v1/locks/h3", json!({"ttl_ms": 30_000}))
        .await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
    assert_eq!(error_code(&r.json), "too_many_requests");
    assert_eq!(
        r.headers["retry-after"], "20",
        "until its first lock expires"
    );
    // Renewing what it holds is not taking more.
    let r = api
        .post(
            Some(WORKER),
            "/v1/locks/h1/renew",
            json!({"token": grants[0]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = api
        .post_empty(Some(crate::common::WORKER_B64), "/v1/locks/h3")
        .await;
    assert_eq!(r.status, StatusCode::OK, "another token: {}", r.text);
    let r = api
        .delete_with(Some(WORKER), "/v1/locks/h2", json!({"token": grants[1]}))
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = api.post_empty(Some(WORKER), "/v1/locks/h4").await;
    assert_eq!(r.status, StatusCode::OK, "a release made room: {}", r.text);
    let r = api.post_empty(Some(WORKER), "/v1/locks/h5").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    clock.advance(60_000);
    let r = api.post_empty(Some(WORKER), "/v1/locks/h5").await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "expired locks are not held: {}",
        r.text
    );
}
