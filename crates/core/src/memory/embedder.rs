//! A test embedder ([`FakeEmbedder`]): a deterministic vector per text, injectable failures and
//! latency on the fake clock.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use super::FakeClock;
use crate::error::{Error, Result};
use crate::ports::{Clock, Embedder};

/// A test embedder: a deterministic vector per text, with injectable failures and latency.
#[derive(Debug, Clone)]
pub struct FakeEmbedder {
    model: Rc<RefCell<Option<String>>>,
    /// Calls made.
    pub calls: Rc<Cell<u32>>,
    /// While positive, calls fail (transiently) and decrement it.
    pub fail_next: Rc<Cell<u32>>,
    /// When set, every call fails.
    pub broken: Rc<Cell<bool>>,
    /// Simulated latency on the fake clock.
    pub latency_ms: Rc<Cell<u64>>,
    /// The `traceparent` of each call, in order.
    pub traces: Rc<RefCell<Vec<String>>>,
    clock: FakeClock,
}

impl FakeEmbedder {
    /// An embedder for `model` (`None`: not loaded).
    pub fn new(model: Option<&str>, clock: FakeClock) -> Self {
        FakeEmbedder {
            model: Rc::new(RefCell::new(model.map(str::to_owned))),
            calls: Rc::default(),
            fail_next: Rc::default(),
            broken: Rc::default(),
            latency_ms: Rc::default(),
            traces: Rc::default(),
            clock,
        }
    }

    /// The vector this embedder gives `text` (4 dims derived from the bytes).
    pub fn vector_for(text: &str) -> Vec<f32> {
        let h = crate::keys::text_hash(text);
        h.as_bytes()[..4]
            .iter()
            .map(|b| f32::from(*b) / 255.0)
            .collect()
    }
}

impl FakeEmbedder {
    /// This embedder's word pieces: the text's whitespace-separated words.
    pub fn words(text: &str) -> Vec<&str> {
        text.split_whitespace().collect()
    }

    /// The vector it gives `text` cut at `max` words.
    pub fn vector_cut(text: &str, max: u32) -> Vec<f32> {
        let words = Self::words(text);
        let keep = words.len().min(max as usize);
        Self::vector_for(&words[..keep].join(" "))
    }
}

impl Embedder for FakeEmbedder {
    fn model_id(&self) -> Option<String> {
        self.model.borrow().clone()
    }
    async fn embed_with(
        &self,
        text: &str,
        max_tokens: Option<u32>,
        trace: &str,
    ) -> Result<Vec<f32>> {
        let v = self.embed(text, trace).await?;
        Ok(match max_tokens {
            Some(max) if Self::words(text).len() > max as usize => Self::vector_cut(text, max),
            _ => v,
        })
    }
    fn cuts(&self) -> bool {
        self.model.borrow().is_some()
    }
    async fn info(
        &self,
        texts: &[&str],
        max_tokens: Option<u32>,
    ) -> Option<Vec<crate::protocol::TextInfo>> {
        self.model.borrow().as_ref()?;
        let one = |text: &str| {
            let n = Self::words(text).len() as u32;
            let tokens = max_tokens.map_or(n, |m| n.min(m));
            crate::protocol::TextInfo {
                tokens,
                chunks: tokens.div_ceil(126).max(1),
                truncated: tokens < n,
            }
        };
        Some(texts.iter().map(|t| one(t)).collect())
    }
    async fn embed(&self, text: &str, trace: &str) -> Result<Vec<f32>> {
        self.calls.set(self.calls.get() + 1);
        self.traces.borrow_mut().push(trace.to_owned());
        let lat = self.latency_ms.get();
        if lat > 0 {
            self.clock.sleep(lat).await;
        }
        if self.broken.get() {
            return Err(Error::Unreachable("embedder down".into()));
        }
        if self.fail_next.get() > 0 {
            self.fail_next.set(self.fail_next.get() - 1);
            return Err(Error::Unreachable("embedder hiccup".into()));
        }
        Ok(Self::vector_for(text))
    }
}
