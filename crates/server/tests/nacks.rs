//! A worker's nack is untrusted input (`crate::queue::fail`): a nack that would end a job the
//! server can do is overruled by the server doing it; a nack sent as permanent for a model the
//! server cannot run is retried; so one worker token cannot dead-letter a tenant's queue.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::http::StatusCode;
use base64::Engine as _;
use common::{tokens, Api, ADMIN, WORKER};
use serde_json::{json, Value};
use ternflow_core::protocol::Vector;
use ternflow_server::integrity::Policy;
use ternflow_server::jwt::{mint_hs256, Claims, Keys};
use ternflow_server::{AppState, Config, Embedder, FakeClock, HashEmbedder, MemoryStore};

const NOW_MS: u64 = 1_700_000_000_000;
const SECRET: &[u8] = b"nack-secret-nack-secret-nack-sec";

/// The hash embedder, counting the texts it is asked to embed (what the server spends), and
/// failing on any text that starts with `poison` (an engine that cannot embed a text).
struct Counting(HashEmbedder, Arc<AtomicUsize>);

impl Embedder for Counting {
    fn model_id(&self) -> String {
        self.0.model_id()
    }

    fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        self.1.fetch_add(texts.len(), Ordering::SeqCst);
        if texts.iter().any(|t| t.starts_with("poison")) {
            return Err("the engine failed on this text".to_owned());
        }
        self.0.embed_batch(texts)
    }
}

fn setup(cfg: Config) -> (AppState, Api, FakeClock) {
    setup_counting(cfg).0
}

/// [`setup`], and how many texts the server's engine has embedded so far.
fn setup_counting(cfg: Config) -> ((AppState, Api, FakeClock), Arc<AtomicUsize>) {
    let embedded = Arc::new(AtomicUsize::new(0));
    let clock = FakeClock::new(NOW_MS);
    let keys = Keys::parse(&format!(
        "k1:hs256:{}",
        base64::engine::general_purpose::STANDARD.encode(SECRET)
    ))
    .unwrap();
    let state = AppState::new(Arc::new(MemoryStore::new()), tokens(), cfg)
        .with_clock(Arc::new(clock.clone()))
        .with_keys(keys)
        .with_tenant_stores(Arc::new(|_tenant| {
            Box::pin(async { Ok(Arc::new(MemoryStore::new()) as Arc<dyn ternflow_server::Store>) })
        }))
        .with_embedder(Arc::new(Counting(
            HashEmbedder::default(),
            embedded.clone(),
        )));
    let api = Api(ternflow_server::app(state.clone()));
    ((state, api, clock), embedded)
}

/// A signed token of tenant `acme` with `role` and `sub`.
fn mint(role: &str, sub: Option<&str>) -> String {
    let now = NOW_MS / 1_000;
    let claims = Claims {
        role: role.into(),
        tenant: "acme".into(),
        exp: now + 1_800, // past the 10-minute hold the last test heartbeats through
        nbf: None,
        iat: Some(now),
        sub: sub.map(Into::into),
        claims_per_min: None,
    };
    mint_hs256("k1", SECRET, &claims).unwrap()
}

/// A visitor's worker token of tenant `acme`.
fn visitor(sub: &str) -> String {
    mint("worker", Some(sub))
}

fn admin_of_acme() -> String {
    mint("admin", None)
}

const FOREIGN: &str = "feedfacefeedface";

/// Enqueues job `id` of a model the server does not run, as acme's admin.
async fn enqueue_foreign(api: &Api, admin: &str, id: &str) {
    enqueue_as(
        api,
        admin,
        json!([{"id": id, "text": "foreign", "model_id": FOREIGN}]),
    )
    .await;
}

