//! The typed messages between the page and the worker, and between the worker and its engine
//! worker (`postMessage`), as serde enums.
//!
//! Requests carry an `id` the reply repeats, so the page can have many in flight. The JS glue in
//! `www/` only forwards these objects; their shapes are defined here, once.

use serde::{Deserialize, Serialize};

use crate::protocol::{LeaseRef, ResultSource, TextInfo, WorkerMetrics};
pub use crate::queue::claim_loop::RunSummary;

/// Where the worker finds its server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerOptions {
    /// Base URL, e.g. `http://127.0.0.1:8787`.
    pub url: String,
    /// Bearer token with the `worker` role.
    #[serde(default)]
    pub token: String,
    /// The page can mint fresh tokens (its `token` option is a function): the worker asks with
    /// [`FromWorker::TokenNeeded`] before its token expires and on a 401, and the page answers
    /// with [`ToWorker::Token`].
    #[serde(default)]
    pub renewable: bool,
}

/// A request from the page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ToWorker {
    /// Configure the worker (and connect to a server when one is given).
    #[serde(rename_all = "camelCase")]
    Init {
        /// Request id.
        id: u32,
        /// The server, if any (without one: local cache and engine only).
        #[serde(default)]
        server: Option<ServerOptions>,
        /// Settings (partial: the rest keeps its defaults).
        #[serde(default)]
        config: Option<serde_json::Value>,
        /// Name of the IndexedDB database (default `ternflow`).
        #[serde(default)]
        db_name: Option<String>,
        /// Most entries kept in IndexedDB.
        #[serde(default)]
        max_local_entries: Option<u32>,
    },
    /// Load a model from a URL (cached with the Cache API), checked against `sha256` if given.
    #[serde(rename_all = "camelCase")]
    LoadModel {
        /// Request id.
        id: u32,
        /// Where the TERN v1 file is.
        url: String,
        /// Expected SHA-256 of the file (hex), if known.
        #[serde(default)]
        sha256: Option<String>,
        /// Post [`FromWorker::Progress`] events while it downloads.
        #[serde(default)]
        progress: bool,
    },
    /// Load a model from bytes the page already has (a transferred `ArrayBuffer` or a
    /// `Uint8Array`): for pages that fetch it themselves, and the edge, which bundles it.
    LoadModelBytes {
        /// Request id.
        id: u32,
        /// The TERN v1 file.
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
    },
    /// Embed texts through the caches (no queue).
    Embed {
        /// Request id.
        id: u32,
        /// The texts.
        texts: Vec<String>,
        /// Post [`FromWorker::Progress`] events as texts finish.
        #[serde(default)]
        progress: bool,
        /// One result or error per text (`embedMany(texts, {settle: true})`) instead of the
        /// first failure failing the request.
        #[serde(default)]
        settle: bool,
        /// Also say what each vector covers ([`Embedding::info`]: the engine counts the texts'
        /// word pieces, a little work per text that `embedMany` does not ask for).
        #[serde(default)]
        info: bool,
        /// Word pieces to embed of each text at most (absent: whole texts; see core's
        /// `Pipeline::resolve_many_with` for where a cut vector is cached).
        #[serde(default, rename = "maxTokens", skip_serializing_if = "Option::is_none")]
        max_tokens: Option<u32>,
        /// The page's W3C `traceparent`: the texts' requests (remote cache, lock, backend) join
        /// its trace (absent: each text starts a trace of its own; malformed: refused).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        traceparent: Option<String>,
    },
    /// The page's `AbortSignal` fired for request `target` (no reply).
    Cancel {
        /// The request to cancel.
        target: u32,
    },
    /// Start pulling jobs from the server's queue.
    Start {
        /// Request id.
        id: u32,
        /// Jobs in flight at once.
        #[serde(default)]
        concurrency: Option<u32>,
        /// The share of wall time the engine may compute (`0.25`: a quarter of one core;
        /// absent or `1`: no budget). See `ternflow_core::cpu_budget`.
        #[serde(default, rename = "cpuShare")]
        cpu_share: Option<f64>,
        /// The page's id for this run, named in every claim (`ClaimRequest::session`): the
        /// page's hand-back when it goes away ends it, which hands back the claims the page
        /// could not know of yet. Holds across `stop()` and `start()` until the page sends
        /// another.
        #[serde(default)]
        session: Option<String>,
    },
    /// A new session for the worker's claims (no reply): the page's hand-back ended the old
    /// one (`pagehide`, `freeze`) and the page is back (a back-forward cache restore, a
    /// resumed tab).
    Session {
        /// The new session id.
        session: String,
    },
    /// Pause (`paused: true`: no new claims, jobs in hand finish) or resume the queue loop; no
    /// reply. The page sends it when the tab is hidden or shown, the visitor asks to save data,
    /// the battery runs low, or the site calls `pause()` / `resume()`. It holds across
    /// `stop()` and `start()`.
    Pause {
        /// Whether to pause.
        paused: bool,
    },
    /// Stop pulling; finish in-flight jobs until the deadline, then hand the rest back.
    #[serde(rename_all = "camelCase")]
    Stop {
        /// Request id.
        id: u32,
        /// Milliseconds from now to finish in-flight work (default 10 000).
        #[serde(default)]
        deadline_ms: Option<u64>,
    },
    /// A metrics snapshot.
    Stats {
        /// Request id.
        id: u32,
    },
    /// A fresh bearer token (the answer to [`FromWorker::TokenNeeded`], or pushed by the page
    /// whenever it likes); leases and in-flight jobs are untouched.
    Token {
        /// Request id.
        id: u32,
        /// The token.
        token: String,
    },
}

