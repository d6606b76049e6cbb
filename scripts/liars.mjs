// The liars' chaos run (docs/security.md, "Measured: the lying workers' run"): one `ternflow serve` (its
// embedded SQLite store, the shipped model, result verification at its defaults unless
// --no-verify), honest browser Web Workers in headless Chromium and lying workers, each with a
// signed token of its own `sub`, N jobs. The liars speak the protocol directly, as a visitor who
// rewrote the worker would, and lie in four ways:
//   other     another text's true vector (unit norm, right dimension: no shape check sees it)
//   random    a random unit vector
//   nudged    the right vector with one component's last bit flipped
//   patient   honest for its whole probation and 50 results more, then another text's vector
// each lie also written through to the shared cache. A liar stops when it is refused
// (403 `quarantined`). At the end it asserts: every job done (none dead, none lost), every done
// vector and every cache entry equal bit for bit to a fresh embed of its text (the wasm engine in
// Node: no poisoned result or cache entry is left to serve), every liar quarantined, no honest
// identity quarantined. It prints lies detected, lies stored before detection per liar (median,
// max), jobs re-done, verification CPU as a share of the server's CPU, and the throughput.
// Usage: node scripts/liars.mjs --bin BIN --model FILE [--jobs N] [--honest H] [--liars L]
//          [--no-verify] [--pkg DIR]
//   --liars L   liars per kind (default 1: four liars); 0 runs honest workers only
//   --no-verify the server without recomputation (with --liars 0: the throughput baseline)
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createHash, randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { client, freePort, launchChromium, minter, root, serveStatic, sleep } from "./harness.mjs";

const args = { bin: "", model: "", jobs: 100000, honest: 2, liars: 1, verify: true, pkg: "pkg" };
for (let i = 2; i < process.argv.length; i++) {
  const k = process.argv[i];
  if (k === "--no-verify") { args.verify = false; continue; }
  const v = process.argv[++i];
  if (k === "--bin") args.bin = v;
  else if (k === "--model") args.model = v;
  else if (k === "--jobs") args.jobs = Number(v);
  else if (k === "--honest") args.honest = Number(v);
  else if (k === "--liars") args.liars = Number(v);
  else if (k === "--pkg") args.pkg = v;
  else throw new Error(`unknown argument ${k}`);
}
const log = (...a) => console.log(...a);
const failed = [];
const tmp = mkdtempSync(join(tmpdir(), "ternflow-liars-"));
// A request again on a network error: the server closes kept-alive connections idle past its
// header timeout, and a pooled one may be reused just as it does.
const fetchRetry = async (url, init) => {
  for (let i = 0; ; i++) {
    try { return await fetch(url, init); } catch (e) { if (i >= 4) throw e; await sleep(100); }
  }
};

// ---- signed tokens, one identity each -------------------------------------------------------
const secret = randomBytes(32);
const mintFor = minter(secret);
const mint = (role, sub) => mintFor(role, "chaos", sub);

// ---- the server ---------------------------------------------------------------------------------
const port = await freePort();
const server = spawn(args.bin, ["serve", "--addr", `127.0.0.1:${port}`, "--data-dir", join(tmp, "data"),
  "--model", args.model, "--cors-allow-localhost", "--lease-ms", "10000", "--max-attempts", "20",
  ...(args.verify ? [] : ["--no-verify"])],
  { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, TERNFLOW_JWT_KEYS: `k1:hs256:${secret.toString("base64")}`, RUST_LOG: "warn" } });
let serverErr = "";
server.stderr.on("data", (d) => { serverErr = (serverErr + d).slice(-20000); });
server.on("exit", (code, sig) => { if (!stopping) { console.error(`server exited (${code ?? sig}):\n${serverErr}`); process.exit(1); } });
let stopping = false;
const base = `http://127.0.0.1:${port}`;
for (let i = 0; ; i++) {
  try { if ((await fetch(base + "/healthz")).ok) break; } catch {}
  if (i > 400) throw new Error("server did not start: " + serverErr);
  await sleep(50);
}
const cpuMs = () => {
  const f = readFileSync(`/proc/${server.pid}/stat`, "utf8").split(") ")[1].split(" ");
  return (Number(f[11]) + Number(f[12])) * 10; // utime + stime, in clock ticks of 10 ms
};
const admin = client(base, mint("admin", "operator"));
const producer = client(base, mint("producer", "producer"));

// ---- the engine in Node (the same wasm the browsers run): true vectors ----------------------
const pkgDir = resolve(root, args.pkg);
const wasm = await import(pathToFileURL(join(pkgDir, "ternflow.js")).href);
await wasm.default({ module_or_path: readFileSync(join(pkgDir, "ternflow_bg.wasm")) });
const engine = new wasm.TernflowEngine(new Uint8Array(readFileSync(resolve(root, args.model))));
const b64 = (v) => Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString("base64");
// The model id: the first 16 hex digits of the model file's SHA-256.
const modelId = createHash("sha256").update(readFileSync(resolve(root, args.model))).digest("hex").slice(0, 16);
const keyOf = (text) => `${modelId}:${createHash("sha256").update(text).digest("hex").slice(0, 32)}`;

