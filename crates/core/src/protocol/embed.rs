//! Embed: the backend inference endpoint (`POST /v1/embed`), and what an embed covered of each
//! text ([`TextInfo`], also in the edge and WASI handlers' answers).

use serde::{Deserialize, Serialize};

use super::Vector;

/// `POST /v1/embed` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EmbedRequest {
    /// Texts to embed.
    pub texts: Vec<String>,
    /// Word pieces to embed of each text at most (≥ 1); the rest is dropped and the text's
    /// `truncated` set. Absent: each text is embedded whole (windows of 126 word pieces,
    /// pooled). `maxTokens` is read too.
    #[serde(default, alias = "maxTokens", skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

/// `POST /v1/embed` response, one vector per text, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EmbedResponse {
    /// The server's model id.
    pub model_id: String,
    /// Vectors.
    pub vectors: Vec<Vector>,
    /// What each vector covers of its text, in order (absent where the embedder cannot say:
    /// a server started without a model file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub info: Vec<TextInfo>,
}

/// What an embed covered of one text. A function of the text, the model's vocabulary and the
/// `max_tokens` asked for, whether the vector was computed now or found in a cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TextInfo {
    /// Word pieces embedded (`[CLS]`/`[SEP]` not counted).
    pub tokens: u32,
    /// Forward passes pooled into the vector: 1 for a text of up to 126 word pieces.
    pub chunks: u32,
    /// Whether word pieces past `max_tokens` were dropped.
    pub truncated: bool,
}
