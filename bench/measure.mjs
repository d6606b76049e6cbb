// Shared by bench/engine.mjs (node) and bench/engine-browser.mjs (Chromium): the same
// measurement everywhere. `wasm` is the wasm-pack `--target web` module namespace; `init` its
// default export; `source` what init compiles (bytes in node, a URL in the browser).

function percentile(sorted, p) {
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(Math.max(rank, 1), sorted.length) - 1];
}

export async function measure({ wasm, source, modelBytes, inputs, iters, now }) {
  const t0 = now();
  await wasm.default({ module_or_path: source });
  const t1 = now();
  const engine = new wasm.TernflowEngine(modelBytes);
  const t2 = now();
  const first = engine.embed(inputs[0]);
  const t3 = now();
  const memoryAfterLoad = wasm.wasmMemoryBytes();
  if (first.length !== engine.outputDim) throw new Error("bad output length");
  let ids = 0;
  for (const t of inputs) ids += engine.tokenize(t).length;
  const warm = Math.max(1, Math.ceil(iters / 10));
  for (let i = 0; i < warm; i++) engine.embed(inputs[i % inputs.length]);
  const times = new Float64Array(iters);
  const start = now();
  for (let i = 0; i < iters; i++) {
    const a = now();
    engine.embed(inputs[i % inputs.length]);
    times[i] = now() - a;
  }
  const total = now() - start;
  times.sort();
  return {
    kernel: engine.kernel,
    modelId: engine.modelId,
    idsPerInput: ids / inputs.length,
    iters,
    instantiateMs: t1 - t0,
    loadMs: t2 - t1,
    firstEmbedMs: t3 - t2,
    coldStartMs: t3 - t1,
    coldStartWithInstantiateMs: t3 - t0,
    memoryAfterLoadMiB: memoryAfterLoad / 1048576,
    memoryAfterRunMiB: wasm.wasmMemoryBytes() / 1048576,
    medianMs: percentile(times, 50),
    p90Ms: percentile(times, 90),
    p99Ms: percentile(times, 99),
    perSec: (iters / total) * 1000,
  };
}

export function summary(where, r) {
  const f = (x) => x.toFixed(3);
  return (
    `${where} wasm (${r.kernel}): ${r.idsPerInput.toFixed(1)} ids/input, median ${f(r.medianMs)} ms, ` +
    `p90 ${f(r.p90Ms)} ms, p99 ${f(r.p99Ms)} ms, ${Math.round(r.perSec)} embeds/s (${r.iters} embeds, 1 thread); ` +
    `cold start ${r.coldStartMs.toFixed(1)} ms (load ${r.loadMs.toFixed(1)} + first embed ` +
    `${r.firstEmbedMs.toFixed(1)}; ${r.coldStartWithInstantiateMs.toFixed(1)} ms with the wasm ` +
    `instantiate of ${r.instantiateMs.toFixed(1)}); wasm memory after load ` +
    `${r.memoryAfterLoadMiB.toFixed(1)} MiB`
  );
}

export function parseArgs(argv) {
  const a = { input: null, iters: 500, pkg: "pkg", model: null };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    if (k === "--model") a.model = argv[++i];
    else if (k === "--input") a.input = argv[++i];
    else if (k === "--iters") a.iters = Number(argv[++i]);
    else if (k === "--pkg") a.pkg = argv[++i];
    else throw new Error(`unknown argument ${k}`);
  }
  if (!a.model) throw new Error("usage: --model FILE [--input FILE] [--iters N] [--pkg DIR]");
  return a;
}