// ---- the corpus: N distinct texts -----------------------------------------------------------
const corpus = readFileSync(join(root, "www/demo/corpus.txt"), "utf8").split("\n").filter(Boolean);
const texts = Array.from({ length: args.jobs }, (_, i) => i < corpus.length ? corpus[i] : `${corpus[i % corpus.length]} (variant ${Math.floor(i / corpus.length)})`);

// ---- liars ----------------------------------------------------------------------------------------
const PROBATION = 32;
const kinds = ["other", "random", "nudged", "patient"];
const liars = [];
for (let n = 0; n < args.liars; n++) for (const kind of kinds) liars.push({ kind, sub: `liar-${kind}-${n}`, acked: 0, lies: 0, caught: false, refusedAt: null });
const lie = (kind, text, honestSoFar) => {
  const other = () => engine.embed(corpus[Math.floor(Math.random() * corpus.length)] + " (a lie)");
  switch (kind) {
    case "other": return other();
    case "random": {
      const v = new Float32Array(engine.embed(text).length);
      let n = 0;
      for (let i = 0; i < v.length; i++) { v[i] = Math.random() * 2 - 1; n += v[i] * v[i]; }
      for (let i = 0; i < v.length; i++) v[i] /= Math.sqrt(n);
      return v;
    }
    case "nudged": {
      const v = engine.embed(text);
      const bits = new Uint32Array(v.buffer, v.byteOffset, v.length);
      bits[Math.floor(Math.random() * v.length)] ^= 1;
      return v;
    }
    case "patient": return honestSoFar < PROBATION + 50 ? null : other();
  }
};
async function runLiar(l) {
  const token = mint("worker", l.sub);
  const h = { authorization: "Bearer " + token, "content-type": "application/json" };
  for (;;) {
    const r = await fetchRetry(base + "/v1/jobs/claim", { method: "POST", headers: h, body: JSON.stringify({ worker: l.sub, max: 16, wait_ms: 1000 }) });
    if (r.status === 403) { l.caught = true; l.refusedAt = "claim"; return; }
    if (!r.ok) { await sleep(200); continue; }
    const { jobs } = await r.json();
    if (!jobs.length) { if (finished) return; continue; }
    const acks = [];
    let lies = 0;
    for (const j of jobs) {
      if (j.resolved) continue;
      let v = lie(l.kind, j.text, l.acked);
      if (v) lies++; else v = engine.embed(j.text);
      acks.push({ id: j.id, token: j.lease.token, result: { model_id: j.model_id, vector: b64(v), source: "engine" },
        cache: { key: keyOf(j.text), fence: j.lease.fence } });
    }
    if (!acks.length) continue;
    const a = await fetchRetry(base + "/v1/jobs/ack", { method: "POST", headers: h, body: JSON.stringify({ acks, worker: l.sub }) });
    if (a.status === 403) { l.caught = true; l.refusedAt = "ack"; return; }
    if (a.ok) {
      const res = (await a.json()).results;
      const done = res.filter((x) => x.outcome === "done").length;
      l.acked += done;
      // Lies among the acks the server stored (a batch is all stored or, on probation, all refused).
      l.lies += done === acks.length ? lies : 0;
    }
  }
}

// ---- honest browser workers ------------------------------------------------------------------
const honestSubs = Array.from({ length: args.honest }, (_, i) => `honest-${i}`);
const page = `<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,"><script type="module">
import { EmbeddingWorker } from "/pkg/client.js";
const cfg = ${JSON.stringify({ base, tokens: honestSubs.map((s) => mint("worker", s)) })};
const ws = [];
window.__start = async () => {
  for (let i = 0; i < cfg.tokens.length; i++) {
    const w = new EmbeddingWorker({ server: { url: cfg.base, token: cfg.tokens[i] }, dbName: "liars-" + i + "-" + Date.now() });
    await w.ready;
    await w.start();
    ws.push(w);
  }
};
window.__stop = () => ws.forEach((w) => w.terminate());
window.__ready = true;
</script>`;
const stat = await serveStatic({ "/": page });
const browser = await launchChromium();
const tab = await browser.newPage();
await tab.goto(stat.url + "/");
await tab.waitForFunction(() => window.__ready === true);

