//! Embed: the backend inference endpoint (`POST /v1/embed`).

use serde::{Deserialize, Serialize};

use super::Vector;

/// `POST /v1/embed` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EmbedRequest {
    /// Texts to embed.
    pub texts: Vec<String>,
}

/// `POST /v1/embed` response, one vector per text, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EmbedResponse {
    /// The server's model id.
    pub model_id: String,
    /// Vectors.
    pub vectors: Vec<Vector>,
}
