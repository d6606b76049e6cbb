// What Chromium itself spends per job on the browser operations of the queue pipeline at 0 % hits,
// with none of our code in the way: bench/floor-worker.js makes, from plain JS, the requests and
// messages our worker makes for each batch of jobs (claim → texts to a nested worker and vectors
// back → one IndexedDB transaction of a put per vector → the keys on a BroadcastChannel → an ack
// request carrying every vector as base64), against a minimal node API on another origin (CORS,
// preflight cached), and prints Chromium's CPU per job by process and thread (bench/cpu.mjs). Set
// beside `node bench/worker.mjs`'s 0 %-hits row, it tells the browser's floor from what our pipeline
// adds (docs/worker.md, "Queue results in the local cache, and the browser's floor").
//   node bench/floor.mjs [--jobs 2400] [--batch 24,32,128] [--repeat 3] [--without engine,idb,announce]
// (--without: leave those operations out, to price each one by difference)
import { createServer } from "node:http";
import { availableParallelism } from "node:os";
import { snapshot, diff, describe, children } from "./cpu.mjs";
import { launchChromium, pageResult, serveStatic } from "../scripts/harness.mjs";

const args = { jobs: 2400, batch: [24, 32, 128], repeat: 3, without: [] };
for (let i = 2; i < process.argv.length; i++) {
  const k = process.argv[i];
  if (k === "--jobs") args.jobs = Number(process.argv[++i]);
  else if (k === "--batch") args.batch = process.argv[++i].split(",").map(Number);
  else if (k === "--repeat") args.repeat = Number(process.argv[++i]);
  else if (k === "--without") args.without = process.argv[++i].split(",").filter(Boolean);
  else throw new Error(`unknown argument ${k}`);
}

// The API: claims answer `max` jobs of ~15-token texts with a lease; acks read and parse the body.
const base = "Where is the nearest train station to the old town hall";
let next = 0;
const cors = {
  "Access-Control-Allow-Origin": "*", "Access-Control-Allow-Headers": "authorization, content-type",
  "Access-Control-Allow-Methods": "POST", "Access-Control-Max-Age": "600",
  "Cross-Origin-Resource-Policy": "cross-origin",
};
const api = createServer((req, res) => {
  if (req.method === "OPTIONS") { res.writeHead(204, cors).end(); return; }
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    let out;
    if (req.url === "/claim") {
      out = { jobs: Array.from({ length: body.max }, () => {
        const id = `j${next++}`;
        return { id, text: `${base} ${id}`, trace_id: "00-" + id.padStart(32, "0") + "-0000000000000001-01",
          attempt: 1, lease: { token: "t" + id, fence: next, expires_at: Date.now() + 30000 } };
      }) };
    } else if (req.url === "/ack") {
      out = { results: body.acks.map(() => ({ ok: true })) };
    } else { res.writeHead(404, cors).end(); return; }
    res.writeHead(200, { ...cors, "content-type": "application/json" }).end(JSON.stringify(out));
  });
});
await new Promise((r) => api.listen(0, "127.0.0.1", r));
const apiUrl = `http://127.0.0.1:${api.address().port}`;

const phases = [];
for (let r = 0; r < args.repeat; r++) for (const b of args.batch) phases.push({ name: `b${b}-${r}`, batch: b });
const page = `<!doctype html><meta charset="utf-8"><script type="module">
try {
  const out = {};
  for (const p of ${JSON.stringify(phases)}) {
    const w = new Worker("/bench/floor-worker.js");
    const r = await new Promise((res) => { w.onmessage = (e) => res(e.data); w.postMessage({ jobs: ${args.jobs}, batch: p.batch, api: ${JSON.stringify(apiUrl)}, phase: p.name, without: ${JSON.stringify(args.without)} }); });
    w.terminate();
    if (r.error) throw new Error(r.error);
    out[p.name] = r.ms;
  }
  window.__result = out;
} catch (e) { window.__error = String(e && e.stack || e); }
</script>`;

const marks = new Map();
let roots = null;
const http = await serveStatic({ "/": page }, {
  allow: ["bench/"],
  headers: { "Cache-Control": "no-store", "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp" },
  routes: {
    "/__cpu": (url, res) => {
      roots ??= Object.fromEntries(children(process.pid, "chrom").map((p, i) => [i ? `chromium${i}` : "chromium", p]));
      marks.set(url.searchParams.get("mark"), { at: performance.now(), cpu: snapshot(roots) });
      res.writeHead(204).end();
    },
  },
});
const browser = await launchChromium();
try {
  const ms = await pageResult(browser, `${http.url}/`);
  console.log(`chromium ${browser.version()}: the pipeline's browser operations from plain JS, no engine, ${args.without.length ? `without ${args.without.join(", ")}, ` : ""}${args.jobs} jobs per phase, ${args.repeat} phases per batch size (CPU of Chromium's processes only; the node API's is not counted)`);
  for (const b of args.batch) {
    const sum = new Map();
    let wall = 0;
    const perJob = [];
    for (let r = 0; r < args.repeat; r++) {
      const a = marks.get(`b${b}-${r}-start`), z = marks.get(`b${b}-${r}-end`);
      const d = diff(a.cpu, z.cpu);
      perJob.push([...d.values()].reduce((s, v) => s + v, 0) / args.jobs);
      for (const [k, v] of d) sum.set(k, (sum.get(k) ?? 0) + v);
      wall += z.at - a.at;
    }
    const med = [...perJob].sort((x, y) => x - y)[Math.floor(perJob.length / 2)];
    console.log(`batches of ${b}: median ${med.toFixed(3)} ms of Chromium CPU per job (phases: ${perJob.map((x) => x.toFixed(3)).join(", ")}; ${(args.jobs * 1000 * args.repeat / wall).toFixed(0)} jobs/s)`);
    console.log(`  all phases: ${describe(sum, args.jobs * args.repeat, wall, availableParallelism())}`);
  }
} finally {
  await browser.close();
  http.close();
  api.close();
}