/// One embedded text in an [`FromWorker::Embedded`] reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Embedding {
    /// The vector.
    pub vector: Vec<f32>,
    /// Where it came from.
    pub source: ResultSource,
    /// What the vector covers of its text (absent when the engine cannot say: not loaded, or
    /// running another model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<TextInfo>,
}

/// A reply or an event from the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum FromWorker {
    /// `Init` or `LoadModel` done.
    #[serde(rename_all = "camelCase")]
    Ready {
        /// Request id.
        id: u32,
        /// The loaded model, if any.
        model_id: Option<String>,
    },
    /// `Embed` done.
    Embedded {
        /// Request id.
        id: u32,
        /// One per text, in order.
        embeddings: Vec<Embedding>,
    },
    /// `Start` accepted.
    Started {
        /// Request id.
        id: u32,
    },
    /// `Stop` done: the loop drained.
    Stopped {
        /// Request id.
        id: u32,
        /// What the loop did.
        summary: RunSummary,
    },
    /// `Stats` reply.
    Stats {
        /// Request id.
        id: u32,
        /// The snapshot.
        metrics: WorkerMetrics,
    },
    /// The worker needs a fresh token (no request): answer with [`ToWorker::Token`].
    TokenNeeded {},
    /// A [`ToWorker::Token`] was applied.
    TokenUpdated {
        /// Request id.
        id: u32,
    },
    /// A periodic metrics snapshot (no request).
    Metrics {
        /// The snapshot.
        metrics: WorkerMetrics,
    },
    /// The leases the queue loop took and gave up since the last such message (no request;
    /// see `ternflow_core::queue::lease_journal`): the page keeps them, to hand them all back in
    /// one request that outlives it when it goes away. Apply `gone`, then `held`.
    Leases {
        /// Leases taken.
        held: Vec<LeaseRef>,
        /// Jobs whose lease the worker no longer holds.
        gone: Vec<String>,
    },
    /// How far a `LoadModel` or `Embed` with `progress: true` is (no reply of its own).
    Progress {
        /// The request.
        id: u32,
        /// `model` (bytes downloaded) or `embed` (texts finished).
        phase: String,
        /// Done so far.
        loaded: u64,
        /// The whole, when known.
        total: Option<u64>,
    },
    /// A request failed.
    Error {
        /// Request id.
        id: u32,
        /// Machine-readable code.
        code: String,
        /// Detail.
        message: String,
        /// Whether trying again later may succeed.
        #[serde(default)]
        retryable: bool,
        /// The URL the failure is about (a model download), if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
    },
}

impl ToWorker {
    /// The request id a reply repeats (`None` for a cancel, which gets no reply).
    pub fn id(&self) -> Option<u32> {
        match self {
            ToWorker::Init { id, .. }
            | ToWorker::LoadModel { id, .. }
            | ToWorker::LoadModelBytes { id, .. }
            | ToWorker::Embed { id, .. }
            | ToWorker::Start { id, .. }
            | ToWorker::Stop { id, .. }
            | ToWorker::Stats { id }
            | ToWorker::Token { id, .. } => Some(*id),
            ToWorker::Cancel { .. } | ToWorker::Pause { .. } | ToWorker::Session { .. } => None,
        }
    }
}

/// A request from the pipeline's worker to its engine worker (`www/engine-worker.js` forwards it
/// to the wasm's `engineHandle`). The first message, `{type: "init", module}`, carries the
/// compiled `WebAssembly.Module` and is read by the JS itself, before the wasm runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ToEngine {
    /// Load a model (replacing the one loaded).
    Load {
        /// Request id.
        id: u32,
        /// The TERN v1 file (sent as a transferred `ArrayBuffer`).
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
    },
    /// Embed texts with the loaded model.
    Embed {
        /// Request id.
        id: u32,
        /// The texts.
        texts: Vec<String>,
        /// Word pieces to embed of each at most (absent: whole texts).
        #[serde(default, rename = "maxTokens", skip_serializing_if = "Option::is_none")]
        max_tokens: Option<u32>,
    },
    /// Count what embedding texts would cover (word pieces only, no forward pass).
    Count {
        /// Request id.
        id: u32,
        /// The texts.
        texts: Vec<String>,
        /// As [`ToEngine::Embed`]'s.
        #[serde(default, rename = "maxTokens", skip_serializing_if = "Option::is_none")]
        max_tokens: Option<u32>,
    },
}