async fn enqueue_as(api: &Api, token: &str, jobs: Value) {
    let r = api
        .post(Some(token), "/v1/jobs", json!({ "jobs": jobs }))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

async fn claim_as(api: &Api, token: &str, max: u32, model: Option<&str>) -> Vec<Value> {
    let mut body = json!({"worker": "w1", "max": max});
    if let Some(m) = model {
        body["model_id"] = json!(m);
    }
    let r = api.post(Some(token), "/v1/jobs/claim", body).await;
    assert_eq!(r.status, StatusCode::OK, "claim: {}", r.text);
    r.json["jobs"].as_array().cloned().unwrap_or_default()
}

/// Nacks every job in `jobs` in one batch, permanent or not; the outcomes in order.
async fn nack_all(api: &Api, token: &str, jobs: &[Value], retryable: bool) -> Vec<String> {
    let nacks: Vec<Value> = jobs
        .iter()
        .map(|j| {
            json!({"id": j["id"], "token": j["lease"]["token"],
                   "error": {"code": "engine_failed", "message": "no", "retryable": retryable}})
        })
        .collect();
    let r = api
        .post(Some(token), "/v1/jobs/nack", json!({ "nacks": nacks }))
        .await;
    assert_eq!(r.status, StatusCode::OK, "nack: {}", r.text);
    r.json["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["outcome"].as_str().unwrap().to_owned())
        .collect()
}

async fn job_as(api: &Api, token: &str, id: &str) -> Value {
    let r = api.get(Some(token), &format!("/v1/jobs/{id}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    r.json
}

/// The attack this closes: a visitor's worker token claims the tenant's jobs and nacks them all
/// as permanent. Before, every one went to the dead-letter queue in one request; now the server,
/// which runs the jobs' model, embeds them itself, and the jobs are done, right, by the server.
#[tokio::test]
async fn a_permanent_nack_of_the_servers_model_is_done_by_the_server() {
    let (state, api, _clock) = setup(Config::default());
    let admin = admin_of_acme();
    let texts = ["alpha beta", "gamma delta", "epsilon"];
    let jobs: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"id": format!("j{i}"), "text": t}))
        .collect();
    enqueue_as(&api, &admin, json!(jobs)).await;
    let mallory = visitor("mallory");
    let claimed = claim_as(&api, &mallory, 16, None).await;
    assert_eq!(claimed.len(), 3);
    assert_eq!(nack_all(&api, &mallory, &claimed, false).await, ["done"; 3]);
    for (i, text) in texts.iter().enumerate() {
        let j = job_as(&api, &admin, &format!("j{i}")).await;
        assert_eq!(j["state"], "done", "{j}");
        let v: Vector = serde_json::from_value(j["result"]["vector"].clone()).unwrap();
        let want = HashEmbedder::default()
            .embed_batch(&[(*text).to_owned()])
            .unwrap()
            .remove(0);
        assert_eq!(v.0, want, "the server's own vector");
        assert_eq!(j["result"]["source"], "backend");
        assert_eq!(j["result"]["by"]["sub"], "server", "{j}");
        assert_eq!(j["result"]["by"]["verified"], true);
        // Written through to the remote cache, as a worker's ack would be.
        let key = ternflow_core::keys::cache_key(j["result"]["model_id"].as_str().unwrap(), text);
        let c = api.get(Some(&admin), &format!("/v1/cache/{key}")).await;
        assert_eq!(c.status, StatusCode::OK, "{}", c.text);
        assert_eq!(c.json["by"]["sub"], "server", "{}", c.text);
    }
    let dlq = api.get(Some(&admin), "/v1/dlq").await;
    assert_eq!(
        dlq.json["entries"].as_array().unwrap().len(),
        0,
        "{}",
        dlq.text
    );
    assert_eq!(state.metrics().counter_value("jobs_dead"), 0);
}

/// An honest worker that keeps failing a job: on its last attempt the server does the job
/// rather than dead-letter what it can embed (the backend fallback, decided by the server).
#[tokio::test]
async fn the_last_failed_attempt_of_the_servers_model_is_done_by_the_server() {
    let (_state, api, clock) = setup(Config::default());
    let admin = admin_of_acme();
    enqueue_as(
        &api,
        &admin,
        json!([{"id": "hard", "text": "a text browsers fail on"}]),
    )
    .await;
    let w = visitor("honest");
    let max = Config::default().max_attempts;
    for attempt in 1..=max {
        clock.advance(120_000); // past the retry backoff
        let job = claim_as(&api, &w, 1, None).await;
        assert_eq!(job.len(), 1, "attempt {attempt}");
        let got = nack_all(&api, &w, &job, true).await;
        let want = if attempt < max { "retry" } else { "done" };
        assert_eq!(got, [want], "attempt {attempt}");
    }
    let j = job_as(&api, &admin, "hard").await;
    assert_eq!(j["state"], "done", "{j}");
    assert_eq!(j["result"]["by"]["sub"], "server");
}

/// For a model the server cannot run, a worker's "permanent" is not believed: the job is
/// retried, and dead-lettered only after its attempts, with the history of each.
#[tokio::test]
async fn a_permanent_nack_of_a_foreign_model_is_retried_until_the_attempts_run_out() {
    let (state, api, clock) = setup(Config::default());
    let admin = admin_of_acme();
    enqueue_foreign(&api, &admin, "f1").await;
    let w = visitor("mallory");
    let max = Config::default().max_attempts;
    for attempt in 1..=max {
        clock.advance(120_000);
        let job = claim_as(&api, &w, 1, Some(FOREIGN)).await;
        assert_eq!(job.len(), 1, "attempt {attempt}");
        let got = nack_all(&api, &w, &job, false).await;
        let want = if attempt < max { "retry" } else { "dead" };
        assert_eq!(got, [want], "attempt {attempt}");
    }
    let j = job_as(&api, &admin, "f1").await;
    assert_eq!(j["state"], "dead", "{j}");
    assert_eq!(j["history"].as_array().unwrap().len() as u32, max, "{j}");
    assert_eq!(
        state.metrics().counter_value("nacks_overruled"),
        u64::from(max),
        "each permanent nack was taken as retryable; the attempts, not the word, ended the job"
    );
}

/// A tenant whose workers are trusted (verification off) keeps the old rule: a permanent nack
/// dead-letters the job at once.
#[tokio::test]
async fn with_verification_off_a_permanent_nack_dead_letters_at_once() {
    let cfg = Config {
        verify: Policy {
            enabled: false,
            ..Policy::default()
        },
        ..Config::default()
    };
    let (_state, api, _clock) = setup(cfg);
    let r = api
        .enqueue(json!({"jobs": [{"id": "p1", "text": "poison"}]}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let job = claim_as(&api, WORKER, 1, None).await;
    assert_eq!(nack_all(&api, WORKER, &job, false).await, ["dead"]);
    assert_eq!(job_as(&api, ADMIN, "p1").await["state"], "dead");
}

/// When the server may not spend on the job now (the visitor's embed budget is spent), the job
/// stays alive: retried, not dead, so an exhausted budget never turns into lost work. Past its
/// attempts the claim hands it to the server (a claim charges no token: it is bounded by the
/// engine's queue, and by one embedding per job).
#[tokio::test]
async fn a_failed_job_the_budget_cannot_pay_for_stays_alive() {
    let cfg = Config {
        embed_tokens_per_min: 1, // less than any text costs
        ..Config::default()
    };
    let (state, api, clock) = setup(cfg);
    let admin = admin_of_acme();
    enqueue_as(
        &api,
        &admin,
        json!([{"id": "b1", "text": "costs more than one unit"}]),
    )
    .await;
    let w = visitor("mallory");
    let max = Config::default().max_attempts;
    for attempt in 1..=max {
        clock.advance(61_000); // past the longest retry backoff, within the token's lifetime
        let job = claim_as(&api, &w, 1, None).await;
        assert_eq!(job.len(), 1, "attempt {attempt}");
        assert_eq!(
            nack_all(&api, &w, &job, false).await,
            ["retry"],
            "attempt {attempt}"
        );
        assert_eq!(job_as(&api, &admin, "b1").await["state"], "queued");
    }
    clock.advance(61_000);
    assert!(claim_as(&api, &w, 1, None).await.is_empty());
    let j = job_as(&api, &admin, "b1").await;
    assert_eq!(j["state"], "done", "{j}");
    assert_eq!(j["result"]["by"]["sub"], "server");
    assert_eq!(state.metrics().counter_value("jobs_dead"), 0);
}

/// The single-job nack route answers `done` too.
#[tokio::test]
async fn the_single_nack_answers_done() {
    let (_state, api, _clock) = setup(Config::default());
    let admin = admin_of_acme();
    enqueue_as(&api, &admin, json!([{"id": "s1", "text": "single"}])).await;
    let w = visitor("mallory");
    let job = claim_as(&api, &w, 1, None).await.remove(0);
    let r = api
        .post(
            Some(&w),
            "/v1/jobs/s1/nack",
            json!({"token": job["lease"]["token"],
                   "error": {"code": "x", "message": "", "retryable": false}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json["outcome"], "done");
    assert_eq!(job_as(&api, &admin, "s1").await["state"], "done");
}

/// A worker that claims and never answers spends a job's attempts by expiry. When the last
/// allowed lease of a job of the server's model expires, the next claim does not dead-letter it:
/// the server embeds it, and that claim hands out nothing.
#[tokio::test]
async fn a_job_whose_last_lease_expires_is_done_by_the_server() {
    let (state, api, clock) = setup(Config::default());
    let admin = admin_of_acme();
    enqueue_as(
        &api,
        &admin,
        json!([{"id": "e1", "text": "claimed and dropped"}]),
    )
    .await;
    let w = visitor("mallory");
    let cfg = Config::default();
    for attempt in 1..=cfg.max_attempts {
        let job = claim_as(&api, &w, 1, None).await;
        assert_eq!(job.len(), 1, "attempt {attempt}");
        assert_eq!(job[0]["attempt"], attempt);
        clock.advance(cfg.lease_ms + 1); // never answered: the lease expires
    }
    assert!(claim_as(&api, &w, 1, None).await.is_empty());
    let j = job_as(&api, &admin, "e1").await;
    assert_eq!(j["state"], "done", "{j}");
    assert_eq!(j["result"]["by"]["sub"], "server");
    assert_eq!(j["result"]["source"], "backend");
    assert_eq!(state.metrics().counter_value("jobs_dead"), 0);
    assert_eq!(state.metrics().counter_value("jobs_done_by_server"), 1);
}

/// For a model the server cannot run, a job whose last allowed lease expired is dead-lettered
/// by the next claim, as before: `lease_expired`, each delivery in its history.
#[tokio::test]
async fn a_foreign_job_whose_last_lease_expires_is_dead_lettered() {
    let (state, api, clock) = setup(Config::default());
    let admin = admin_of_acme();
    enqueue_foreign(&api, &admin, "e2").await;
    let w = visitor("mallory");
    let cfg = Config::default();
    for attempt in 1..=cfg.max_attempts {
        let job = claim_as(&api, &w, 1, Some(FOREIGN)).await;
        assert_eq!(job.len(), 1, "attempt {attempt}");
        clock.advance(cfg.lease_ms + 1);
    }
    assert!(claim_as(&api, &w, 1, Some(FOREIGN)).await.is_empty());
    let j = job_as(&api, &admin, "e2").await;
    assert_eq!(j["state"], "dead", "{j}");
    assert_eq!(j["error"]["code"], "lease_expired", "{j}");
    let history = j["history"].as_array().unwrap();
    assert!(
        history
            .iter()
            .all(|h| h["error"]["code"] == "lease_expired"),
        "{j}"
    );
    // Every expired delivery is the token's, by its signed `sub`, whatever name the worker gave.
    assert!(history.len() as u32 > cfg.max_attempts, "{j}");
    assert!(history.iter().all(|h| h["sub"] == "mallory"), "{j}");
    assert_eq!(state.metrics().counter_value("jobs_dead"), 1);
}

/// A nack under a token that does not hold the lease costs the server nothing: it is refused
/// (`lease_lost`) before the server embeds anything, and the job stays with its holder.
#[tokio::test]
async fn a_nack_without_the_lease_is_refused_before_the_server_spends() {
    let ((state, api, _clock), embedded) = setup_counting(Config::default());
    let admin = admin_of_acme();
    enqueue_as(
        &api,
        &admin,
        json!([{"id": "l1", "text": "held by another"}]),
    )
    .await;
    let holder = visitor("honest");
    let job = claim_as(&api, &holder, 1, None).await;
    assert_eq!(job.len(), 1);
    let mut forged = job.clone();
    forged[0]["lease"]["token"] = json!("00000000000000000000000000000000");
    let mallory = visitor("mallory");
    assert_eq!(
        nack_all(&api, &mallory, &forged, false).await,
        ["lease_lost"]
    );
    assert_eq!(
        embedded.load(Ordering::SeqCst),
        0,
        "the server embedded nothing"
    );
    assert_eq!(state.metrics().counter_value("jobs_done_by_server"), 0);
    assert_eq!(job_as(&api, &admin, "l1").await["state"], "leased");
}

/// When the server's own engine fails on the text too, the worker's nack stands: the job is
/// dead-lettered, its error saying both.
#[tokio::test]
async fn a_job_the_server_fails_on_too_is_dead_lettered_with_both_reasons() {
    let ((_state, api, _clock), embedded) = setup_counting(Config::default());
    let admin = admin_of_acme();
    enqueue_as(&api, &admin, json!([{"id": "x1", "text": "poison pill"}])).await;
    let w = visitor("honest");
    let job = claim_as(&api, &w, 1, None).await;
    assert_eq!(nack_all(&api, &w, &job, false).await, ["dead"]);
    assert_eq!(embedded.load(Ordering::SeqCst), 1, "the server tried");
    let j = job_as(&api, &admin, "x1").await;
    assert_eq!(j["state"], "dead", "{j}");
    let message = j["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("no (the server failed too: ") && message.contains("engine failed"),
        "the worker's message, then the server's: {j}"
    );
}

/// A worker that claims a job and heartbeats forever, never finishing it, holds it at most
/// `max_lease_hold_ms`: then its heartbeat is refused (`lease_lost`) and the job goes to the
/// next claim. (Before, heartbeats extended a lease without end: a visitor could hold its
/// tenant's queue hostage.)
#[tokio::test]
async fn a_job_cannot_be_held_past_the_hold_by_heartbeats() {
    let (_state, api, clock) = setup(Config::default());
    let admin = admin_of_acme();
    enqueue_as(&api, &admin, json!([{"id": "h1", "text": "held hostage"}])).await;
    let cfg = Config::default();
    let mallory = visitor("mallory");
    let job = claim_as(&api, &mallory, 1, None).await.remove(0);
    let token = job["lease"]["token"].as_str().unwrap().to_owned();
    let mut held = 0;
    loop {
        clock.advance(cfg.lease_ms / 3);
        held += cfg.lease_ms / 3;
        let body = json!({"leases": [{"id": "h1", "token": token}]});
        let r = api.post(Some(&mallory), "/v1/jobs/heartbeat", body).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        let lease = &r.json["results"][0]["lease"];
        if lease.is_null() {
            break; // lost: the hold is used up
        }
        assert!(
            held < cfg.max_lease_hold_ms,
            "still extended after {held} ms: {lease}"
        );
        let expires_at = lease["expires_at"].as_u64().unwrap();
        assert!(expires_at <= NOW_MS + cfg.max_lease_hold_ms, "{lease}");
    }
    assert!(held >= cfg.max_lease_hold_ms, "refused after {held} ms");
    let honest = visitor("honest");
    let again = claim_as(&api, &honest, 1, None).await;
    assert_eq!(again.len(), 1, "the job went to the next claim");
    assert_eq!(again[0]["attempt"], 2);
}

/// Releases one delivery of job `id` held with `job`'s lease, as `token`; the HTTP status.
async fn release_as(api: &Api, token: &str, job: &Value) -> StatusCode {
    let id = job["id"].as_str().unwrap();
    let body = json!({"token": job["lease"]["token"]});
    api.post(Some(token), &format!("/v1/jobs/{id}/release"), body)
        .await
        .status
}

/// A worker that releases its job before the hold ends and claims it again (a released job is
/// first in line) keeps it only for the job's free releases: past them each release is an
/// attempt, and past the attempts the next claim has the server do the job. (Before, a release
/// used no attempt and began a fresh hold: a visitor could hold a job without end.)
#[tokio::test]
async fn a_job_cannot_be_held_by_releasing_and_claiming_it_again() {
    let (state, api, clock) = setup(Config::default());
    let admin = admin_of_acme();
    enqueue_as(
        &api,
        &admin,
        json!([{"id": "r1", "text": "released and taken"}]),
    )
    .await;
    let cfg = Config::default();
    let mallory = visitor("mallory");
    let mut attempts = Vec::new();
    loop {
        let job = claim_as(&api, &mallory, 1, None).await;
        let Some(job) = job.first() else { break };
        attempts.push(job["attempt"].as_u64().unwrap());
        assert!(
            attempts.len() <= 20,
            "the job is never taken from the hog: {attempts:?}"
        );
        clock.advance(cfg.lease_ms / 2); // (heartbeats would hold it up to the hold)
        assert_eq!(
            release_as(&api, &mallory, job).await,
            StatusCode::NO_CONTENT
        );
    }
    // Three free releases at attempt 1, then one attempt counted per release, 5 in all.
    assert_eq!(attempts, [1, 1, 1, 1, 2, 3, 4, 5]);
    let j = job_as(&api, &admin, "r1").await;
    assert_eq!(j["state"], "done", "{j}");
    assert_eq!(j["result"]["by"]["sub"], "server");
    let m = state.metrics();
    assert_eq!(m.counter_value("leases_released"), 8);
    assert_eq!(m.counter_value("releases_counted"), 5);
    assert_eq!(m.counter_value("jobs_done_by_server"), 1);
}

/// With verification off a counted release on the job's last attempt dead-letters it with
/// `released`, each counted release in its history with who released it.
#[tokio::test]
async fn with_verification_off_the_last_counted_release_dead_letters() {
    let cfg = Config {
        verify: Policy {
            enabled: false,
            ..Policy::default()
        },
        ..Config::default()
    };
    let (state, api, _clock) = setup(cfg.clone());
    let r = api
        .enqueue(json!({"jobs": [{"id": "r2", "text": "released"}]}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let rounds = cfg.free_releases + cfg.max_attempts;
    for round in 0..rounds {
        let job = claim_as(&api, WORKER, 1, None).await;
        assert_eq!(job.len(), 1, "round {round}");
        assert_eq!(
            release_as(&api, WORKER, &job[0]).await,
            StatusCode::NO_CONTENT
        );
    }
    assert!(claim_as(&api, WORKER, 1, None).await.is_empty());
    let j = job_as(&api, ADMIN, "r2").await;
    assert_eq!(j["state"], "dead", "{j}");
    assert_eq!(j["error"]["code"], "released", "{j}");
    let history = j["history"].as_array().unwrap();
    assert_eq!(history.len(), cfg.max_attempts as usize, "{j}");
    assert!(
        history
            .iter()
            .all(|h| h["error"]["code"] == "released" && h["worker"] == "w1"),
        "{j}"
    );
    assert_eq!(state.metrics().counter_value("jobs_dead"), 1);
}
