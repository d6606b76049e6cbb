// Correctness of the wasm build (run after scripts/build-pkg.sh, see bench/engine.mjs):
// 1. engineSelfTest: every kernel of the build (simd128) equals the scalar one exactly;
// 2. the committed numpy-reference fixture: cosine >= 0.9999 on every sentence.
// Usage: node bench/engine-check.mjs [--pkg pkg]
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL, fileURLToPath } from "node:url";

const root = resolve(fileURLToPath(new URL(".", import.meta.url)), "..");
const pkg = resolve(root, process.argv[2] === "--pkg" ? process.argv[3] : "pkg");
const wasm = await import(pathToFileURL(resolve(pkg, "ternflow.js")).href);
await wasm.default({ module_or_path: readFileSync(resolve(pkg, "ternflow_bg.wasm")) });
const checks = wasm.engineSelfTest(7, 200);
const data = resolve(root, "crates/engine/tests/data");
const engine = new wasm.TernflowEngine(new Uint8Array(readFileSync(resolve(data, "ref_tiny_ternary.tern"))));
const sentences = readFileSync(resolve(data, "parity_sentences.txt"), "utf8").replace(/\n$/, "").split("\n");
const want = readFileSync(resolve(data, "ref_tiny_ternary.jsonl"), "utf8").split("\n").filter((l) => l.length).map(JSON.parse);
let min = 1;
sentences.forEach((s, i) => {
  const v = engine.embed(s);
  let dot = 0, na = 0, nb = 0;
  for (let k = 0; k < v.length; k++) { dot += v[k] * want[i][k]; na += v[k] * v[k]; nb += want[i][k] ** 2; }
  min = Math.min(min, dot / Math.sqrt(na * nb));
});
console.log(`kernel ${engine.kernel}: self-test ${checks} exact comparisons passed; ` +
  `${sentences.length} sentences vs numpy reference, min cosine ${min.toFixed(7)}`);
if (min < 0.9999) process.exit(1);
