// Benchmark of the worker pipeline in headless Chromium, against a real `ternflow serve`.
// Build first: scripts/build-pkg.sh && cargo build --release -p ternflow-cli
// Run:         node bench/worker.mjs [--model FILE] [--n 300] [--concurrency C (default: the worker's, 128)] [--workers N] [--repeat R]
//              [--config JSON (the workers' `config`, e.g. '{"engineWorker":false}' to keep the engine on the worker's thread)]
//              [--pkg DIR (the package to serve as /pkg, default pkg/: for A/B runs of two builds)]
// The bare engine and the 0 %-hits queue run R times (default 3) in turn, each on new texts; the
// figures are medians and the share of the bare engine the median of the R pairs' ratios (this
// machine's speed wanders between consecutive runs by more than the effect being measured).
// Prints: bare-engine vs end-to-end queue throughput with one worker each (0 %, 50 % remote, 100 % local and
// 100 % remote hits, and 0 % hits under producer-chosen job ids), local hit latency (same
// worker, and read from IndexedDB after a reload) vs a miss's, wasm memory after the model loads, and the cold start;
// and the server's verification of the results: the token's identity passes its probation on
// TRUST_JOBS (256) jobs before the measured phases (printed apart: once per identity), then samples.
import { spawn, execFileSync } from "node:child_process";
import { readFileSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { resolve, join } from "node:path";
import { snapshot, diff, describe, children } from "./cpu.mjs";
import { availableParallelism } from "node:os";
import { freePort, launchChromium, pageResult, root, serveStatic } from "../scripts/harness.mjs";

const args = { model: null, n: 300, shareN: null, concurrency: undefined, workers: 1, repeat: 3, config: undefined };
for (let i = 2; i < process.argv.length; i++) {
  const k = process.argv[i];
  if (k === "--model") args.model = process.argv[++i];
  else if (k === "--n") args.n = Number(process.argv[++i]);
  // --share-n: jobs of each bare/0 %-hits pair (default --n); a longer phase weighs its fill less.
  else if (k === "--share-n") args.shareN = Number(process.argv[++i]);
  else if (k === "--concurrency") args.concurrency = Number(process.argv[++i]);
  else if (k === "--workers") args.workers = Number(process.argv[++i]);
  else if (k === "--repeat") args.repeat = Number(process.argv[++i]);
  else if (k === "--config") args.config = JSON.parse(process.argv[++i]);
  else if (k === "--pkg") args.pkg = resolve(process.argv[++i]);
  else throw new Error(`unknown argument ${k}`);
}
// TERNFLOW_BIN: another server binary (an A/B of two builds).
const bin = process.env.TERNFLOW_BIN ? resolve(process.env.TERNFLOW_BIN) : resolve(root, "target/release/ternflow");
const tmp = mkdtempSync(join(tmpdir(), "ternflow-bench-"));
let model = args.model ?? resolve(root, "models/ternlight-int4.bin");
if (!existsSync(model)) {
  model = join(tmp, "d384-int4.bin");
  execFileSync(bin, ["gen-model", model]);
  console.error(`bench: no default model; using a generated d384/2-layer/int4 model`);
}

// Unique short sentences (~15 tokens) so that nothing is a cache hit on the first pass.
const base = readFileSync(resolve(root, "bench/short.txt"), "utf8").split("\n").filter(Boolean);
const run = Date.now().toString(36);
const texts = (tag, n) => Array.from({ length: n }, (_, i) => `${base[i % base.length]} ${tag}${run}${i}`);

const token = `bench-${Math.random().toString(36).slice(2)}`;
// Jobs a worker of the token runs before the measured phases (the identity's probation).
const TRUST_JOBS = 256;
const srvPort = await freePort();
const server = spawn(bin, ["serve", "--addr", `127.0.0.1:${srvPort}`, "--data-dir", join(tmp, "data"),
  "--model", model, "--insecure-dev-token", token, "--cors-allow-localhost"], { stdio: ["ignore", process.env.BENCH_SERVER_LOG ? process.stderr : "ignore", "inherit"] });
const api = `http://127.0.0.1:${srvPort}`;
for (let i = 0; i < 100; i++) {
  try { if ((await fetch(`${api}/healthz`)).ok) break; } catch {}
  await new Promise((r) => setTimeout(r, 100));
}

const page = `<!doctype html><meta charset="utf-8"><script type="module">
import { EmbeddingWorker } from "/pkg/client.js";
const cfg = ${JSON.stringify({ api, token, concurrency: args.concurrency, workers: args.workers, repeat: args.repeat, config: args.config })};
const rawSets = ${JSON.stringify(Array.from({ length: args.repeat }, (_, i) => texts(`raw${i}-`, args.shareN ?? args.n)))};
const queueSets = ${JSON.stringify(Array.from({ length: args.repeat }, (_, i) => texts(`queue${i}-`, args.shareN ?? args.n)))};
const warm = ${JSON.stringify(texts("warm", 30))};
const trustTexts = ${JSON.stringify(texts("trust", TRUST_JOBS))};
const missTexts = ${JSON.stringify(texts("miss", args.n))};
const queueTexts = queueSets[queueSets.length - 1].slice(0, ${args.n});
const halfNew = ${JSON.stringify(texts("half", args.n))};
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };
try {
  // CPU snapshots (bench/cpu.mjs) around the phases that the figures compare.
  const mark = (name) => fetch("/__cpu?mark=" + name).then((r) => { if (!r.ok) throw new Error("cpu mark " + name); });
  // 1. The bare engine in N workers at once (each embeds all of the set; rates add up).
  const bare = async (i) => {
    const set = rawSets[i];
    await mark("bare-start-" + i);
    const ws = [];
    const raws = await Promise.all(Array.from({ length: cfg.workers }, () => new Promise((res, rej) => {
      const w = new Worker("/bench/raw-worker.js", { type: "module" });
      ws.push(w);
      w.onmessage = (e) => (e.data.error ? rej(new Error(e.data.error)) : res(e.data));
      w.postMessage({ modelUrl: "/model.bin", texts: set, warmup: warm });
    })));
    // (terminated after the snapshot: a thread that has ended is no longer in /proc)
    await mark("bare-end-" + i);
    for (const w of ws) w.terminate();
    return { ...raws[0], rate: raws.reduce((sum, r) => sum + (set.length * 1000) / r.ms, 0) };
  };
  // 2. The pipeline without a server: IndexedDB miss (embed + write) vs IndexedDB hit.
  const dbName = "bench-" + Date.now();
  const local = new EmbeddingWorker({ config: cfg.config, model: { url: "/model.bin" }, dbName });
  await local.ready;
  await local.embedMany(warm);
  const miss = [], hit = [], idbHit = [];
  for (const t of missTexts) { const a = performance.now(); await local.embed(t); miss.push(performance.now() - a); }
  for (const t of missTexts) { const a = performance.now(); await local.embed(t); hit.push(performance.now() - a); }
  local.terminate();
  // A fresh worker on the same database (as after a page reload): every hit is read from IndexedDB.
  const reloaded = new EmbeddingWorker({ config: cfg.config, model: { url: "/model.bin" }, dbName });
  await reloaded.ready;
  await reloaded.embedMany(warm);
  for (const t of missTexts) { const a = performance.now(); await reloaded.embed(t); idbHit.push(performance.now() - a); }
  reloaded.terminate();
  // Again after another reload, as one batch: embedMany reads every text in one IndexedDB
  // transaction; per item = the batch's time / n.
  const reloaded2 = new EmbeddingWorker({ config: cfg.config, model: { url: "/model.bin" }, dbName });
  await reloaded2.ready;
  await reloaded2.embedMany(warm);
  const b0 = performance.now();
  const batch = await reloaded2.embedDetailed(missTexts);
  const idbBatchItem = (performance.now() - b0) / missTexts.length;
  if (batch.some((d) => d.source !== "local")) throw new Error("batched reload read was not all local hits");
  reloaded2.terminate();
  // 3. End to end through the queue: enqueue, N workers claim, cache, embed, ack.
  const auth = { authorization: "Bearer " + cfg.token, "content-type": "application/json" };
  // Enqueues in requests of at most 1 000 jobs (the server's limit); the jobs' ids, in order.
  const enqueue = async (jobs) => {
    const ids = [];
    for (let i = 0; i < jobs.length; i += 1000) {
      const r = await fetch(cfg.api + "/v1/jobs", { method: "POST", headers: auth, body: JSON.stringify({ jobs: jobs.slice(i, i + 1000) }) });
      if (!r.ok) throw new Error("enqueue: " + r.status + " " + await r.text());
      ids.push(...(await r.json()).jobs.map((j) => j.id));
    }
    return ids;
  };
  // Resolves when the server has announced every one of ids done, through the SSE finished
  // events a producer subscribes to (the stream is open before the jobs start, and costs the
  // machine nothing while it waits, unlike polling the status of every job).
  // Resolves (once the stream is open) to a promise of that.
  // events gets [time, jobs done so far] at each finished event, for the fill figure below.
  const allFinished = (ids, events = []) => new Promise((opened, failed) => {
    const left = new Set(ids);
    const es = new EventSource(cfg.api + "/v1/events?token=" + encodeURIComponent(cfg.token));
    const done = new Promise((res, rej) => es.addEventListener("finished", (e) => {
      const f = JSON.parse(e.data);
      for (const id of f.done ?? []) left.delete(id);
      events.push([performance.now(), ids.length - left.size]);
      for (const id of f.dead ?? []) { es.close(); rej(new Error("job dead: " + id)); }
      if (left.size === 0) { es.close(); res(); }
    }));
    es.onopen = () => opened({ done });
    es.onerror = () => es.readyState === EventSource.CLOSED && failed(new Error("events stream failed"));
  });
  // The server verifies every result of a worker identity it does not trust yet (probation:
  // whole ack batches until enough matched, crate::integrity), once per identity. The measured
  // phases are steady state: a worker of the same token (the same identity) passes probation
  // first, and its cost is printed on its own line.
  {
    const ids = await enqueue(trustTexts.map((text) => ({ text })));
    const finished = await allFinished(ids);
    const t = new EmbeddingWorker({ config: cfg.config, server: { url: cfg.api, token: cfg.token }, model: { url: "/model.bin" }, dbName: "bench-trust-" + Date.now() });
    await t.ready;
    await t.start(cfg.concurrency ? { concurrency: cfg.concurrency } : {});
    await finished.done;
    await t.stop({ deadline: 5000 });
    t.terminate();
    await fetch("/__cpu?trusted=1");
  }
  const qs = await Promise.all(Array.from({ length: cfg.workers }, async (_, i) => {
    const w = new EmbeddingWorker({ config: cfg.config, server: { url: cfg.api, token: cfg.token }, model: { url: "/model.bin" }, dbName: "bench-q-" + i + "-" + Date.now() });
    await w.ready;
    await w.embedMany(warm);
    return w;
  }));
  const q = qs[0];
  // JS heaps of the page and its workers now (the queue workers, models loaded, nothing else
  // running), per Chromium's own measurement (cross-origin isolated; wasm memory is not in it:
  // the workers' gauges report that).
  let memory = null;
  if (performance.measureUserAgentSpecificMemory) {
    const m = await performance.measureUserAgentSpecificMemory();
    memory = { bytes: m.bytes };
  }
  // 3. The bare engine and the 0 %-hits queue in turn, R times.
  const queue0 = async (i) => {
    const ids = await enqueue(queueSets[i].map((text) => ({ text })));
    const events = [];
    const finished = await allFinished(ids, events);
    await mark("q0-start-" + i);
    const t0 = performance.now();
    await Promise.all(qs.map((w) => w.start(cfg.concurrency ? { concurrency: cfg.concurrency } : {})));
    await finished.done;
    const ms = performance.now() - t0;
    // Fill: start() to the first finished event; steady: the jobs after the first event over
    // the time after it (what the queue sustains once running, without the pipeline's fill).
    const [tFirst, nFirst] = events[0];
    fills.push({ fillMs: tFirst - t0, steadyRate: (ids.length - nFirst) * 1000 / (t0 + ms - tFirst) });
    await mark("q0-end-" + i);
    await Promise.all(qs.map((w) => w.stop({ deadline: 5000 })));
    return ms;
  };
  const bares = [], queueRuns = [], fills = [];
  for (let i = 0; i < cfg.repeat; i++) {
    bares.push(await bare(i));
    queueRuns.push(await queue0(i));
  }
  const raw = { ...bares[0], rate: median(bares.map((b) => b.rate)), rates: bares.map((b) => b.rate) };
  const queueMs = median(queueRuns);
  const stats = await q.stats();
  for (const w of qs.slice(1)) w.terminate();
  // 4. The same texts again under new job ids: 100 % local hits in the same worker, then 100 %
  // remote hits in a fresh worker (its local cache empty; the claim carries the server's entry).
  // Done when the server says every job is; each result's source says where its vector came from.
  const drain = async (w, prefix, list = queueTexts) => {
    // prefix null: default (content-addressed) job ids.
    const jobs = list.map((text, i) => (prefix === null ? { text } : { id: prefix + i, text }));
    const ids = await enqueue(jobs);
    const finished = await allFinished(ids);
    const t = performance.now();
    await w.start(cfg.concurrency ? { concurrency: cfg.concurrency } : {});
    await finished.done;
    const ms = performance.now() - t;
    await w.stop({ deadline: 5000 });
    // Where each vector came from, in status requests (1 000 ids each) without the vectors.
    const sources = {};
    const states = [];
    for (let i = 0; i < ids.length; i += 1000) {
      const r = await fetch(cfg.api + "/v1/jobs/status", { method: "POST", headers: auth, body: JSON.stringify({ ids: ids.slice(i, i + 1000), vectors: false }) });
      if (!r.ok) throw new Error("status: " + r.status + " " + await r.text());
      states.push(...(await r.json()).jobs);
    }
    for (const j of states) {
      const k = j.state === "done" ? j.result.source : j.state;
      sources[k] = (sources[k] ?? 0) + 1;
    }
    return { ms, sources };
  };
  const runId = Date.now().toString(36);
  if (cfg.workers > 1) {
    q.terminate();
    window.__result = { raw, missMedian: median(miss), hitMedian: median(hit), idbHitMedian: median(idbHit), idbBatchItem, queueMs, queueRuns, fills, n: queueTexts.length, shareN: queueSets[0].length, stats, memory };
    throw "done";
  }
  // 100 % remote hits: the same texts under new job ids, a fresh worker (local cache empty). The
  // server finds each text in its cache when the job is claimed and finishes it there ("resolved"):
  // the worker sends no ack (nor keeps the vectors locally: queueLocalWrites is off by default).
  await q.stop({ deadline: 5000 });
  const q2 = new EmbeddingWorker({ config: cfg.config, server: { url: cfg.api, token: cfg.token }, model: { url: "/model.bin" }, dbName: "bench-q2-" + Date.now() });
  await q2.ready;
  const remoteHits = await drain(q2, "rh-" + runId + "-");
  q2.terminate();
  // 100 % local hits: a worker whose IndexedDB holds every text (its own embedMany() put them
  // there: queue jobs do not write the local cache by default: queueLocalWrites), after the
  // texts are removed from the server's cache, so the claim finds nothing and the worker its own copy.
  q.terminate();
  const ql = new EmbeddingWorker({ config: cfg.config, server: { url: cfg.api, token: cfg.token }, model: { url: "/model.bin" }, dbName: "bench-ql-" + Date.now() });
  await ql.ready;
  const filled = await ql.embedDetailed(queueTexts);
  if (filled.some((d) => d.source !== "remote")) throw new Error("the local-hits worker's fill was not all remote hits");
  const hex = (b) => Array.from(new Uint8Array(b), (x) => x.toString(16).padStart(2, "0")).join("").slice(0, 32);
  const enc = new TextEncoder();
  // (64 at a time: thousands of requests at once make Chromium fail some with "Failed to fetch")
  for (let i = 0; i < queueTexts.length; i += 64) await Promise.all(queueTexts.slice(i, i + 64).map(async (t) => {
    const key = raw.modelId + ":" + hex(await crypto.subtle.digest("SHA-256", enc.encode(t)));
    const d = await fetch(cfg.api + "/v1/cache/" + key, { method: "DELETE", headers: auth });
    if (!d.ok) throw new Error("cache DELETE " + key + ": " + d.status);
  }));
  const localHits = await drain(ql, "lh-" + runId + "-");
  ql.terminate();
  // 50 % hits: a fresh worker; every other text is in the server's cache (put there by another
  // worker's embed(), so no job exists for it yet), the rest new; default (content) job ids.
  const cachedHalf = halfNew.filter((_, i) => i % 2 === 0);
  const filler = new EmbeddingWorker({ config: cfg.config, server: { url: cfg.api, token: cfg.token }, model: { url: "/model.bin" }, dbName: "bench-fill-" + Date.now() });
  await filler.ready;
  await filler.embedMany(cachedHalf);
  filler.terminate();
  const q3 = new EmbeddingWorker({ config: cfg.config, server: { url: cfg.api, token: cfg.token }, model: { url: "/model.bin" }, dbName: "bench-q3-" + Date.now() });
  await q3.ready;
  await q3.embedMany(warm);
  const halfHits = await drain(q3, null, halfNew);
  // 0 % hits with producer-chosen job ids (their lease guards them, as it does default ids).
  const explicitIds = await drain(q3, "ex-" + runId + "-", halfNew.map((t) => t + " x"));
  q3.terminate();
  window.__result = { raw, missMedian: median(miss), hitMedian: median(hit), idbHitMedian: median(idbHit), idbBatchItem, queueMs, queueRuns, fills, n: queueTexts.length, shareN: queueSets[0].length, stats, memory, localHits, remoteHits, halfHits, explicitIds };
} catch (e) { if (e !== "done") window.__error = String(e && e.stack || e); }
</script>`;

// The server's verification counters (results recomputed, engine µs), from its /metrics.
const verification = async () => {
  const prom = await (await fetch(`${api}/metrics`, { headers: { authorization: `Bearer ${token}` } })).text();
  const metric = (name) => Number(prom.match(new RegExp(`^ternflow_${name}(?:_total)? (\\S+)$`, "m"))?.[1] ?? NaN);
  return { verified: metric("results_verified"), us: metric("verify_micros") };
};
let trusted = { verified: 0, us: 0 };

// Snapshots by mark name; the roots are the server and the browser Playwright starts (found lazily).
const marks = new Map();
let browserPids = [];
const cpuRoots = () => {
  if (browserPids.length === 0) browserPids = children(process.pid, "chrom");
  return { server: server.pid, ...Object.fromEntries(browserPids.map((p, i) => [i ? `chromium${i}` : "chromium", p])) };
};
// CPU over the R runs of one phase (marks `${phase}-start-i` .. `${phase}-end-i`), summed.
const cpuLine = (phase, jobsPerRun) => {
  const sum = new Map();
  let wall = 0;
  for (let i = 0; i < args.repeat; i++) {
    const a = marks.get(`${phase}-start-${i}`), b = marks.get(`${phase}-end-${i}`);
    for (const [k, v] of diff(a.cpu, b.cpu)) sum.set(k, (sum.get(k) ?? 0) + v);
    wall += b.at - a.at;
  }
  return describe(sum, jobsPerRun * args.repeat, wall, availableParallelism());
};
// All the CPU of one phase per job (the total that cpuLine's line starts with).
const cpuPerJob = (phase, jobsPerRun) => {
  let total = 0;
  for (let i = 0; i < args.repeat; i++) {
    const d = diff(marks.get(`${phase}-start-${i}`).cpu, marks.get(`${phase}-end-${i}`).cpu);
    for (const v of d.values()) total += v;
  }
  return total / (jobsPerRun * args.repeat);
};

// Cross-origin isolated, for fine-grained performance.now() (the API answers with CORP headers).
const http = await serveStatic({ "/": page }, {
  allow: ["pkg/", "bench/"],
  files: { "/model.bin": model, "/pkg/ternlight-int4.bin": model, ...(args.pkg ? { "/pkg/": args.pkg } : {}) },
  headers: { "Cache-Control": "no-store", "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp" },
  routes: {
    "/__cpu": async (url, res) => {
      if (url.searchParams.get("trusted")) {
        // The probation above is over: the server's verification counters so far.
        trusted = await verification();
        return res.writeHead(204).end();
      }
      marks.set(url.searchParams.get("mark"), { at: performance.now(), cpu: snapshot(cpuRoots()) });
      // BENCH_MARKS=1: each mark's CLOCK_MONOTONIC time in seconds on stderr, for `perf record -k mono`
      // and `perf report --time START,END` over one phase.
      if (process.env.BENCH_MARKS) console.error(`mark ${url.searchParams.get("mark")} ${(Number(process.hrtime.bigint()) / 1e9).toFixed(6)}`);
      res.writeHead(204).end();
    },
  },
});

const browser = await launchChromium([
  // measureUserAgentSpecificMemory answers at once instead of at the next GC (up to 20 s)
  "--enable-blink-features=ForceEagerMeasureMemory",
  // e.g. BENCH_CHROMIUM_ARGS=--js-flags=--perf-basic-prof, for `perf record` of the workers
  ...(process.env.BENCH_CHROMIUM_ARGS ?? "").split(" ").filter(Boolean)]);
try {
  const r = await pageResult(browser, `${http.url}/`);
  const rawRate = r.raw.rate;
  const queueRate = (r.shareN * 1000) / r.queueMs;
  // The share of the bare engine: the median over the R (bare, queue) pairs of their ratio.
  const shares = r.queueRuns.map((ms, i) => (100 * r.shareN * 1000) / ms / r.raw.rates[i]);
  const share = [...shares].sort((x, y) => x - y)[Math.floor(shares.length / 2)];
  console.log(`chromium ${browser.version()}, model ${r.raw.modelId}, n=${args.n}${r.shareN !== args.n ? ` (bare/0 %-hits pairs: ${r.shareN})` : ""}, ${args.workers} worker(s), concurrency ${args.concurrency ?? "default (128)"}, engine ${r.stats.gauges.engine_in_worker === 1 ? "in its own worker" : "on the worker's thread"}`);
  console.log(`bare engine in a worker: ${rawRate.toFixed(1)} embeds/s${args.workers > 1 ? ` (the sum of ${args.workers} workers)` : ""} (median of ${args.repeat}: ${r.raw.rates.map((x) => x.toFixed(1)).join(", ")})`);
  console.log(`end-to-end queue (claim, local cache read, embed, ${args.config?.queueLocalWrites ? "local write, " : ""}ack carrying the remote write; 0% hits): ${queueRate.toFixed(1)} jobs/s = ${share.toFixed(1)}% of bare engine (median of ${args.repeat} pairs: ${shares.map((x) => x.toFixed(1) + "%").join(", ")})`);
  const med = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
  const steady = r.fills.map((f, i) => (100 * f.steadyRate) / r.raw.rates[i]);
  console.log(`  of which fill (start() to the first job done): median ${med(r.fills.map((f) => f.fillMs)).toFixed(1)} ms (${r.fills.map((f) => f.fillMs.toFixed(1)).join(", ")}); after it ${med(steady).toFixed(1)}% of bare engine (median of ${steady.length} pairs: ${steady.map((x) => x.toFixed(1) + "%").join(", ")})`);
  console.log(`CPU, bare engine (incl. model load and warm-up; per embed of each worker): ${cpuLine("bare", r.shareN * args.workers)}`);
  console.log(`CPU, end-to-end queue at 0% hits: ${cpuLine("q0", r.shareN)}`);
  if (args.workers === 1) console.log(`CPU per job outside the engine (0% hits minus bare, the two lines above): ${(cpuPerJob("q0", r.shareN) - cpuPerJob("bare", r.shareN)).toFixed(3)} ms`);
  const c = r.stats.counters;
  console.log(`batches of the first worker at 0% hits (its counters): ${c.jobs_done ?? 0} jobs done, ${c.ack_batches ?? 0} ack requests = ${((c.jobs_done ?? 0) / (c.ack_batches || 1)).toFixed(1)} jobs per ack, ${c.heartbeat_batches ?? 0} heartbeat requests, ${c.engine_embeds ?? 0} engine embeds, ${r.stats.gauges.local_reads_skipped ?? 0} local reads answered without IndexedDB`);
  // BENCH_COUNTERS=1: every counter and gauge of that worker (retries, failures, leases lost).
  if (process.env.BENCH_COUNTERS) console.log(`counters of the first worker: ${JSON.stringify(c)}; gauges: ${JSON.stringify(r.stats.gauges)}`);
  const src = (x) => Object.entries(x.sources).map(([k, v]) => `${k} ${v}`).join(", ");
  if (r.localHits) {
  const lhRate = (r.n * 1000) / r.localHits.ms;
  const rhRate = (r.n * 1000) / r.remoteHits.ms;
  console.log(`end-to-end queue at 100% local hits (a worker whose IndexedDB holds the texts, new job ids, removed from the server's cache): ${lhRate.toFixed(1)} jobs/s = ${((100 * lhRate) / rawRate).toFixed(1)}% of bare engine (results by source: ${src(r.localHits)})`);
  const hhRate = (r.n * 1000) / r.halfHits.ms;
  console.log(`end-to-end queue at 50% remote hits (fresh worker, every other text cached): ${hhRate.toFixed(1)} jobs/s = ${((100 * hhRate) / rawRate).toFixed(1)}% of bare engine (results by source: ${src(r.halfHits)})`);
  console.log(`end-to-end queue at 100% remote hits (fresh worker, the claim finishes each job from the server's cache): ${rhRate.toFixed(1)} jobs/s per worker (results by source: ${src(r.remoteHits)})`);
  const exRate = (r.n * 1000) / r.explicitIds.ms;
  console.log(`end-to-end queue at 0% hits with producer-chosen job ids: ${exRate.toFixed(1)} jobs/s = ${((100 * exRate) / rawRate).toFixed(1)}% of bare engine (results by source: ${src(r.explicitIds)})`);
  } else console.log("hit phases: measured with --workers 1 only");
  console.log(`local miss (embed + IndexedDB write): median ${r.missMedian.toFixed(3)} ms`);
  console.log(`local hit, same worker (memory layer over IndexedDB): median ${r.hitMedian.toFixed(3)} ms = ${(r.missMedian / r.hitMedian).toFixed(1)}x faster than a miss`);
  console.log(`local hit after a reload (read from IndexedDB): median ${r.idbHitMedian.toFixed(3)} ms = ${(r.missMedian / r.idbHitMedian).toFixed(1)}x faster than a miss`);
  console.log(`local hits after a reload, batched (embedMany of ${args.n}, one IndexedDB read): ${r.idbBatchItem.toFixed(3)} ms per item = ${(r.missMedian / r.idbBatchItem).toFixed(1)}x faster than a miss`);
  console.log(`wasm memory after model load: ${(r.raw.memoryBytes / 1048576).toFixed(1)} MiB; cold start (load + first embed in a worker): ${r.raw.coldMs.toFixed(1)} ms`);
  const g = r.stats.gauges;
  const mib = (b) => `${((b ?? 0) / 1048576).toFixed(1)} MiB`;
  console.log(`wasm memory of the first queue worker after 0% hits: ${mib(g.wasm_memory_bytes)} in its thread + ${mib(g.engine_worker_memory_bytes)} in its engine worker; JS heaps of the page and its workers ${mib(r.memory?.bytes)} (measureUserAgentSpecificMemory)`);
  // The server's side of verifying the workers' results (crate::integrity: probation, then a
  // sample), over the whole run: its share of "CPU outside the engine" in the rows above.
  const all = await verification();
  const line = (v) => `${v.verified} results recomputed, ${(v.us / 1000).toFixed(1)} ms of engine CPU = ${(v.us / 1000 / (v.verified || 1)).toFixed(3)} ms each`;
  console.log(`server verification, the identity's probation before the measured phases (${TRUST_JOBS} jobs, once per identity): ${line(trusted)}`);
  console.log(`server verification over the measured phases (sampled): ${line({ verified: all.verified - trusted.verified, us: all.us - trusted.us })}`);
} finally {
  await browser.close();
  http.close();
  server.kill();
  rmSync(tmp, { recursive: true, force: true });
}

