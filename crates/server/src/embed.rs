//! Backend inference: the [`Embedder`] trait, the engine behind it, and the [`Batcher`] that
//! gathers texts from concurrent requests into one engine call on a blocking thread.
//!
//! The batcher owns a bounded queue: a request that finds it full is refused at once with 429 and
//! `Retry-After` instead of piling up. Batching is opportunistic: while one batch runs, new
//! requests wait in the queue and are all taken (up to `embed_batch` texts) for the next one, so a
//! lone request pays no batching delay.

use std::sync::Arc;
use std::time::Instant;

use sha2::{Digest, Sha256};
use ternflow_core::protocol::TextInfo;
use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// Something that turns texts into vectors, synchronously (it runs on a blocking thread).
pub trait Embedder: Send + Sync + 'static {
    /// The model id (16 hex digits of the model file's SHA-256).
    fn model_id(&self) -> String;

    /// The length of its vectors (0: not known until it embeds).
    fn dim(&self) -> usize {
        0
    }

    /// One vector per text, in order.
    ///
    /// # Errors
    /// A message when inference fails.
    fn embed_batch(&self, texts: &[String]) -> std::result::Result<Vec<Vec<f32>>, String>;

    /// What embeds cover, counted from texts alone (the engine's vocabulary and window width),
    /// for a thread other than the engine's; `None` when the embedder cannot say.
    fn counter(&self) -> Option<ternflow_engine::Counter> {
        None
    }

    /// One vector per text, embedding at most `max_tokens` word pieces of each (`None`: whole),
    /// with what each covers where the embedder can say. The default embeds whole texts only.
    ///
    /// # Errors
    /// A message when inference fails, or a cut is asked of an embedder that cannot cut.
    fn embed_batch_with(&self, texts: &[String], max_tokens: Option<u32>) -> Embedded {
        match max_tokens {
            None => self.embed_batch(texts).map(|v| (v, None)),
            Some(_) => Err("this embedder embeds whole texts only".to_owned()),
        }
    }
}

/// The engine's account of an embed as the protocol's.
pub(crate) fn text_info(i: ternflow_engine::EmbedInfo) -> TextInfo {
    TextInfo {
        tokens: u32::try_from(i.tokens).unwrap_or(u32::MAX),
        chunks: u32::try_from(i.chunks).unwrap_or(u32::MAX),
        truncated: i.truncated,
    }
}

/// Vectors in order, and what each covers of its text when the embedder says.
pub type Embedded = std::result::Result<(Vec<Vec<f32>>, Option<Vec<TextInfo>>), String>;

/// The Ternlight engine, loaded from a TERN v1 model file.
pub struct EngineEmbedder {
    engine: std::sync::Mutex<ternflow_engine::Engine>,
    model_id: String,
}

impl std::fmt::Debug for EngineEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineEmbedder")
            .field("model_id", &self.model_id)
            .finish_non_exhaustive()
    }
}

impl EngineEmbedder {
    /// The engine's output dimension.
    pub fn dim(&self) -> usize {
        self.engine.lock().map_or(0, |e| e.output_dim())
    }

    /// Loads a model from its bytes.
    ///
    /// # Errors
    /// The engine's message when the file is not a valid model.
    pub fn from_bytes(bytes: &[u8]) -> std::result::Result<Self, String> {
        let engine = ternflow_engine::Engine::from_bytes(bytes).map_err(|e| e.to_string())?;
        let model_id = engine.model_id().to_string();
        Ok(EngineEmbedder {
            engine: std::sync::Mutex::new(engine),
            model_id,
        })
    }
}

impl Embedder for EngineEmbedder {
    fn model_id(&self) -> String {
        self.model_id.clone()
    }

    fn dim(&self) -> usize {
        EngineEmbedder::dim(self)
    }

    fn embed_batch(&self, texts: &[String]) -> std::result::Result<Vec<Vec<f32>>, String> {
        self.embed_batch_with(texts, None)
            .map(|(vectors, _)| vectors)
    }

    fn counter(&self) -> Option<ternflow_engine::Counter> {
        self.engine.lock().ok().map(|e| e.counter())
    }

    fn embed_batch_with(&self, texts: &[String], max_tokens: Option<u32>) -> Embedded {
        let mut engine = self
            .engine
            .lock()
            .map_err(|_| "engine poisoned by an earlier panic".to_owned())?;
        let options = ternflow_engine::EmbedOptions {
            max_tokens: max_tokens.map(|m| m as usize),
        };
        let dim = engine.output_dim();
        let mut vectors = Vec::with_capacity(texts.len());
        let mut info = Vec::with_capacity(texts.len());
        for t in texts {
            let mut v = vec![0.0; dim];
            info.push(text_info(engine.embed_with(t, options, &mut v)));
            vectors.push(v);
        }
        Ok((vectors, Some(info)))
    }
}

