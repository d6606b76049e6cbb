// The demo's driver (scripts/demo.sh starts the servers, then this): headless Chromium with one
// Web Worker per core (each an EmbeddingWorker from pkg/ in queue mode, spread over the servers),
// and the dashboard open in a second tab. The corpus is enqueued twice with `ternflow enqueue`
// (the second time under new job ids, so every job runs again and finds its vector in a cache),
// each run drained and measured; then a semantic search, the scale-out evidence when there are
// two servers, and a PNG screenshot of the dashboard.
// Usage: node scripts/demo-browser.mjs --server URL [--server URL2] --token T --bin BIN
//          --corpus FILE [--workers N] [--out DIR]
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { createHash } from "node:crypto";
import { availableParallelism } from "node:os";
import { join, resolve } from "node:path";
import { client, launchChromium, latencyQuantile, serveStatic, sse, sleep, sumHistograms } from "./harness.mjs";

const args = { servers: [], workers: availableParallelism(), out: "/tmp/ternflow-demo", token: "", bin: "", corpus: "" };
for (let i = 2; i < process.argv.length; i++) {
  const k = process.argv[i], v = process.argv[++i];
  if (k === "--server") args.servers.push(v);
  else if (k === "--token") args.token = v;
  else if (k === "--bin") args.bin = v;
  else if (k === "--corpus") args.corpus = v;
  else if (k === "--workers") args.workers = Number(v);
  else if (k === "--out") args.out = v;
  else throw new Error(`unknown argument ${k}`);
}
mkdirSync(args.out, { recursive: true });
const servers = args.servers.map((s) => client(s, args.token));
const [A] = servers;
const texts = readFileSync(args.corpus, "utf8").split("\n").filter((l) => l.trim());
const log = (...a) => console.log(...a);
const f1 = (v) => (v == null ? "–" : v.toFixed(1));
const pct = (n, d) => (d ? ((100 * n) / d).toFixed(1) + " %" : "–");

