//! The backend inference endpoint and the model file.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;
use ternflow_server::{app, AppState, Config, Embedder, MemoryStore};

use crate::common::{call, state_with, Api, WORKER};

#[tokio::test]
async fn embed_batches_and_reports_model() {
    let (state, _) = state_with(Config::default());
    let app = app(state);
    let api = Api(app.clone());
    let r = api
        .post(Some(WORKER), "/v1/embed", json!({"texts": ["a", "b", "a"]}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json["model_id"], "00000000deadbeef");
    let v = r.json["vectors"].as_array().unwrap();
    assert_eq!(v.len(), 3);
    assert_eq!(v[0], v[2]);
    assert_ne!(v[0], v[1]);
    let decoded = ternflow_core::codec::decode_vector(v[0].as_str().unwrap()).unwrap();
    let norm: f32 = decoded.iter().map(|x| x * x).sum();
    assert!((norm - 1.0).abs() < 1e-4);
    let r = api
        .post(Some(WORKER), "/v1/embed", json!({"texts": []}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

#[derive(Debug)]
struct SlowEmbedder;

impl Embedder for SlowEmbedder {
    fn model_id(&self) -> String {
        "5105105105105105".to_owned()
    }
    fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        std::thread::sleep(Duration::from_millis(300));
        Ok(texts.iter().map(|_| vec![1.0]).collect())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embed_queue_full_is_429_with_retry_after() {
    let state = AppState::new(
        Arc::new(MemoryStore::new()),
        crate::common::tokens(),
        Config {
            embed_queue: 1,
            embed_batch: 1,
            ..Config::default()
        },
    )
    .with_embedder(Arc::new(SlowEmbedder));
    let app = app(state);
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let app = app.clone();
        let api = Api(app.clone());
        tasks.push(tokio::spawn(async move {
            api.post(Some(WORKER), "/v1/embed", json!({"texts": ["x"]}))
                .await
        }));
    }
    let mut ok = 0;
    let mut limited = 0;
    for t in tasks {
        let r = t.await.unwrap();
        match r.status {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                assert!(r.headers.contains_key("retry-after"));
                limited += 1;
            }
            s => panic!("unexpected {s}"),
        }
    }
    assert!(ok >= 1 && limited >= 1, "ok {ok}, limited {limited}");
}

#[tokio::test]
async fn no_model_is_503() {
    let state = AppState::new(
        Arc::new(MemoryStore::new()),
        crate::common::tokens(),
        Config::default(),
    );
    let r = call(
        &app(state),
        "POST",
        "/v1/embed",
        Some(WORKER),
        Some(json!({"texts": ["x"]})),
    )
    .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.headers.contains_key("retry-after"));
}

#[tokio::test]
async fn embed_with_the_real_engine() {
    use ternflow_engine::{testing, EmbeddingFormat, Engine};
    let file = testing::generate(&testing::tiny_config(EmbeddingFormat::Int4), 7);
    let mut reference = Engine::from_bytes(&file).unwrap();
    let embedder = ternflow_server::EngineEmbedder::from_bytes(&file).unwrap();
    let model_id = embedder.model_id();
    assert_eq!(model_id, reference.model_id());
    let state = AppState::new(
        Arc::new(MemoryStore::new()),
        crate::common::tokens(),
        Config::default(),
    )
    .with_embedder(Arc::new(embedder));
    let app = app(state);
    let api = Api(app.clone());
    let r = api
        .post(
            Some(WORKER),
            "/v1/embed",
            json!({"texts": ["Hello, world!", "ternary weights"]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json["model_id"], model_id.as_str());
    for (i, text) in ["Hello, world!", "ternary weights"].iter().enumerate() {
        let got =
            ternflow_core::codec::decode_vector(r.json["vectors"][i].as_str().unwrap()).unwrap();
        assert_eq!(got, reference.embed(text), "{text}");
    }
    // What each vector covers, and max_tokens (either spelling) cutting a text: the same vector
    // and the same account as the engine's own embed_with.
    let long = "ternary weights and int8 activations ".repeat(40);
    for (key, max) in [
        ("max_tokens", Some(7usize)),
        ("maxTokens", Some(7)),
        ("none", None),
    ] {
        let mut body = json!({"texts": [long, "Hello, world!"]});
        if let Some(m) = max {
            body[key] = json!(m);
        }
        let r = api.post(Some(WORKER), "/v1/embed", body).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        for (i, text) in [long.as_str(), "Hello, world!"].iter().enumerate() {
            let mut want = vec![0.0; reference.output_dim()];
            let info = reference.embed_with(
                text,
                ternflow_engine::EmbedOptions { max_tokens: max },
                &mut want,
            );
            let got = ternflow_core::codec::decode_vector(r.json["vectors"][i].as_str().unwrap())
                .unwrap();
            assert_eq!(got, want, "{key} {text}");
            assert_eq!(
                r.json["info"][i],
                json!({"tokens": info.tokens, "chunks": info.chunks, "truncated": info.truncated}),
                "{key} {text}"
            );
        }
        let long_info = &r.json["info"][0];
        assert_eq!(long_info["truncated"], max.is_some(), "{key}: {long_info}");
        if max.is_none() {
            assert!(long_info["chunks"].as_u64().unwrap() > 1, "{long_info}");
        }
    }
    let r = api
        .post(
            Some(WORKER),
            "/v1/embed",
            json!({"texts": ["a"], "max_tokens": 0}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    // Jobs without a model_id get the server's, and their ids hash it.
    let r = api.enqueue(json!({"text": "x"})).await;
    assert_eq!(
        r.json["jobs"][0]["id"],
        ternflow_core::keys::job_id(&model_id, "x")
    );
    // A done job's status says what its vector covers of its text, counted by the server
    // (jobs are embedded whole); a worker is not asked.
    let long = "ternary weights and int8 activations ".repeat(40);
    let r = api
        .enqueue(json!({"jobs": [{"text": long}, {"text": "short"}]}))
        .await;
    let ids: Vec<String> = r.json["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect();
    for j in api.claim(10).await {
        let text = j["text"].as_str().unwrap();
        let vector = ternflow_core::codec::encode_vector(&reference.embed(text));
        let body = json!({"token": j["lease"]["token"], "result":
            {"model_id": model_id, "vector": vector, "source": "engine"}});
        let id = j["id"].as_str().unwrap();
        let r = api
            .post(Some(WORKER), &format!("/v1/jobs/{id}/ack"), body)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    }
    // What the engine itself says when it embeds them.
    let mut counted = |text: &str| {
        let mut v = vec![0.0; reference.output_dim()];
        let i = reference.embed_with(text, ternflow_engine::EmbedOptions::default(), &mut v);
        json!({"tokens": i.tokens, "chunks": i.chunks, "truncated": false})
    };
    let want = [counted(&long), counted("short")];
    let listed = api
        .post(
            Some(WORKER),
            "/v1/jobs/status",
            json!({"ids": ids, "vectors": false}),
        )
        .await;
    for (i, (id, want)) in ids.iter().zip(&want).enumerate() {
        let s = api.status(id).await;
        assert_eq!(s.json["state"], "done", "{}", s.text);
        assert_eq!(&s.json["info"], want, "{}", s.text);
        assert_eq!(&listed.json["jobs"][i]["info"], want, "{}", listed.text);
    }
    assert!(want[0]["chunks"].as_u64().unwrap() > 1, "{}", want[0]);
}

#[tokio::test]
async fn model_file_is_served_with_its_id() {
    use ternflow_engine::{testing, EmbeddingFormat};
    let (state, _) = state_with(Config::default());
    let app_without = app(state);
    let r = call(&app_without, "GET", "/v1/model", None, None).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json["error"]["code"], "not_found");

    let file = testing::generate(&testing::tiny_config(EmbeddingFormat::Int8), 3);
    let embedder = ternflow_server::EngineEmbedder::from_bytes(&file).unwrap();
    let model_id = embedder.model_id();
    let state = AppState::new(
        Arc::new(MemoryStore::new()),
        crate::common::tokens(),
        Config::default(),
    )
    .with_embedder(Arc::new(embedder))
    .with_model_file(file.clone());
    let app = app(state);
    let api = Api(app.clone());
    let r = api.get(None, "/v1/model").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers["x-ternflow-model-id"], model_id.as_str());
    let etag = r.headers["etag"].to_str().unwrap().to_owned();
    assert_eq!(etag, format!("\"{model_id}\""));
    assert_eq!(r.bytes.len(), file.len());
    assert!(r.bytes == file, "the exact file");

    let req = axum::http::Request::builder()
        .uri("/v1/model")
        .header("if-none-match", etag)
        .body(axum::body::Body::empty())
        .unwrap();
    let resp = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_MODIFIED);
}