/// A deterministic stand-in for tests and benchmarks: a unit vector derived from SHA-256 of the
/// text, so equal texts get equal vectors.
#[derive(Debug, Clone)]
pub struct HashEmbedder {
    /// Vector length.
    pub dim: usize,
    /// Reported model id.
    pub model_id: String,
}

impl Default for HashEmbedder {
    fn default() -> Self {
        HashEmbedder {
            dim: 8,
            model_id: "00000000deadbeef".to_owned(),
        }
    }
}

impl Embedder for HashEmbedder {
    fn model_id(&self) -> String {
        self.model_id.clone()
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed_batch(&self, texts: &[String]) -> std::result::Result<Vec<Vec<f32>>, String> {
        Ok(texts
            .iter()
            .map(|t| {
                let d = Sha256::digest(t.as_bytes());
                let v: Vec<f32> = (0..self.dim)
                    .map(|i| d[i % 32] as f32 - 127.5 + i as f32 * 0.01)
                    .collect();
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
                v.into_iter().map(|x| x / n).collect()
            })
            .collect())
    }
}

/// CPU time of the calling thread, in microseconds (`CLOCK_THREAD_CPUTIME_ID`): the engine's
/// own work, not the time it waited for a core.
#[cfg(unix)]
fn thread_cpu_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the platform has.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// Without a thread CPU clock: 0 (verification's engine time is then not counted).
#[cfg(not(unix))]
fn thread_cpu_us() -> u64 {
    0
}

/// Lowers the calling thread's scheduling priority to `nice` (Linux: a thread's own nice
/// value; elsewhere nothing). Best effort: a failure is logged, the thread runs on.
fn lower_priority(nice: i32) {
    if nice <= 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid takes no argument; setpriority with PRIO_PROCESS and a thread id
        // changes that thread's nice value only.
        let rc = unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, nice.min(19))
        };
        if rc != 0 {
            tracing::warn!(
                nice,
                error = %std::io::Error::last_os_error(),
                "could not lower the engine thread's priority"
            );
        }
    }
}

type EngineOut = (Embedded, u64);

/// The engine's own thread: one batch at a time, at a lowered priority, its CPU time measured.
struct EngineThread {
    calls: std::sync::mpsc::Sender<EngineCall>,
}

impl EngineThread {
    fn start(embedder: Arc<dyn Embedder>, nice: i32) -> Self {
        let (calls, rx) = std::sync::mpsc::channel::<EngineCall>();
        let spawned = std::thread::Builder::new()
            .name("ternflow-engine".to_owned())
            .spawn(move || {
                lower_priority(nice);
                for (texts, max_tokens, reply) in rx {
                    let cpu0 = thread_cpu_us();
                    // A panic fails this batch, not the thread (and every later batch).
                    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        embedder.embed_batch_with(&texts, max_tokens)
                    }))
                    .unwrap_or_else(|_| Err("the engine panicked on this batch".to_owned()));
                    let _ = reply.send((out, thread_cpu_us().saturating_sub(cpu0)));
                }
            });
        if let Err(e) = spawned {
            // The calls then fail one by one with this in their error (`run`).
            tracing::error!(error = %e, "could not start the engine thread");
        }
        EngineThread { calls }
    }

    /// Runs one batch; an error when the thread is gone.
    async fn run(&self, texts: Vec<String>, max_tokens: Option<u32>) -> EngineOut {
        let (tx, rx) = oneshot::channel();
        if self.calls.send((texts, max_tokens, tx)).is_err() {
            return (Err("the engine thread is not running".to_owned()), 0);
        }
        rx.await
            .unwrap_or_else(|_| (Err("the engine thread stopped mid-batch".to_owned()), 0))
    }
}

/// One engine call: texts, their word-piece limit, where the answer goes.
type EngineCall = (Vec<String>, Option<u32>, oneshot::Sender<EngineOut>);

struct Pending {
    texts: Vec<String>,
    /// Word pieces to embed of each text at most (`None`: whole); one batch shares one limit.
    max_tokens: Option<u32>,
    reply: oneshot::Sender<Embedded>,
    /// Recomputing workers' results (its share of the engine's time is counted apart).
    verify: bool,
}

/// The embed batcher. Cheap to clone.
#[derive(Clone)]
pub struct Batcher {
    tx: mpsc::Sender<Pending>,
    model_id: String,
    dim: usize,
}

impl std::fmt::Debug for Batcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("model_id", &self.model_id)
            .finish_non_exhaustive()
    }
}

