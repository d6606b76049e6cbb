// The engine's wasm kernels, in the wasm the package ships (a dev build in pkg-test/, simd128 as
// every build): each kernel of the build, one weight per `i8` and packed as row pairs, equals the
// scalar one exactly; the whole forward pass matches the numpy reference on the committed fixture.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import init, { engineSelfTest, TernflowEngine } from "../../pkg-test/ternflow.js";

const root = new URL("../../", import.meta.url);
await init({ module_or_path: readFileSync(new URL("pkg-test/ternflow_bg.wasm", root)) });
const data = new URL("crates/engine/tests/data/", root);

test("every wasm kernel equals the scalar one exactly", () => {
  // Scalar, scalar over pairs, simd128, simd128 over pairs: four comparisons per case, plus the
  // accumulator extremes.
  const checked = engineSelfTest(11, 24);
  assert.ok(checked >= 4 * 24, `only ${checked} comparisons`);
});

test("the forward pass in wasm matches the numpy reference", () => {
  const engine = new TernflowEngine(new Uint8Array(readFileSync(new URL("ref_tiny_ternary.tern", data))));
  assert.equal(engine.kernel, "simd128");
  const sentences = readFileSync(new URL("parity_sentences.txt", data), "utf8").replace(/\n$/, "").split("\n");
  const want = readFileSync(new URL("ref_tiny_ternary.jsonl", data), "utf8").split("\n").filter((l) => l).map(JSON.parse);
  assert.equal(sentences.length, want.length);
  let min = 1;
  sentences.forEach((s, i) => {
    const v = engine.embed(s);
    let dot = 0, na = 0, nb = 0;
    for (let k = 0; k < v.length; k++) { dot += v[k] * want[i][k]; na += v[k] * v[k]; nb += want[i][k] ** 2; }
    min = Math.min(min, dot / Math.sqrt(na * nb));
  });
  assert.ok(min >= 0.9999, `min cosine ${min}`);
  engine.free();
});
