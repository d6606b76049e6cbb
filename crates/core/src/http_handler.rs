//! The embedding handler's HTTP contract, one for every runtime that answers requests: the edge
//! `fetch` handler (`www/edge/handler.mjs`, through the wasm's `handleHttp`) and the WASI
//! `wasi:http` handler. `POST {"texts": [...], "maxTokens"?: n}` answers `{"vectors": number[][],
//! "sources": string[], "info"?: [{"tokens", "chunks", "truncated"}]}` (`info` where the engine
//! runs the model: what each vector covers of its text; `maxTokens`, also read as `max_tokens`,
//! cuts each text at that many word pieces, see [`Pipeline::resolve_many_with`]); every error is
//! `{"error": {"code", "message"}}` — 405 for another method, 400
//! `bad_json` / `bad_request` for a malformed body, 413 for `text_too_long` and for a body over
//! [`MAX_BODY_BYTES`] (`too_large`), 400 for any other failure of a text, 503 when the model or
//! the settings cannot load (the adapter's own [`error`]).

use serde::{Deserialize, Serialize};

use crate::pipeline::{Pipeline, Ports, ResolveOptions};
use crate::protocol::{ResultSource, TextInfo};
use crate::Error;

/// Texts of one request resolved as one batch through the pipeline (one local-cache read and
/// one write each): bounds what one failure wastes.
pub const CHUNK: usize = 256;

/// A response: status and JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// JSON body.
    pub body: Vec<u8>,
}

/// A request's body.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Request {
    /// The texts, in order.
    pub texts: Vec<String>,
    /// Word pieces to embed of each text at most (≥ 1; absent: whole texts).
    #[serde(default, alias = "maxTokens")]
    pub max_tokens: Option<u32>,
}

/// The answer to a request whose texts all resolved.
#[derive(Debug, Serialize)]
pub struct Answer {
    /// One vector per text, in order. Each `f32` is written as the `f64` of the same value
    /// (`-0.023377183824777603`, not `-0.023377184`): a JSON reader gets the engine's exact bits
    /// back without rounding to `f32` itself (`JSON.parse` reads `f64`s), as the edge handler
    /// always answered.
    #[serde(serialize_with = "exact_f32s")]
    pub vectors: Vec<Vec<f32>>,
    /// Where each came from.
    pub sources: Vec<ResultSource>,
    /// What each vector covers of its text; absent when the engine cannot say (not loaded, or
    /// running another model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub info: Option<Vec<TextInfo>>,
}

fn exact_f32s<S: serde::Serializer>(vectors: &[Vec<f32>], s: S) -> Result<S::Ok, S::Error> {
    struct Row<'a>(&'a [f32]);
    impl Serialize for Row<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(self.0.iter().map(|&v| f64::from(v)))
        }
    }
    s.collect_seq(vectors.iter().map(|v| Row(v)))
}

/// `{"error": {"code", "message"}}` with `status`.
pub fn error(status: u16, code: &str, message: &str) -> Reply {
    let body = serde_json::json!({"error": {"code": code, "message": message}});
    Reply {
        status,
        body: body.to_string().into_bytes(),
    }
}

/// The largest request body a handler takes (the request is a stranger's): 1 MiB, 64 texts at
/// the default 16 KiB limit. Adapters that read the body as a stream stop reading past it.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// The 413 `too_large` reply for a body over [`MAX_BODY_BYTES`].
pub fn too_large() -> Reply {
    error(
        413,
        "too_large",
        &format!("the body is over {MAX_BODY_BYTES} bytes"),
    )
}

/// The embed cost of `texts`: `1 + bytes / 4` each, about a unit per word piece. The engine embeds
/// a text whole (a forward per window of 126 word pieces), so the cost follows the length. The
/// server's embed budget spends it; the handlers cap one request at [`MAX_REQUEST_UNITS`].
pub fn embed_units(texts: &[String]) -> u32 {
    texts
        .iter()
        .map(|t| 1u32.saturating_add(u32::try_from(t.len() / 4).unwrap_or(u32::MAX)))
        .fold(0u32, u32::saturating_add)
}

/// The most [`embed_units`] one handler request may ask for: 32 768, ~128 KiB of text, ~260
/// forwards. A full body (1 MiB of long texts) would be ~2 000 forwards, seconds of a stranger's
/// CPU in one request; 64 short texts cost ~64 × 20.
pub const MAX_REQUEST_UNITS: u32 = 32_768;

