// Usage: node scripts/same-vectors.mjs PKG_DIR A.wasm B.wasm MODEL
// Loads the package's glue twice (two module instances), one per wasm, and checks that both
// give bit-identical vectors for a set of texts (wasm-opt must not change results).
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { join, resolve } from "node:path";

const [dir, a, b, model] = process.argv.slice(2);
const glue = pathToFileURL(resolve(join(dir, "ternflow.js"))).href;
const texts = [
  "hello world", "", "Ünïcödé façade — naïve café", "a cat sits on the mat",
  "x".repeat(2000), "The quick brown fox jumps over the lazy dog. 1234567890",
];
const vectors = async (wasm, tag) => {
  const m = await import(`${glue}?${tag}`);
  m.initSync({ module: readFileSync(wasm) });
  const e = new m.TernflowEngine(readFileSync(model));
  return texts.map((t) => Buffer.from(e.embed(t).buffer).toString("hex"));
};
const [va, vb] = [await vectors(a, "a"), await vectors(b, "b")];
const diff = texts.filter((_, i) => va[i] !== vb[i]);
if (diff.length) {
  console.error(`same-vectors: ${diff.length} of ${texts.length} texts differ between ${a} and ${b}`);
  process.exit(1);
}
console.log(`same-vectors: ${texts.length} texts bit-identical`);
