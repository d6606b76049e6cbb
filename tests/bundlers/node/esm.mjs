// A Node ESM consumer: `import` resolves the `node` condition, a synchronous engine.
import { loadEngine, similar, cosineSim, EmbeddingWorker, TernflowError } from "ternflow";

const e = loadEngine();
const v = e.embed("hello from node");
let workerError = null;
try {
  new EmbeddingWorker();
} catch (err) {
  workerError = { code: err.code, typed: err instanceof TernflowError };
}
let badModel = null;
try {
  loadEngine({ model: new Uint8Array([1, 2, 3, 4, 5]) });
} catch (err) {
  badModel = err.code;
}
console.log(JSON.stringify({
  kind: "esm",
  dim: v.length,
  isF32: v instanceof Float32Array,
  norm: Math.hypot(...v),
  self: cosineSim(v, e.embed("hello from node")),
  top: similar("a cat sits on the mat", ["stocks fell", "the kitten rests on the rug"], { topK: 1 })[0],
  modelId: e.modelId,
  workerError,
  badModel,
}));