/// A request read, or the error reply for it.
///
/// # Errors
/// The [`Reply`] to send: 405 for a method other than `POST`, 413 `too_large` for a body over
/// [`MAX_BODY_BYTES`], 400 `bad_json` for a body that is not JSON, 400 `bad_request` when `texts`
/// is not an array of strings or `maxTokens` not a whole number ≥ 1, 413 `batch_too_large` when
/// the texts cost over [`MAX_REQUEST_UNITS`].
pub fn request(method: &str, body: &[u8]) -> Result<Request, Reply> {
    if !method.eq_ignore_ascii_case("POST") {
        return Err(error(405, "method_not_allowed", r#"POST {"texts": [...]}"#));
    }
    if body.len() > MAX_BODY_BYTES {
        return Err(too_large());
    }
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| error(400, "bad_json", "the body is not JSON"))?;
    let req = serde_json::from_value::<Request>(v).map_err(|_| {
        error(
            400,
            "bad_request",
            r#""texts" must be an array of strings, "maxTokens" a whole number"#,
        )
    })?;
    if req.max_tokens == Some(0) {
        return Err(error(
            400,
            "bad_request",
            r#""maxTokens" must be at least 1"#,
        ));
    }
    let units = embed_units(&req.texts);
    if units > MAX_REQUEST_UNITS {
        return Err(error(
            413,
            "batch_too_large",
            &format!(
                "these texts cost {units} embed units (1 + bytes/4 each; long texts are embedded \
                 whole), at most {MAX_REQUEST_UNITS} a request: send fewer or shorter texts"
            ),
        ));
    }
    Ok(req)
}

/// The reply for a text that failed with `e`.
pub fn failure(e: &Error) -> Reply {
    let status = if e.code() == "text_too_long" {
        413
    } else {
        400
    };
    error(status, e.code(), &e.to_string())
}

/// Answers one request through `pipeline`: the texts in order, in batches of [`CHUNK`]; the
/// first text that fails decides the reply.
pub async fn respond<P: Ports>(pipeline: &Pipeline<P>, method: &str, body: &[u8]) -> Reply {
    let req = match request(method, body) {
        Ok(r) => r,
        Err(reply) => return reply,
    };
    let n = req.texts.len();
    let mut out = Answer {
        vectors: Vec::with_capacity(n),
        sources: Vec::with_capacity(n),
        info: Some(Vec::with_capacity(n)),
    };
    for part in req.texts.chunks(CHUNK) {
        let options = ResolveOptions {
            max_tokens: req.max_tokens,
            info: true,
            trace: None,
        };
        let batch = pipeline
            .resolve_many_with(part, None, options, |_, _| {})
            .await;
        for r in batch.results {
            match r {
                Ok(r) => {
                    out.vectors.push(r.vector);
                    out.sources.push(r.source);
                }
                Err(e) => return failure(&e),
            }
        }
        match (batch.info, out.info.as_mut()) {
            (Some(i), Some(all)) => all.extend(i),
            _ => out.info = None,
        }
    }
    answer(&out)
}

/// The reply carrying `answer`.
pub fn answer(answer: &Answer) -> Reply {
    Reply {
        status: 200,
        body: serde_json::to_vec(answer).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: &Reply) -> (u16, String) {
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        (r.status, v["error"]["code"].as_str().unwrap().to_owned())
    }

    #[test]
    fn requests_are_read_as_the_edge_handler_reads_them() {
        assert_eq!(
            request("POST", br#"{"texts": ["a", "b"]}"#).unwrap().texts,
            vec!["a".to_owned(), "b".to_owned()]
        );
        assert_eq!(
            code(&request("GET", b"").unwrap_err()),
            (405, "method_not_allowed".into())
        );
        assert_eq!(
            code(&request("POST", b"{").unwrap_err()),
            (400, "bad_json".into())
        );
        assert_eq!(
            code(&request("POST", br#"{"texts": [1]}"#).unwrap_err()),
            (400, "bad_request".into())
        );
        let huge = vec![b' '; MAX_BODY_BYTES + 1];
        assert_eq!(
            code(&request("POST", &huge).unwrap_err()),
            (413, "too_large".into())
        );
        // maxTokens: either spelling, a whole number ≥ 1
        for body in [
            &br#"{"texts": ["a"], "maxTokens": 64}"#[..],
            br#"{"texts": ["a"], "max_tokens": 64}"#,
        ] {
            assert_eq!(request("POST", body).unwrap().max_tokens, Some(64));
        }
        for bad in [
            &br#"{"texts": ["a"], "maxTokens": 0}"#[..],
            br#"{"texts": ["a"], "maxTokens": -1}"#,
            br#"{"texts": ["a"], "maxTokens": "9"}"#,
        ] {
            assert_eq!(
                code(&request("POST", bad).unwrap_err()),
                (400, "bad_request".into())
            );
        }
        // Within the body limit, the embed units decide: long texts are embedded whole.
        let body = |n: usize, len: usize| {
            serde_json::to_vec(&serde_json::json!({ "texts": vec!["w".repeat(len); n] })).unwrap()
        };
        assert_eq!(request("POST", &body(64, 2_000)).unwrap().texts.len(), 64); // 64 × 501 units
        let r = request("POST", &body(16, 16_000)).unwrap_err(); // 16 × 4 001 units
        assert_eq!(code(&r), (413, "batch_too_large".into()));
        assert!(String::from_utf8_lossy(&r.body).contains("64016 embed units"));
        assert_eq!(embed_units(&["abcdefgh".into(), String::new()]), 3 + 1);
        // a long text is embedded whole: it costs its length, not one window
        assert_eq!(embed_units(&["x".repeat(16_384)]), 4_097);
    }

    #[test]
    fn failures_map_to_the_edge_statuses() {
        let long = Error::BadJob {
            code: crate::ErrorCode::TextTooLong,
            message: "x".into(),
        };
        assert_eq!(code(&failure(&long)), (413, "text_too_long".into()));
        let down = Error::Unreachable("refused".into());
        assert_eq!(code(&failure(&down)), (400, "unreachable".into()));
        let a = answer(&Answer {
            vectors: vec![vec![0.5, -1.0, 0.1]],
            sources: vec![ResultSource::Engine],
            info: None,
        });
        assert_eq!(
            String::from_utf8(a.body).unwrap(),
            r#"{"vectors":[[0.5,-1.0,0.10000000149011612]],"sources":["engine"]}"#
        );
    }
}
