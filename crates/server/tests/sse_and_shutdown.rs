//! Over a real socket: SSE with `Last-Event-ID` resume, graceful shutdown keeping live leases,
//! and the no-attempt release.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{ADMIN, PRODUCER, WORKER, WORKER_B64};
use futures_util::StreamExt;
use serde_json::json;
use ternflow_core::ports::JobSource;
use ternflow_core::protocol::JobState;
use ternflow_core::protocol::{AckRequest, ClaimedJob, JobResult, ResultSource, Vector};
use ternflow_server::test_client::worker_client;
use ternflow_server::{run, AppState, Config, MemoryStore, QueueStore};
use tokio::sync::oneshot;

struct Server {
    base: String,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<std::io::Result<()>>,
    store: Arc<MemoryStore>,
}

async fn start() -> Server {
    start_on(Arc::new(MemoryStore::new())).await
}

async fn start_on(store: Arc<MemoryStore>) -> Server {
    start_with(
        store,
        Config {
            keepalive_ms: 200,
            ..Config::default()
        },
    )
    .await
}

async fn start_with(store: Arc<MemoryStore>, config: Config) -> Server {
    let state = AppState::new(store.clone(), common::tokens(), config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, rx) = oneshot::channel::<()>();
    let done = tokio::spawn(run(listener, state, async move {
        let _ = rx.await;
    }));
    Server {
        base,
        stop: Some(stop),
        done,
        store,
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Ev {
    id: Option<u64>,
    event: String,
    data: serde_json::Value,
}

/// The ack of `job` with a one-number vector (the server's recomputation is off in these tests).
fn ack_of(job: &ClaimedJob) -> AckRequest {
    AckRequest {
        token: job.lease.token.clone(),
        worker: None,
        result: JobResult {
            model_id: "m".into(),
            vector: Vector(vec![1.0]),
            source: ResultSource::Engine,
            by: None,
        },
        cache: None,
        timing: None,
    }
}

/// Reads SSE frames until `n` events (comments skipped) arrived.
async fn read_events(
    stream: &mut (impl futures_util::Stream<Item = reqwest::Result<axum::body::Bytes>> + Unpin),
    buf: &mut String,
    n: usize,
) -> Vec<Ev> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while out.len() < n {
        while let Some(i) = buf.find("\n\n") {
            let frame: String = buf.drain(..i + 2).collect();
            let mut ev = Ev {
                id: None,
                event: String::new(),
                data: serde_json::Value::Null,
            };
            let mut any = false;
            for line in frame.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    ev.id = v.trim().parse().ok();
                } else if let Some(v) = line.strip_prefix("event:") {
                    ev.event = v.trim().to_owned();
                    any = true;
                } else if let Some(v) = line.strip_prefix("data:") {
                    ev.data = serde_json::from_str(v.trim()).unwrap_or(serde_json::Value::Null);
                }
            }
            if any {
                out.push(ev);
            }
        }
        if out.len() >= n {
            break;
        }
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("events in time")
            .expect("stream open")
            .unwrap();
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_resumes_from_last_event_id() {
    let mut srv = start().await;
    let http = reqwest::Client::new();
    let b = &srv.base;
    let resp = http
        .get(format!("{b}/v1/events?token={WORKER}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut stream = resp.bytes_stream();
    let mut buf = String::new();
    let hello = read_events(&mut stream, &mut buf, 1).await;
    assert_eq!(hello[0].event, "jobs");
    assert_eq!(hello[0].id, None);

    let enqueue = |text: &str| {
        http.post(format!("{b}/v1/jobs"))
            .bearer_auth(PRODUCER)
            .json(&json!({ "text": text }))
            .send()
    };
    enqueue("a").await.unwrap();
    let key = "00000000deadbeef:k";
    let lock: serde_json::Value = http
        .post(format!("{b}/v1/locks/{key}"))
        .bearer_auth(WORKER)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let put = json!({"model_id": "00000000deadbeef", "vector": "AACAPw==", "fence": lock["fence"]});
    let r = http
        .put(format!("{b}/v1/cache/{key}"))
        .bearer_auth(WORKER)
        .json(&put)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    http.delete(format!("{b}/v1/cache/{key}"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    let evs = read_events(&mut stream, &mut buf, 2).await;
    assert_eq!(evs[0].event, "jobs");
    assert_eq!(evs[0].data, json!({"depth": 1}));
    assert_eq!(evs[1].event, "invalidate");
    assert_eq!(evs[1].data, json!({"keys": [key]}));
    let (id1, id2) = (evs[0].id.unwrap(), evs[1].id.unwrap());
    assert!(id2 > id1);
    drop(stream);

    // Missed while disconnected.
    enqueue("b").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    // Resume after the first event: the invalidate and the new jobs event are replayed.
    let resp = http
        .get(format!("{b}/v1/events"))
        .bearer_auth(WORKER)
        .header("last-event-id", id1.to_string())
        .send()
        .await
        .unwrap();
    let mut stream = resp.bytes_stream();
    let mut buf = String::new();
    let evs = read_events(&mut stream, &mut buf, 3).await;
    assert_eq!(evs[0].id, Some(id2));
    assert_eq!(evs[0].event, "invalidate");
    assert_eq!(evs[1].event, "jobs");
    assert_eq!(evs[1].data, json!({"depth": 2}));
    assert!(evs[1].id.unwrap() > id2);
    assert_eq!(
        (evs[2].event.as_str(), evs[2].id),
        ("jobs", None),
        "then the fresh depth"
    );
    // Keep-alives flow.
    let chunk = tokio::time::timeout(Duration::from_secs(2), stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let text = std::str::from_utf8(&chunk).unwrap().to_owned();
    assert!(
        text.starts_with(':') && text.contains("keep-alive"),
        "{text:?}"
    );

    // No token → 401 even here.
    let r = http.get(format!("{b}/v1/events")).send().await.unwrap();
    assert_eq!(r.status(), 401);

    // Shutdown ends the open stream (graceful shutdown does not hang on it).
    srv.stop.take().unwrap().send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), srv.done)
        .await
        .expect("shutdown completes with an SSE client connected")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_keeps_live_leases_and_release_costs_no_attempt() {
    let mut srv = start().await;
    let http = reqwest::Client::new();
    let b = &srv.base;
    http.post(format!("{b}/v1/jobs"))
        .bearer_auth(PRODUCER)
        .json(&json!({"jobs": [{"id": "j1", "text": "a"}, {"id": "j2", "text": "b"}]}))
        .send()
        .await
        .unwrap();
    let w = worker_client(b, WORKER, "w");
    let jobs = w.claim(2, 0).await.unwrap();
    assert_eq!(jobs.len(), 2);
    // j1 finishes; j2 is still in flight at shutdown.
    let id = jobs[0].id.as_str();
    w.ack(id, &ack_of(&jobs[0]), "").await.unwrap();
    let stats: serde_json::Value = http
        .get(format!("{b}/v1/stats"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["queue"]["leased"], 1);

    srv.stop.take().unwrap().send(()).unwrap();
    srv.done.await.unwrap().unwrap();
    // A server restart keeps the live lease: the worker still holds j2 and can finish it
    // against the next server (same store).
    let other = if id == "j1" { "j2" } else { "j1" };
    let st = srv.store.status(other).await.unwrap().unwrap();
    assert!(
        matches!(st.state, JobState::Leased { .. }),
        "the live lease survives the shutdown: {st:?}"
    );
    let other_tok = jobs[1].lease.token.clone();
    let mut srv2 = start_on(srv.store.clone()).await;
    let b2 = srv2.base.clone();
    let w2 = worker_client(&b2, WORKER, "w");
    // A stopping worker hands it back: ready at once, and the attempt is not counted.
    w2.release(other, &other_tok, "").await.unwrap();
    let st = srv2.store.status(other).await.unwrap().unwrap();
    assert_eq!(
        st.state,
        JobState::Queued { available_at: 0 },
        "handed back"
    );
    assert_eq!(st.attempt, 0, "the handed-back delivery does not count");
    let again = w2.release(other, &other_tok, "").await.unwrap_err();
    assert!(
        matches!(again, ternflow_core::Error::LeaseLost(_)),
        "only the holder can release: {again}"
    );
    srv2.stop.take().unwrap().send(()).unwrap();
    srv2.done.await.unwrap().unwrap();
    assert!(matches!(
        srv.store.status(id).await.unwrap().unwrap().state,
        JobState::Done { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_query_tokens_are_percent_decoded_and_streams_per_token_are_bounded() {
    let mut srv = start_with(
        Arc::new(MemoryStore::new()),
        Config {
            keepalive_ms: 200,
            max_streams_per_token: 2,
            ..Config::default()
        },
    )
    .await;
    let http = reqwest::Client::new();
    let b = srv.base.clone();
    // `EventSource` cannot send headers: the token rides in the query, percent-encoded.
    let enc: String = WORKER_B64
        .bytes()
        .map(|c| match c {
            b'/' => "%2F".to_owned(),
            b'+' => "%2B".to_owned(),
            b'=' => "%3D".to_owned(),
            c => (c as char).to_string(),
        })
        .collect();
    let open = || http.get(format!("{b}/v1/events?token={enc}")).send();
    let first = open().await.unwrap();
    assert_eq!(first.status(), 200, "a token holding /+= is accepted");
    let second = open().await.unwrap();
    assert_eq!(second.status(), 200);
    let third = open().await.unwrap();
    assert_eq!(third.status(), 429, "a third stream for the same token");
    let body: serde_json::Value = third.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_requests");
    // Another token is not affected.
    let other = http
        .get(format!("{b}/v1/events"))
        .bearer_auth(WORKER)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200);
    // Closing a stream frees its slot.
    drop(first);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let r = open().await.unwrap();
        if r.status() == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the slot is freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop((second, other));
    srv.stop.take().unwrap().send(()).unwrap();
    srv.done.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_hear_finished_jobs_and_workers_do_not() {
    let mut srv = start().await;
    let http = reqwest::Client::new();
    let b = srv.base.clone();
    let open = |token: &'static str| {
        let (http, b) = (http.clone(), b.clone());
        async move {
            http.get(format!("{b}/v1/events"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .bytes_stream()
        }
    };
    let mut producer = open(PRODUCER).await;
    let mut worker = open(WORKER).await;
    let (mut pbuf, mut wbuf) = (String::new(), String::new());
    read_events(&mut producer, &mut pbuf, 1).await; // hello
    read_events(&mut worker, &mut wbuf, 1).await;
    http.post(format!("{b}/v1/jobs"))
        .bearer_auth(PRODUCER)
        .json(&json!({"id": "fin", "text": "finish me"}))
        .send()
        .await
        .unwrap();
    let w = worker_client(&b, WORKER, "w");
    let jobs = w.claim(1, 0).await.unwrap();
    w.ack("fin", &ack_of(&jobs[0]), "").await.unwrap();
    let evs = read_events(&mut producer, &mut pbuf, 1).await;
    assert_eq!(evs[0].event, "finished", "{evs:?}");
    assert_eq!(evs[0].data, json!({"done": ["fin"]}));
    assert!(
        evs[0].id.is_some(),
        "numbered: resumable with Last-Event-ID"
    );
    // The worker hears the enqueue's `jobs` event, never `finished`.
    let evs = read_events(&mut worker, &mut wbuf, 1).await;
    assert_eq!(evs[0].event, "jobs");
    drop((producer, worker));
    srv.stop.take().unwrap().send(()).unwrap();
    srv.done.await.unwrap().unwrap();
}

/// A browser worker's session lives as long as its event stream: when the stream drops (the
/// tab closed and took the worker with it, whether or not its page's hand-back got out) and no
/// other opens within `GONE_AFTER_MS` (600 ms), the session's leases are handed back and its
/// claims refused. A reconnect in time keeps it; a session without a stream is left to its
/// leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_stream_drops_for_good_hands_its_leases_back() {
    let mut srv = start().await;
    let http = reqwest::Client::new();
    let b = srv.base.clone();
    let jobs: Vec<_> = (0..4)
        .map(|i| json!({"id": format!("g{i}"), "text": format!("gone {i}")}))
        .collect();
    let r = http
        .post(format!("{b}/v1/jobs"))
        .bearer_auth(PRODUCER)
        .json(&json!({ "jobs": jobs }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let claim = |session: &'static str, max: u32| {
        let (http, b) = (http.clone(), b.clone());
        async move {
            http.post(format!("{b}/v1/jobs/claim"))
                .bearer_auth(WORKER)
                .json(&json!({"worker": "tab", "max": max, "session": session}))
                .send()
                .await
                .unwrap()
        }
    };
    let state_of = |id: &'static str| {
        let (http, b) = (http.clone(), b.clone());
        async move {
            let r: serde_json::Value = http
                .get(format!("{b}/v1/jobs/{id}"))
                .bearer_auth(WORKER)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            r["state"].as_str().unwrap().to_owned()
        }
    };
    let stream = || {
        http.get(format!("{b}/v1/events?token={WORKER}&session=tab-1"))
            .send()
    };
    let mut first = stream().await.unwrap().bytes_stream();
    let mut hello = String::new();
    while !hello.contains("\n\n") {
        let chunk = first.next().await.unwrap().unwrap();
        hello.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(
        hello.contains("retry: 150"),
        "the stream asks for a quick reconnect: {hello}"
    );
    let r = claim("tab-1", 2).await;
    assert_eq!(r.status(), 200);
    let held: serde_json::Value = r.json().await.unwrap();
    assert_eq!(held["jobs"].as_array().unwrap().len(), 2);
    // A session that never opened a stream: nothing watches it.
    assert_eq!(claim("tab-2", 1).await.status(), 200);

    // A reconnect: the new stream opens before the old one's drop is 600 ms old.
    let second = stream().await.unwrap();
    drop(first);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    for id in ["g0", "g1"] {
        assert_eq!(state_of(id).await, "leased", "{id}: the session lives on");
    }
    // The tab closes: the stream drops and nothing reconnects.
    drop(second);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let t0 = tokio::time::Instant::now();
    while state_of("g0").await != "queued" || state_of("g1").await != "queued" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the leases were not handed back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let freed = t0.elapsed();
    assert!(
        freed >= Duration::from_millis(550),
        "handed back after {freed:?}: too soon"
    );
    let r = claim("tab-1", 4).await;
    assert_eq!(r.status(), 409);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "session_ended");
    assert_eq!(state_of("g2").await, "leased", "tab-2's lease is its own");

    srv.stop.take().unwrap().send(()).unwrap();
    srv.done.await.unwrap().unwrap();
}
