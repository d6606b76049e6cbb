//! The engine inside the component as the pipeline's [`Embedder`]; in a backend-only build
//! (without the `engine` feature) an empty slot, so the pipeline sends every text to the
//! server's `POST /v1/embed`. Portable.

use ternflow_core::ports::Embedder;
use ternflow_core::protocol::TextInfo;
use ternflow_core::{Error, Result};

/// The engine slot: empty until a model is loaded (always empty in a backend-only build).
#[derive(Debug, Default)]
pub struct InWasmEngine {
    #[cfg(feature = "engine")]
    slot: std::cell::RefCell<Option<ternflow_engine::Engine>>,
}

impl InWasmEngine {
    /// Whether this build carries the engine.
    pub const BUILT_IN: bool = cfg!(feature = "engine");

    /// Loads a TERN v1 file (taken by value: the embedding table is used in place); returns
    /// its model id.
    ///
    /// # Errors
    /// The engine's message when the file is not a valid model, or when this build has no
    /// engine.
    pub fn load(&self, bytes: Vec<u8>) -> Result<String, String> {
        #[cfg(feature = "engine")]
        {
            let e = ternflow_engine::Engine::from_vec(bytes).map_err(|e| e.to_string())?;
            let id = e.model_id().to_owned();
            *self.slot.borrow_mut() = Some(e);
            Ok(id)
        }
        #[cfg(not(feature = "engine"))]
        {
            let _ = bytes;
            Err("this build has no engine (backend-only)".into())
        }
    }
}

impl Embedder for InWasmEngine {
    fn model_id(&self) -> Option<String> {
        #[cfg(feature = "engine")]
        {
            self.slot.borrow().as_ref().map(|e| e.model_id().to_owned())
        }
        #[cfg(not(feature = "engine"))]
        {
            None
        }
    }

    async fn embed(&self, text: &str, trace: &str) -> Result<Vec<f32>> {
        self.embed_with(text, None, trace).await
    }

    fn cuts(&self) -> bool {
        #[cfg(feature = "engine")]
        {
            self.slot.borrow().is_some()
        }
        #[cfg(not(feature = "engine"))]
        {
            false
        }
    }

    async fn embed_with(
        &self,
        text: &str,
        max_tokens: Option<u32>,
        _trace: &str,
    ) -> Result<Vec<f32>> {
        #[cfg(feature = "engine")]
        {
            self.slot
                .borrow_mut()
                .as_mut()
                .map(|e| {
                    let mut v = vec![0.0; e.output_dim()];
                    e.embed_with(text, options(max_tokens), &mut v);
                    v
                })
                .ok_or_else(|| Error::Engine("no model loaded".into()))
        }
        #[cfg(not(feature = "engine"))]
        {
            let _ = (text, max_tokens);
            Err(Error::Engine("backend-only build: no engine".into()))
        }
    }

    async fn info(&self, texts: &[&str], max_tokens: Option<u32>) -> Option<Vec<TextInfo>> {
        #[cfg(feature = "engine")]
        {
            let mut slot = self.slot.borrow_mut();
            let e = slot.as_mut()?;
            Some(
                texts
                    .iter()
                    .map(|t| {
                        let i = e.info(t, options(max_tokens));
                        TextInfo {
                            tokens: u32::try_from(i.tokens).unwrap_or(u32::MAX),
                            chunks: u32::try_from(i.chunks).unwrap_or(u32::MAX),
                            truncated: i.truncated,
                        }
                    })
                    .collect(),
            )
        }
        #[cfg(not(feature = "engine"))]
        {
            let _ = (texts, max_tokens);
            None
        }
    }
}

#[cfg(feature = "engine")]
fn options(max_tokens: Option<u32>) -> ternflow_engine::EmbedOptions {
    ternflow_engine::EmbedOptions {
        max_tokens: max_tokens.map(|m| m as usize),
    }
}