// ---- the browser: N Web Workers, spread over the servers --------------------------------------
const workerPage = `<!doctype html><meta charset="utf-8"><title>ternflow workers</title><link rel="icon" href="data:,"><script type="module">
import { EmbeddingWorker } from "/pkg/client.js";
const cfg = ${JSON.stringify({ servers: args.servers, token: args.token, n: args.workers })};
try {
  window.__workers = await Promise.all(Array.from({ length: cfg.n }, async (_, i) => {
    const url = cfg.servers[i % cfg.servers.length];
    // One worker per core by default: each engine on its worker's thread (an engine worker each
    // would only add thread switching when every core already runs an engine: docs/worker.md).
    const config = cfg.n >= navigator.hardwareConcurrency ? { engineWorker: false } : {};
    const w = new EmbeddingWorker({ server: { url, token: cfg.token }, dbName: "ternflow-demo-" + i + "-" + Date.now(), config });
    await w.ready;
    await w.start();
    return w;
  }));
  window.__ready = true;
} catch (e) { window.__error = String(e && e.stack || e); }
</script>`;
const stat = await serveStatic({ "/": workerPage });
const browser = await launchChromium();
let exitCode = 0;
try {
  const tab = await browser.newPage();
  tab.on("console", (m) => { if (m.type() === "error") console.error(`[workers] ${m.text()}`); });
  await tab.goto(stat.url + "/");
  await tab.waitForFunction(() => window.__ready || window.__error, null, { timeout: 120000, polling: 100 });
  const err = await tab.evaluate(() => window.__error);
  if (err) throw new Error(err);
  log(`${args.workers} Web Worker(s) in headless Chromium ${browser.version()}, the default concurrency, ` +
    `spread over ${servers.length} server(s): ${args.servers.join(", ")}`);

  // The dashboard, live from the start (so its charts have both runs).
  const dash = await browser.newPage({ viewport: { width: 1500, height: 1100 } });
  dash.on("console", (m) => { if (m.type() === "error") console.error(`[dashboard] ${m.text()}`); });
  await dash.goto(`${A.base}/dashboard#token=${encodeURIComponent(args.token)}`);

  const dashboards = () => Promise.all(servers.map((s) => s.get("/v1/dashboard")));
  const workerSum = (ds, name) => ds.reduce((s, d) => s + d.workers.reduce((t, w) => t + (w.counters[name] ?? 0), 0), 0);
  const serverSum = (ds, name) => ds.reduce((s, d) => s + (d.counters[name] ?? 0), 0);

  // ---- one run: enqueue with the CLI, wait until the queue is empty, measure ------------------
  async function run(name, file, n, midShot = null) {
    const idsFile = join(args.out, `${name}.ids`);
    const [d0, h0] = [await dashboards(), sumHistograms(await Promise.all(servers.map((s) => s.jobLatency())))];
    const t0 = performance.now();
    execFileSync(args.bin, ["enqueue", file, "--server", A.base, "--token", args.token, "--ids-out", idsFile], { stdio: ["ignore", "ignore", "inherit"] });
    const ids = readFileSync(idsFile, "utf8").split("\n").filter(Boolean);
    for (;;) {
      const q = (await A.get("/v1/dashboard?since=" + Date.now())).queue;
      if (q.ready + q.delayed + q.leased === 0) break;
      if (midShot && performance.now() - t0 > 5000) {
        await dash.screenshot({ path: midShot, fullPage: true });
        log(`dashboard screenshot while ${name} runs: ${midShot}`);
        midShot = null;
      }
      if (performance.now() - t0 > 600000) throw new Error(`${name}: not drained after 10 min: ${JSON.stringify(q)}`);
      await sleep(50);
    }
    const secs = (performance.now() - t0) / 1000;
    const st = await A.statuses(ids);
    const by = { engine: 0, backend: 0, local: 0, remote: 0 };
    let dead = 0;
    for (const s of st) {
      if (s.state === "done") by[s.result.source]++;
      else if (s.state === "dead") dead++;
      else throw new Error(`${name}: job ${s.id} is ${s.state} after the drain`);
    }
    await sleep(2500); // one metrics push from every worker
    const [d1, h1] = [await dashboards(), sumHistograms(await Promise.all(servers.map((s) => s.jobLatency())))];
    const done = ids.length - dead;
    return {
      name, n, ids, secs, by, dead, done,
      rate: ids.length / secs,
      p50: latencyQuantile(h0, h1, 0.5), p99: latencyQuantile(h0, h1, 0.99),
      retries: serverSum(d1, "jobs_retried") - serverSum(d0, "jobs_retried"),
      workerRetries: workerSum(d1, "retries") - workerSum(d0, "retries"),
      expired: serverSum(d1, "leases_expired") - serverSum(d0, "leases_expired"),
      perServer: d1.map((d, i) => ({ acked: d.counters.jobs_acked - d0[i].counters.jobs_acked,
        claimed: d.counters.jobs_claimed - d0[i].counters.jobs_claimed,
        enqueued: d.counters.jobs_enqueued - d0[i].counters.jobs_enqueued })),
    };
  }

  function report(r) {
    const embedded = r.by.engine + r.by.backend;
    log(`\n== ${r.name}: ${r.ids.length} jobs (${r.n} corpus sentences${r.ids.length > r.n ? `, ${r.ids.length - r.n} poison` : ""})`);
    log(`   drained in ${r.secs.toFixed(2)} s = ${r.rate.toFixed(1)} jobs/s (enqueue included)`);
    log(`   local cache hits  ${pct(r.by.local, r.done)} (${r.by.local})   remote cache hits ${pct(r.by.remote, r.done)} (${r.by.remote})`);
    log(`   embedded: ${embedded} — engine ${pct(r.by.engine, embedded)} (${r.by.engine}), backend ${pct(r.by.backend, embedded)} (${r.by.backend})`);
    log(`   job latency claim → ack: p50 ${f1(r.p50)} ms, p99 ${f1(r.p99)} ms`);
    log(`   retries: ${r.retries} nack retries, ${r.workerRetries} in-worker retries, ${r.expired} expired leases; dead letters: ${r.dead}`);
    if (servers.length > 1) {
      r.perServer.forEach((p, i) => log(`   server ${"AB"[i]}: enqueued ${p.enqueued}, claimed ${p.claimed}, acked ${p.acked}`));
    }
  }

  // Run 1: the corpus (default ids: hash of model and text) plus two poison jobs naming a model no
  // worker runs, which must end in the dead-letter queue with their reason.
  const run1 = join(args.out, "run1.jsonl");
  const poison = [{ id: "poison-1", text: "a job for a model nobody runs", model_id: "no-such-model" },
    { id: "poison-2", text: "another job for a model nobody runs", model_id: "no-such-model" }];
  writeFileSync(run1, [...texts.map((text) => JSON.stringify({ text })), ...poison.map((p) => JSON.stringify(p))].join("\n") + "\n");
  const r1 = await run("run 1 (cold caches)", run1, texts.length, resolve(args.out, "dashboard-run1.png"));
  report(r1);
  // Run 2: the same sentences under new ids: each vector is in a cache now.
  const run2 = join(args.out, "run2.jsonl");
  writeFileSync(run2, texts.map((text, i) => JSON.stringify({ id: `run2-${Date.now().toString(36)}-${i}`, text })).join("\n") + "\n");
  const r2 = await run("run 2 (same sentences, new job ids)", run2, texts.length);
  report(r2);

  const dlq = await A.get("/v1/dlq");
  log(`\ndead-letter queue: ${dlq.entries.length} — ` + dlq.entries.map((e) => `${e.job.id}: ${e.error.code} (${e.error.message}), ${e.history.length} attempt(s)`).join("; "));
  const d = await A.get("/v1/dashboard");
  const eng = d.workers.map((w) => `${w.worker} p50 ${w.gauges.engine_latency_p50_ms} ms / p99 ${w.gauges.engine_latency_p99_ms} ms`);
  log(`engine latency in the workers (their histograms' buckets): ${eng.join("; ")}`);

  // ---- semantic search over the processed corpus --------------------------------------------
  log("\nsemantic search (POST /v1/search: the server's engine embeds the query, scores every finished job's vector):");
  for (const query of ["how do I read a file line by line", "sorting a list of dictionaries by a key", "run code when an exception happens"]) {
    const r = await A.post("/v1/search", { query, k: 3 });
    log(`  ${JSON.stringify(query)} (${r.scored} vectors, ${r.took_ms.toFixed(0)} ms)`);
    for (const h of r.hits) log(`    ${h.score.toFixed(3)}  ${h.text.slice(0, 110)}`);
  }

  // ---- scale-out: events cross between the servers through Redis ------------------------------
  if (servers.length > 1) {
    const B = servers[1];
    log("\nscale-out (two servers on one Redis):");
    const [pa, pb] = [r1.perServer, r2.perServer];
    log(`  every job was enqueued through A; B handed out ${pa[1].claimed + pb[1].claimed} and acked ${pa[1].acked + pb[1].acked} of them ` +
      `(its workers were woken by A's \`jobs\` events, published through Redis)`);
    const evB = await sse(B.base, args.token);
    await evB.next((e) => e.event === "jobs" && e.id == null); // the greeting with the current depth
    const t0 = performance.now();
    const enq = await A.post("/v1/jobs", { text: "one more sentence, enqueued on A while B listens" });
    const ev = await evB.next((e) => e.event === "jobs" && e.id != null);
    log(`  enqueue on A → \`jobs\` event (id ${ev.id}, depth ${ev.data.depth}) on B's SSE stream after ${(ev.at - t0).toFixed(1)} ms`);
    const model = d.model_id;
    const keys = texts.slice(0, 20).map((t) => `${model}:${createHash("sha256").update(t).digest("hex").slice(0, 32)}`);
    const inv0 = workerSum([await B.get("/v1/dashboard")], "invalidations");
    const t1 = performance.now();
    for (const k of keys) await A.del(`/v1/cache/${k}`);
    const inv = await evB.next((e) => e.event === "invalidate" && e.data.keys.includes(keys[0]));
    log(`  DELETE /v1/cache/{key} ×${keys.length} on A → \`invalidate\` event (id ${inv.id}) on B's stream after ${(inv.at - t1).toFixed(1)} ms`);
    await sleep(2500);
    const inv1 = workerSum([await B.get("/v1/dashboard")], "invalidations");
    log(`  the workers connected to B applied ${inv1 - inv0} invalidation(s) from A's deletes (their \`invalidations\` counter)`);
    evB.close();
    if (inv1 - inv0 <= 0) throw new Error("B's workers saw no invalidation from A");
    const st = await A.statuses([enq.jobs[0].id]);
    for (let i = 0; i < 100 && st[0]?.state !== "done"; i++) { await sleep(100); st.splice(0, 1, ...(await A.statuses([enq.jobs[0].id]))); }
    log(`  the extra job: ${st[0].state}`);
  }

  // ---- the dashboard: a search typed into it, then the screenshot -----------------------------
  await dash.fill("#q", "how do I read a file line by line");
  await dash.click("#search button");
  await dash.waitForSelector("#hits li", { timeout: 30000 });
  await dash.waitForFunction(() => Number(document.body.dataset.samples) > 5 && document.querySelectorAll("#workers tbody tr td").length > 1, null, { timeout: 30000 });
  await sleep(1200);
  const png = resolve(args.out, "dashboard.png");
  await dash.screenshot({ path: png, fullPage: true });
  const shown = await dash.evaluate(() => ({ samples: Number(document.body.dataset.samples), workers: document.querySelectorAll("#workers tbody tr").length, hits: document.querySelectorAll("#hits li").length, dlq: document.querySelectorAll("#dlq tbody tr button").length }));
  log(`\ndashboard: ${shown.samples} samples charted, ${shown.workers} worker row(s), ${shown.hits} search hits, ${shown.dlq} dead letter(s) listed`);
  log(`dashboard screenshot: ${png}`);

  // The dashboard's redrive button, clicked: the poison job is queued again, a worker takes it
  // and it is dead-lettered again (its model still exists nowhere), one more attempt in its history.
  const before = (await A.get("/v1/dlq")).entries.find((e) => e.job.id === "poison-1");
  await dash.click('button[data-redrive="poison-1"]');
  let again = null;
  for (let i = 0; i < 100; i++) {
    await sleep(100);
    again = (await A.get("/v1/dlq")).entries.find((e) => e.job.id === "poison-1" && e.dead_at > before.dead_at);
    if (again) break;
  }
  log(`redrive button for poison-1: ${again ? `re-queued and dead-lettered again (${again.error.code}), ${again.history.length} attempts in its history` : "not dead-lettered again within 10 s"}`);

  // ---- checks the demo stands on ---------------------------------------------------------------
  const problems = [];
  if (r1.dead !== poison.length) problems.push(`run 1: ${r1.dead} dead letters, expected the ${poison.length} poison jobs`);
  if (r1.by.engine + r1.by.backend < texts.length * 0.5) problems.push("run 1: most vectors should be embedded");
  if (r2.dead !== 0) problems.push(`run 2: ${r2.dead} dead letters`);
  if (r2.by.local + r2.by.remote < texts.length * 0.9) problems.push("run 2: fewer than 90 % cache hits");
  if (shown.samples < 5 || shown.workers < 1) problems.push("the dashboard shows no live data");
  if (!again || again.history.length !== before.history.length + 1) problems.push("the dashboard's redrive did not re-run poison-1");
  if (problems.length) { console.error("demo: FAILED: " + problems.join("; ")); exitCode = 1; }
  await tab.evaluate(() => Promise.all(window.__workers.map((w) => w.stop({ deadline: 3000 }))));
} finally {
  await browser.close();
  stat.close();
}
process.exit(exitCode);
