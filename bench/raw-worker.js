// Bench helper: the bare engine in a dedicated worker (no caches, no network), timing N embeds.
import init, { TernflowEngine, wasmMemoryBytes } from "/pkg/ternflow.js";

self.onmessage = async ({ data: { modelUrl, texts, warmup } }) => {
  try {
    await init();
    const bytes = new Uint8Array(await (await fetch(modelUrl)).arrayBuffer());
    const t0 = performance.now();
    const engine = new TernflowEngine(bytes);
    engine.embed(texts[0]);
    const coldMs = performance.now() - t0;
    const memoryBytes = wasmMemoryBytes();
    for (const t of warmup) engine.embed(t);
    const start = performance.now();
    for (const t of texts) engine.embed(t);
    const ms = performance.now() - start;
    self.postMessage({ ms, coldMs, memoryBytes, modelId: engine.modelId });
  } catch (e) {
    self.postMessage({ error: String(e?.stack ?? e) });
  }
};
