//! A store that confirms writes only once a replica holds them (`WAIT 1`, as on a cluster): a
//! master whose script cache is empty (a promoted replica may have none) still confirms them —
//! the script is loaded there and the pipeline sent again — and with the replica gone a write is
//! not confirmed.

mod common;

use std::time::Duration;

use common::RedisServer;
use ternflow_server::store::QueueStore;
use ternflow_server::{Durability, RedisStore};

fn port(url: &str) -> String {
    url.trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn confirmed_writes_survive_an_empty_script_cache_and_fail_without_a_replica() {
    let master = RedisServer::start();
    let mut replica = RedisServer::start_with(
        "redis-server",
        &["--replicaof", "127.0.0.1", &port(&master.url())],
    );
    let mut c = redis::Client::open(master.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut linked = 0;
    for _ in 0..200 {
        linked = redis::cmd("WAIT")
            .arg(1)
            .arg(50)
            .query_async(&mut c)
            .await
            .unwrap();
        if linked >= 1 {
            break;
        }
    }
    assert_eq!(linked, 1, "the replica never linked");
    let durability = Durability {
        replicas: 1,
        timeout: Duration::from_millis(500),
    };
    let store = RedisStore::connect(&master.url(), "wait")
        .await
        .unwrap()
        .with_durability(durability);

    let out = store.enqueue(vec![common::job("a")], 0).await.unwrap();
    assert!(out[0].new);

    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut c)
        .await
        .unwrap();
    let out = store.enqueue(vec![common::job("b")], 0).await.unwrap();
    assert!(
        out[0].new,
        "confirmed after the master's script cache was emptied"
    );
    let mut r = redis::Client::open(replica.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let held: Vec<String> = redis::cmd("KEYS")
        .arg("*job:b")
        .query_async(&mut r)
        .await
        .unwrap();
    assert!(!held.is_empty(), "a confirmed write is on the replica");

    replica.kill9();
    let err = store.enqueue(vec![common::job("c")], 0).await.unwrap_err();
    assert!(err.to_string().contains("0 of 1 replicas"), "{err}");
}