impl Batcher {
    /// Starts the batching task and the engine's thread: at most `max_batch` texts per engine
    /// call, at most `queue` requests waiting. The engine runs on a thread of its own at
    /// `nice` ([`lower_priority`]); it ends when the last `Batcher` is dropped.
    pub fn start(
        embedder: Arc<dyn Embedder>,
        max_batch: usize,
        queue: usize,
        nice: i32,
        metrics: Arc<Metrics>,
    ) -> Self {
        let (tx, mut rx) = mpsc::channel::<Pending>(queue.max(1));
        let model_id = embedder.model_id();
        let dim = embedder.dim();
        let engine = EngineThread::start(embedder, nice);
        tokio::spawn(async move {
            // A request with another word-piece limit than the batch's starts the next batch.
            let mut next: Option<Pending> = None;
            loop {
                let first = match next.take() {
                    Some(p) => p,
                    None => match rx.recv().await {
                        Some(p) => p,
                        None => break,
                    },
                };
                let mut n = first.texts.len();
                let max_tokens = first.max_tokens;
                let mut batch = vec![first];
                while n < max_batch {
                    match rx.try_recv() {
                        Ok(p) if p.max_tokens == max_tokens => {
                            n += p.texts.len();
                            batch.push(p);
                        }
                        Ok(p) => {
                            next = Some(p);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                let texts: Vec<String> = batch.iter().flat_map(|p| p.texts.clone()).collect();
                let started = Instant::now();
                let (out, cpu_us) = engine.run(texts, max_tokens).await;
                let took = started.elapsed();
                metrics.observe_embed(took.as_secs_f64() * 1_000.0);
                // The engine time of the batch, shared out by texts: verification's part.
                let verifying: usize = batch
                    .iter()
                    .filter(|p| p.verify)
                    .map(|p| p.texts.len())
                    .sum();
                if verifying > 0 && n > 0 {
                    let us = cpu_us * verifying as u64 / n as u64;
                    metrics.add(|c| &c.verify_micros, us);
                }
                match out {
                    Ok((vectors, info))
                        if vectors.len() == n && info.as_ref().is_none_or(|i| i.len() == n) =>
                    {
                        let mut it = vectors.into_iter();
                        let mut info = info.map(Vec::into_iter);
                        for p in batch {
                            let k = p.texts.len();
                            let mine: Vec<Vec<f32>> = it.by_ref().take(k).collect();
                            let said = info.as_mut().map(|i| i.by_ref().take(k).collect());
                            let _ = p.reply.send(Ok((mine, said)));
                        }
                    }
                    Ok((v, _)) => {
                        let msg = format!("engine returned {} vectors for {n} texts", v.len());
                        for p in batch {
                            let _ = p.reply.send(Err(msg.clone()));
                        }
                    }
                    Err(msg) => {
                        for p in batch {
                            let _ = p.reply.send(Err(msg.clone()));
                        }
                    }
                }
            }
        });
        Batcher { tx, model_id, dim }
    }

    /// The model id.
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// The length of the model's vectors (0 when the embedder does not say).
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Embeds `texts`, sharing an engine call with concurrent requests.
    ///
    /// # Errors
    /// [`Error::TooManyRequests`] when the queue is full; [`Error::Unavailable`] when inference
    /// failed.
    pub async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>> {
        Ok(self.embed_for(texts, None, false).await?.0)
    }

    /// [`Batcher::embed`] of at most `max_tokens` word pieces of each text (`None`: whole), with
    /// what each vector covers where the embedder says.
    ///
    /// # Errors
    /// As [`Batcher::embed`].
    pub async fn embed_with(
        &self,
        texts: Vec<String>,
        max_tokens: Option<u32>,
    ) -> Result<(Vec<Vec<f32>>, Option<Vec<TextInfo>>)> {
        self.embed_for(texts, max_tokens, false).await
    }

    /// [`Batcher::embed`] for recomputing workers' results: the engine time it takes is counted
    /// in `verify_micros`.
    ///
    /// # Errors
    /// As [`Batcher::embed`].
    pub async fn embed_to_verify(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>> {
        Ok(self.embed_for(texts, None, true).await?.0)
    }

    async fn embed_for(
        &self,
        texts: Vec<String>,
        max_tokens: Option<u32>,
        verify: bool,
    ) -> Result<(Vec<Vec<f32>>, Option<Vec<TextInfo>>)> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .try_send(Pending {
                texts,
                max_tokens,
                reply,
                verify,
            })
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => Error::TooManyRequests {
                    message: "the embed queue is full".to_owned(),
                    retry_after_s: 1,
                },
                mpsc::error::TrySendError::Closed(_) => {
                    Error::Unavailable("the embed batcher stopped".to_owned())
                }
            })?;
        rx.await
            .map_err(|_| Error::Unavailable("the embed batcher stopped".to_owned()))?
            .map_err(|m| {
                tracing::error!(error = %m, "inference failed");
                Error::Unavailable(format!("inference failed: {m}"))
            })
    }
}