/// A reply from the engine worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum FromEngine {
    /// `Load` done.
    #[serde(rename_all = "camelCase")]
    Loaded {
        /// Request id.
        id: u32,
        /// The model's id.
        model_id: String,
        /// Its vectors' length.
        dim: u32,
        /// The engine worker's wasm memory, bytes (0 when not reported).
        #[serde(default)]
        memory_bytes: f64,
    },
    /// The engine refused the model (permanent for these bytes).
    Refused {
        /// Request id.
        id: u32,
        /// The engine's message.
        message: String,
    },
    /// `Embed` done. Beside these fields the message carries `vectors`: one transferred
    /// `Float32Array` of `texts × dim` values, text after text (set outside serde: a typed array
    /// crosses without a copy per number).
    #[serde(rename_all = "camelCase")]
    Embedded {
        /// Request id.
        id: u32,
        /// The engine worker's wasm memory, bytes (0 when not reported).
        #[serde(default)]
        memory_bytes: f64,
    },
    /// `Count` done: one per text, in order.
    Counted {
        /// Request id.
        id: u32,
        /// What embedding each text covers.
        info: Vec<TextInfo>,
    },
    /// The engine worker cannot go on (its wasm did not start, or trapped): every request it
    /// owes fails, and the model moves to the pipeline's thread.
    Broken {
        /// Why.
        message: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_are_tagged_camel_case() {
        let m: ToWorker = serde_json::from_value(json!({
            "type": "init", "id": 1, "server": {"url": "http://x", "token": "t"},
            "maxLocalEntries": 10
        }))
        .unwrap();
        assert!(matches!(
            m,
            ToWorker::Init {
                id: 1,
                max_local_entries: Some(10),
                ..
            }
        ));
        let s: ToWorker =
            serde_json::from_value(json!({"type": "stop", "id": 2, "deadlineMs": 5})).unwrap();
        assert_eq!(
            s,
            ToWorker::Stop {
                id: 2,
                deadline_ms: Some(5)
            }
        );
        let r = FromWorker::Ready {
            id: 1,
            model_id: Some("m".into()),
        };
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"type": "ready", "id": 1, "modelId": "m"})
        );
        assert!(serde_json::from_value::<ToWorker>(json!({"type": "nope", "id": 1})).is_err());
        let e: ToWorker = serde_json::from_value(
            json!({"type": "embed", "id": 3, "texts": ["a"], "progress": true, "settle": true}),
        )
        .unwrap();
        assert_eq!(
            e,
            ToWorker::Embed {
                id: 3,
                texts: vec!["a".into()],
                progress: true,
                settle: true,
                info: false,
                max_tokens: None,
                traceparent: None,
            }
        );
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let e: ToWorker = serde_json::from_value(
            json!({"type": "embed", "id": 5, "texts": ["a"], "traceparent": tp}),
        )
        .unwrap();
        assert!(
            matches!(&e, ToWorker::Embed { traceparent: Some(t), .. } if t == tp),
            "{e:?}"
        );
        let c: ToWorker = serde_json::from_value(json!({"type": "cancel", "target": 3})).unwrap();
        assert_eq!(c.id(), None);
        let b: ToWorker =
            serde_json::from_value(json!({"type": "loadModelBytes", "id": 4, "bytes": [1, 2]}))
                .unwrap();
        assert_eq!(b.id(), Some(4));
        let p = FromWorker::Progress {
            id: 3,
            phase: "embed".into(),
            loaded: 1,
            total: None,
        };
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            json!({"type": "progress", "id": 3, "phase": "embed", "loaded": 1, "total": null})
        );
        let l = FromEngine::Loaded {
            id: 1,
            model_id: "m".into(),
            dim: 384,
            memory_bytes: 65536.0,
        };
        assert_eq!(
            serde_json::to_value(&l).unwrap(),
            json!({"type": "loaded", "id": 1, "modelId": "m", "dim": 384, "memoryBytes": 65536.0})
        );
        let e: ToEngine =
            serde_json::from_value(json!({"type": "embed", "id": 2, "texts": ["a"]})).unwrap();
        assert_eq!(
            e,
            ToEngine::Embed {
                id: 2,
                texts: vec!["a".into()],
                max_tokens: None,
            }
        );
        let c = ToEngine::Count {
            id: 3,
            texts: vec!["a".into()],
            max_tokens: Some(9),
        };
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            json!({"type": "count", "id": 3, "texts": ["a"], "maxTokens": 9})
        );
        let n: FromEngine = serde_json::from_value(json!({"type": "counted", "id": 3,
            "info": [{"tokens": 1, "chunks": 1, "truncated": false}]}))
        .unwrap();
        assert_eq!(
            n,
            FromEngine::Counted {
                id: 3,
                info: vec![TextInfo {
                    tokens: 1,
                    chunks: 1,
                    truncated: false
                }]
            }
        );
    }
}
