// Our engine against the reference Ternlight engine, in one node process on the same model file,
// in alternating blocks so that both see the same machine (this VM's speed wanders by more than
// the difference between consecutive runs). Build both with bench/reference.sh, which runs this.
// Run: node bench/reference.mjs --ref DIR (wasm-bindgen --target nodejs output of the reference
//      engine, the model compiled in) --model FILE [--pkg pkg (wasm-pack --target web output)] [--input bench/short.txt]
//      [--blocks 20] [--block 100]
// Prints one line per engine (median ms per embed over all blocks, embeds/s) and the ratio of
// the two engines' rates in each block: its median, min and max.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL, fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";

const here = fileURLToPath(new URL(".", import.meta.url));
const a = { ref: null, model: null, pkg: "pkg", input: resolve(here, "short.txt"), blocks: 20, block: 100 };
for (let i = 2; i < process.argv.length; i++) {
  const k = process.argv[i].replace(/^--/, "");
  if (!(k in a)) throw new Error(`unknown argument ${process.argv[i]}`);
  a[k] = typeof a[k] === "number" ? Number(process.argv[++i]) : process.argv[++i];
}
if (!a.ref || !a.model) throw new Error("usage: --ref DIR --model FILE [--pkg DIR] [--input FILE] [--blocks N] [--block N]");
const inputs = readFileSync(a.input, "utf8").split("\n").filter(Boolean);

const ours = await import(pathToFileURL(resolve(here, "..", a.pkg, "ternflow.js")).href);
await ours.default({ module_or_path: readFileSync(resolve(here, "..", a.pkg, "ternflow_bg.wasm")) });
const engine = new ours.TernflowEngine(new Uint8Array(readFileSync(a.model)));
const ref = createRequire(import.meta.url)(resolve(a.ref, "tern_engine.js"));

// Same texts, same vectors (up to float rounding): the two run the same model.
const cos = (x, y) => x.reduce((s, v, i) => s + v * y[i], 0);
const agree = Math.min(...inputs.slice(0, 20).map((t) => cos(engine.embed(t), ref.embed(t))));
if (!(agree > 0.999)) throw new Error(`the engines disagree (min cosine ${agree}): not the same model?`);

const run = (embed, start) => {
  const times = [];
  for (let i = 0; i < a.block; i++) {
    const t0 = performance.now();
    embed(inputs[(start + i) % inputs.length]);
    times.push(performance.now() - t0);
  }
  return times;
};
const warm = (embed) => run(embed, 0);
warm((t) => engine.embed(t));
warm((t) => ref.embed(t));
const all = { ours: [], ref: [] };
const ratios = [];
for (let b = 0; b < a.blocks; b++) {
  // Alternate which goes first, so neither always follows the other.
  const order = b % 2 ? ["ref", "ours"] : ["ours", "ref"];
  const ms = {};
  for (const who of order) {
    const times = run(who === "ours" ? (t) => engine.embed(t) : (t) => ref.embed(t), b * a.block);
    all[who].push(...times);
    ms[who] = times.reduce((s, v) => s + v, 0);
  }
  ratios.push(ms.ref / ms.ours);
}
const median = (x) => [...x].sort((p, q) => p - q)[Math.floor(x.length / 2)];
for (const who of ["ours", "ref"]) {
  const m = median(all[who]);
  console.log(`${who === "ours" ? "ternflow" : "reference Ternlight"} engine (node ${process.version}, ${who === "ours" ? engine.kernel : "simd128"}): median ${m.toFixed(3)} ms per embed = ${(1000 / m).toFixed(1)} embeds/s (${all[who].length} embeds)`);
}
console.log(`ternflow / reference speed, per block of ${a.block} embeds each: median ${median(ratios).toFixed(2)}x (min ${Math.min(...ratios).toFixed(2)}x, max ${Math.max(...ratios).toFixed(2)}x, ${a.blocks} blocks); the same vectors (min cosine ${agree.toFixed(6)})`);