// ---- the run ------------------------------------------------------------------------------------
let finished = false;
const t0 = performance.now();
const cpu0 = cpuMs();
const ids = [];
for (let i = 0; i < texts.length; i += 1000) {
  const r = await producer.post("/v1/jobs", { jobs: texts.slice(i, i + 1000).map((text) => ({ text })) });
  ids.push(...r.jobs.map((j) => j.id));
}
log(`enqueued ${ids.length} jobs in ${((performance.now() - t0) / 1000).toFixed(1)} s; ${args.honest} honest browser workers, ${liars.length} liars (${kinds.join(", ")}); verification ${args.verify ? "on" : "off"}`);
await tab.evaluate(() => window.__start());
const liarRuns = liars.map(runLiar);
const deadline = performance.now() + 60 * 60 * 1000;
let lastLog = 0;
for (;;) {
  const q = (await admin.get("/v1/stats")).queue;
  const s = (performance.now() - t0) / 1000;
  if (s - lastLog > 15) {
    lastLog = s;
    log(`${s.toFixed(0).padStart(5)} s: ready ${q.ready}, leased ${q.leased}, dead ${q.dead}; liars caught ${liars.filter((l) => l.caught).length}/${liars.length}`);
  }
  if (q.ready + q.delayed + q.leased === 0) break;
  if (performance.now() > deadline) { failed.push("the run did not finish within an hour"); break; }
  await sleep(500);
}
const secs = (performance.now() - t0) / 1000;
const cpu = cpuMs() - cpu0;
finished = true;
await tab.evaluate(() => window.__stop());
await Promise.race([Promise.all(liarRuns), sleep(5000)]);

// ---- the checks ------------------------------------------------------------------------------
const st = await admin.statuses(ids, { vectors: true });
const byState = {};
for (const s of st) byState[s.state] = (byState[s.state] ?? 0) + 1;
if (st.length !== ids.length) failed.push(`${ids.length - st.length} job(s) lost`);
if ((byState.done ?? 0) !== ids.length) failed.push(`not every job is done: ${JSON.stringify(byState)}`);
let poisonedResults = 0, poisonedCache = 0, cacheMissing = 0;
const writers = {};
const cacheChecks = [];
for (let i = 0; i < st.length; i++) {
  const text = texts[i];
  const want = b64(engine.embed(text));
  if (st[i].result?.vector !== want) poisonedResults++;
  const w = st[i].result?.by?.sub ?? "?";
  writers[w] = (writers[w] ?? 0) + 1;
  cacheChecks.push([keyOf(text), want]);
}
for (let i = 0; i < cacheChecks.length; i += 64) {
  await Promise.all(cacheChecks.slice(i, i + 64).map(async ([key, want]) => {
    const r = await fetchRetry(`${base}/v1/cache/${key}`, { headers: { authorization: "Bearer " + mint("admin", "operator") } });
    if (r.status === 404) { cacheMissing++; return; }
    if ((await r.json()).vector !== want) poisonedCache++;
  }));
}
const quarantined = (await admin.get("/v1/quarantine")).quarantined.map((q) => q.sub);
const honestFlagged = quarantined.filter((s) => s.startsWith("honest"));
const liarsCaught = liars.filter((l) => quarantined.includes(l.sub));
const metrics = await admin.get("/metrics");
const counter = (name) => Number((metrics.match(new RegExp(`^ternflow_${name}(?:_total)? (\\d+)`, "m")) ?? [])[1] ?? 0);
if (poisonedResults) failed.push(`${poisonedResults} done result(s) differ from a fresh embed of their text`);
if (poisonedCache) failed.push(`${poisonedCache} cache entr(ies) differ from a fresh embed of their text`);
if (honestFlagged.length) failed.push(`honest identities quarantined: ${honestFlagged.join(", ")}`);
if (args.verify && liarsCaught.length !== liars.length) failed.push(`liars not caught: ${liars.filter((l) => !quarantined.includes(l.sub)).map((l) => l.sub).join(", ")}`);

// ---- the report --------------------------------------------------------------------------------
const lies = liars.map((l) => l.lies).sort((a, b) => a - b);
const median = lies.length ? lies[Math.floor((lies.length - 1) / 2)] : 0;
const verifyMs = counter("verify_micros") / 1000;
log(`\n${ids.length} jobs in ${secs.toFixed(1)} s: ${(ids.length / secs).toFixed(0)} jobs/s; states ${JSON.stringify(byState)}`);
log(`results by writer: ${JSON.stringify(writers)}`);
for (const l of liars) log(`  ${l.sub.padEnd(18)} acks stored ${String(l.acked).padStart(5)}, lies stored before detection ${String(l.lies).padStart(4)}, ${quarantined.includes(l.sub) ? "quarantined" : "NOT caught"} (refused at ${l.refusedAt ?? "-"})`);
log(`lies detected: ${liarsCaught.length}/${liars.length} liars; lies stored before detection: median ${median}, max ${lies.at(-1) ?? 0}`);
log(`jobs re-done (re-queued results): ${counter("undone_results")}; cache entries deleted: ${counter("undone_cache_entries")}; results verified: ${counter("results_verified")}, mismatched: ${counter("results_mismatched")}`);
log(`verification engine time ${verifyMs.toFixed(0)} ms of the server's ${cpu} ms CPU: ${(100 * verifyMs / Math.max(cpu, 1)).toFixed(1)} %`);
log(`poisoned results left: ${poisonedResults}; poisoned cache entries left: ${poisonedCache} (${cacheMissing} absent); honest identities flagged: ${honestFlagged.length}`);
await browser.close();
stat.close();
stopping = true;
server.kill("SIGTERM");
rmSync(tmp, { recursive: true, force: true });
if (failed.length) { log("\nliars: FAILED\n  " + failed.join("\n  ")); process.exit(1); }
log("liars: ok");
process.exit(0);
