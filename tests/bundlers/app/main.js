// The one page every bundler fixture builds, unchanged: a user's app importing the packed
// `ternflow`. It reports what happened on `window.__result` for the test driver.
import { EmbeddingWorker, similar, TernflowError } from "ternflow";

const params = new URLSearchParams(location.search);

async function cachedModels() {
  const c = await caches.open("ternflow-models");
  return (await c.keys()).map((r) => r.url);
}

async function run() {
  const out = { progress: [] };
  const t0 = performance.now();
  const model = params.get("model");
  const config = params.has("modelTimeoutMs") ? { modelTimeoutMs: Number(params.get("modelTimeoutMs")) } : undefined;
  const w = new EmbeddingWorker({
    ...(model ? { model: { url: model } } : {}),
    ...(config ? { config } : {}),
    onProgress: (p) => out.progress.push(p),
  });
  try {
    out.modelId = await w.ready;
    const [d] = await w.embedDetailed(["hello world"]);
    out.firstVectorMs = performance.now() - t0;
    out.dim = d.vector.length;
    out.norm = Math.hypot(...d.vector);
    out.source = d.source;
    out.info = d.info;
    // A long text is embedded whole; maxTokens cuts it; info says what each vector covers (the
    // engine counts, in its worker when it has one); the cut vector is cached apart.
    const long = "windows of word pieces pooled into one vector ".repeat(30);
    const [whole] = await w.embedDetailed([long]);
    const [cut] = await w.embedDetailed([long], { maxTokens: 16 });
    const [again] = await w.embedDetailed([long], { maxTokens: 16 });
    const [wholeAgain] = await w.embedDetailed([long]);
    const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
    out.long = {
      whole: whole.info,
      cut: cut.info,
      sources: [whole.source, cut.source, again.source, wholeAgain.source],
      cutDiffers: !same(whole.vector, cut.vector),
      againSame: same(again.vector, cut.vector),
      wholeAgainSame: same(wholeAgain.vector, whole.vector),
    };
    out.zeroTokens = await w.embedDetailed(["x"], { maxTokens: 0 }).then(() => "resolved", (e) => e.code);
    // 1: the model runs in the engine worker (the bundler emitted engine-worker.js), 0: inline.
    out.engineInWorker = (await w.stats()).gauges.engine_in_worker;
    out.hits = await similar(
      "a cat sits on the mat",
      ["stock markets fell sharply today", "the kitten rests on the rug", "rain is expected tomorrow"],
      { worker: w, topK: 3 },
    );
    // settle: one bad text does not fail the rest.
    const settled = await w.embedMany(["good one", "x".repeat(20_000), "good two"], { settle: true });
    out.settled = settled.map((r) => (r.status === "fulfilled" ? r.value.length : `${r.reason.code}:${r.reason instanceof TernflowError}`));
    // Abort in the middle of a long embedMany: typed `aborted`, and the worker still answers.
    const ac = new AbortController();
    const texts = Array.from({ length: 300 }, (_, i) => `sentence number ${i} of a long batch`);
    let seen = 0;
    try {
      await w.embedMany(texts, {
        signal: ac.signal,
        onProgress: (p) => {
          seen = p.loaded;
          if (p.loaded === 5) ac.abort();
        },
      });
      out.abort = "not aborted";
    } catch (e) {
      out.abort = e.code;
      out.abortedAfter = seen;
    }
    out.afterAbort = (await w.embed("still alive")).length;
    // terminate() rejects what is pending.
    const pending = w.embedMany(texts.map((t) => `${t}!`));
    w.terminate();
    out.terminated = await pending.then(() => "resolved", (e) => e.code);
  } catch (e) {
    out.error = { code: e.code, message: e.message, url: e.url, typed: e instanceof TernflowError };
    w.terminate();
  }
  out.cachedModels = await cachedModels();
  return out;
}

// `?mode=server`: a server (`?server=`) and settings (`?config=` JSON): one embed, timed, and
// the worker's counters (how the remote tier fared).
async function runServer() {
  const out = {};
  const w = new EmbeddingWorker({ server: params.get("server"), config: JSON.parse(params.get("config") ?? "{}") });
  try {
    await w.ready;
    const t0 = performance.now();
    const [d] = await w.embedDetailed(["hello server"]);
    out.embedMs = performance.now() - t0;
    out.source = d.source;
    out.counters = (await w.stats()).counters;
  } catch (e) {
    out.error = { code: e.code, message: e.message, url: e.url, typed: e instanceof TernflowError };
  }
  w.terminate();
  return out;
}

(params.get("mode") === "server" ? runServer() : run()).then(
  (r) => (window.__result = r),
  (e) => (window.__result = { crash: String(e?.stack ?? e) }),
);
