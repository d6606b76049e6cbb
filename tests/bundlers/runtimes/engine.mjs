// The Node API of the packed package under whichever runtime runs this file (node, deno, bun):
// prints one JSON line with the vector of a fixed text, the ranking, and the timings.
const t0 = performance.now();
const { loadEngine, TernflowError } = await import("ternflow");
const engine = loadEngine();
const readyMs = performance.now() - t0;
const v = engine.embed("hello from a runtime");
const firstVectorMs = performance.now() - t0;
const [top] = engine.similar("a cat sits on the mat", ["stock markets fell", "the kitten rests on the rug"], { topK: 1 });
let badModel;
try {
  loadEngine({ model: new Uint8Array([1, 2, 3]) });
} catch (e) {
  badModel = `${e.code}:${e instanceof TernflowError}`;
}
console.log(JSON.stringify({ modelId: engine.modelId, vector: Array.from(v), top: top.text, badModel, readyMs, firstVectorMs }));
