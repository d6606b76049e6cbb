// The demo's driver (scripts/demo.sh starts the servers, then this): headless Chromium with one
// Web Worker per core (each an EmbeddingWorker from pkg/ in queue mode, spread over the servers),
// and the dashboard open in a second tab. The corpus is enqueued twice with `ternflow enqueue`
// (the second time under new job ids, so every job runs again and finds its vector in a cache),
// each run drained and measured; then a semantic search, the scale-out evidence when there are
// two servers, and a PNG screenshot of the dashboard.
// Every check it prints is computed from what the servers and the browser reported; every wait
// is on an event or a state (with a deadline), never a fixed sleep.
// Usage: node scripts/demo-browser.mjs --server URL [--server URL2] --token T --bin BIN
//          --corpus FILE --max-attempts N [--workers N] [--out DIR]
//   --max-attempts N   the servers' --max-attempts (demo.sh gives both the same)
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { createHash } from "node:crypto";
import { availableParallelism } from "node:os";
import { join, resolve } from "node:path";
import { client, launchChromium, latencyQuantile, serveStatic, sse, sleep, sumHistograms } from "./harness.mjs";

const args = { servers: [], workers: availableParallelism(), out: "/tmp/ternflow-demo", token: "", bin: "", corpus: "", maxAttempts: 0 };
for (let i = 2; i < process.argv.length; i++) {
  const k = process.argv[i], v = process.argv[++i];
  if (k === "--server") args.servers.push(v);
  else if (k === "--token") args.token = v;
  else if (k === "--bin") args.bin = v;
  else if (k === "--corpus") args.corpus = v;
  else if (k === "--workers") args.workers = Number(v);
  else if (k === "--out") args.out = v;
  else if (k === "--max-attempts") args.maxAttempts = Number(v);
  else throw new Error(`unknown argument ${k}`);
}
if (!(args.maxAttempts >= 1)) throw new Error("--max-attempts N (the servers') is required");
mkdirSync(args.out, { recursive: true });
const servers = args.servers.map((s) => client(s, args.token));
const [A] = servers;
const texts = readFileSync(args.corpus, "utf8").split("\n").filter((l) => l.trim());
const log = (...a) => console.log(...a);
const f1 = (v) => (v == null ? "–" : v.toFixed(1));
const pct = (n, d) => (d ? ((100 * n) / d).toFixed(1) + " %" : "–");
const s1 = (ms) => (ms / 1000).toFixed(1) + " s";
// waitFor(what, ms, probe): polls `probe` (async; a truthy answer ends the wait) every 100 ms
// until `ms` have passed, then fails naming `what`.
async function waitFor(what, ms, probe) {
  const deadline = performance.now() + ms;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (performance.now() > deadline) throw new Error(`${what}: not within ${s1(ms)}`);
    await sleep(100);
  }
}

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
  // Every worker has pushed its metrics to its server since `mark` (Unix ms): the workers'
  // counters in the servers' dashboards then count everything that happened before it.
  // Answers the dashboards of `which` (indexes into `servers`; worker i talks to server
  // i % servers.length).
  const pushedSince = (mark, which = servers.map((_, i) => i)) => waitFor(`a metrics push from every worker after ${new Date(mark).toISOString()}`, 30000, async () => {
    const boards = await Promise.all(which.map((i) => servers[i].get("/v1/dashboard")));
    const fresh = boards.reduce((n, d) => n + d.workers.filter((w) => w.last_seen >= mark).length, 0);
    const want = Array.from({ length: args.workers }, (_, i) => i % servers.length).filter((i) => which.includes(i)).length;
    return fresh >= want && boards;
  });

  // ---- one run: enqueue with the CLI, wait until the queue is empty, measure ------------------
  async function run(name, file, n, midShot = null) {
    const idsFile = join(args.out, `${name}.ids`);
    const [d0, h0] = [await dashboards(), sumHistograms(await Promise.all(servers.map((s) => s.jobLatency())))];
    // When each job was announced done (the servers' `finished` events, which cross between
    // servers through the store): a run's rate counts its jobs up to the last one done, so a
    // poison job's retries (backoff between its attempts) do not stretch a short run's figure.
    const finished = new Map();
    let gap = false;
    const events = await sse(A.base, args.token);
    events.listen((e) => {
      if (e.event === "reset") gap = true;
      else if (e.event === "finished") for (const id of e.data.done ?? []) finished.set(id, e.at);
    });
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
    const drained = performance.now();
    const st = await A.statuses(ids);
    const by = { engine: 0, backend: 0, local: 0, remote: 0 };
    let dead = 0;
    const doneIds = [];
    for (const s of st) {
      if (s.state === "done") { by[s.result.source]++; doneIds.push(s.id); }
      else if (s.state === "dead") dead++;
      else throw new Error(`${name}: job ${s.id} is ${s.state} after the drain`);
    }
    if (st.length !== ids.length) throw new Error(`${name}: ${ids.length - st.length} of its jobs unknown to the server`);
    // The last events may still be on their way; a stream with a gap (`reset`) or without them
    // after 5 s leaves the rate to the drain's time, and says so.
    const announced = await waitFor("a finished event for every done job", 5000,
      async () => gap || doneIds.every((id) => finished.has(id))).then(() => !gap, () => false);
    events.close();
    const lastDone = announced && doneIds.length ? Math.max(...doneIds.map((id) => finished.get(id))) : drained;
    const doneSecs = (lastDone - t0) / 1000;
    const d1 = await pushedSince(Date.now());
    const h1 = sumHistograms(await Promise.all(servers.map((s) => s.jobLatency())));
    const done = ids.length - dead;
    return {
      name, n, ids, by, dead, done, announced,
      secs: (drained - t0) / 1000, doneSecs,
      rate: done / doneSecs,
      p50: latencyQuantile(h0, h1, 0.5), p99: latencyQuantile(h0, h1, 0.99),
      retries: serverSum(d1, "jobs_retried") - serverSum(d0, "jobs_retried"),
      overruled: serverSum(d1, "nacks_overruled") - serverSum(d0, "nacks_overruled"),
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
    log(`   ${r.done} jobs done in ${r.doneSecs.toFixed(2)} s = ${r.rate.toFixed(1)} jobs/s (enqueue included; ` +
      (r.announced ? "to the last job's \`finished\` event)" : "to the drain: the \`finished\` events were incomplete)"));
    if (r.dead) log(`   queue drained in ${r.secs.toFixed(2)} s (the ${r.dead} dead letter(s) after their attempts and backoff)`);
    log(`   local cache hits  ${pct(r.by.local, r.done)} (${r.by.local})   remote cache hits ${pct(r.by.remote, r.done)} (${r.by.remote})`);
    log(`   embedded: ${embedded} — engine ${pct(r.by.engine, embedded)} (${r.by.engine}), backend ${pct(r.by.backend, embedded)} (${r.by.backend})`);
    log(`   job latency claim → ack: p50 ${f1(r.p50)} ms, p99 ${f1(r.p99)} ms`);
    log(`   retries: ${r.retries} nack retries (${r.overruled} of them a worker's permanent nack overruled), ${r.workerRetries} in-worker retries, ${r.expired} expired leases; dead letters: ${r.dead}`);
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
    evB.close();
    // B's workers had the same event on their own streams; their next metrics push counts it.
    const inv1 = workerSum(await pushedSince(Date.now(), [1]), "invalidations");
    log(`  the workers connected to B applied ${inv1 - inv0} invalidation(s) from A's deletes (their \`invalidations\` counter)`);
    if (inv1 - inv0 <= 0) throw new Error("B's workers saw no invalidation from A");
    const [extra] = await waitFor("the extra job done", 30000, async () => {
      const st = await A.statuses([enq.jobs[0].id], { vectors: false });
      return st[0]?.state === "done" && st;
    });
    log(`  the extra job: ${extra.state} (${extra.result.source})`);
  }

  // ---- the dashboard: a search typed into it, then the screenshot -----------------------------
  await dash.fill("#q", "how do I read a file line by line");
  await dash.click("#search button");
  await dash.waitForSelector("#hits li", { timeout: 30000 });
  await dash.waitForFunction(() => Number(document.body.dataset.samples) > 5 && document.querySelectorAll("#workers tbody tr td").length > 1, null, { timeout: 30000 });
  // One more refresh drawn after the search, so the charts reach the end of both runs.
  const drawn = await dash.evaluate(() => Number(document.body.dataset.samples));
  await dash.waitForFunction((n) => Number(document.body.dataset.samples) > n, drawn, { timeout: 30000 });
  const png = resolve(args.out, "dashboard.png");
  await dash.screenshot({ path: png, fullPage: true });
  const shown = await dash.evaluate(() => ({ samples: Number(document.body.dataset.samples), workers: document.querySelectorAll("#workers tbody tr").length, hits: document.querySelectorAll("#hits li").length, dlq: document.querySelectorAll("#dlq tbody tr button").length }));
  log(`\ndashboard: ${shown.samples} samples charted, ${shown.workers} worker row(s), ${shown.hits} search hits, ${shown.dlq} dead letter(s) listed`);
  log(`dashboard screenshot: ${png}`);

  // The dashboard's redrive button, clicked. A redriven job starts again from attempt 0. Its
  // model still runs nowhere (no worker's, not the server's), and a worker's permanent nack alone
  // does not dead-letter a job (workers are untrusted: docs/security.md), so the server retries
  // it like any failing job: it is dead-lettered again after exactly its --max-attempts
  // deliveries, with backoff between them. The demo follows it by its state: each next step is
  // due by the time the server gave (a retry's available_at, a lease's expiry), plus 10 s for a
  // worker to claim and answer.
  const redrive = await (async () => {
    const before = (await A.get("/v1/dlq")).entries.find((e) => e.job.id === "poison-1");
    if (!before) return { problem: "poison-1 is not in the dead-letter queue before the redrive" };
    const overruled0 = serverSum(await dashboards(), "nacks_overruled");
    const t0 = performance.now();
    await dash.click('button[data-redrive="poison-1"]');
    const steps = [];
    let last = "", deadline = performance.now() + 10000;
    for (;;) {
      const [st] = await A.statuses(["poison-1"], { vectors: false });
      if (!st) return { problem: "poison-1 is gone after the redrive" };
      const again = st.state === "dead" &&
        (await A.get("/v1/dlq")).entries.find((e) => e.job.id === "poison-1" && e.dead_at > before.dead_at);
      if (again) {
        const fresh = again.history.slice(before.history.length);
        const overruled = serverSum(await dashboards(), "nacks_overruled") - overruled0;
        return { before, again, fresh, overruled, steps, ms: performance.now() - t0 };
      }
      const step = `${st.state === "queued" && st.available_at > Date.now() ? "delayed" : st.state} (attempt ${st.attempt})`;
      if (step !== last) {
        last = step;
        steps.push(step);
        const due = st.state === "queued" ? st.available_at : st.state === "leased" ? st.expires_at : Date.now();
        deadline = performance.now() + Math.max(0, due - Date.now()) + 10000;
      }
      if (performance.now() > deadline) return { problem: `poison-1 stuck ${last} after the redrive (seen: ${steps.join(" → ")})` };
      await sleep(50);
    }
  })();
  if (redrive.problem) log(`redrive button for poison-1: ${redrive.problem}`);
  else {
    const { fresh, again } = redrive;
    const gaps = fresh.slice(1).map((a, i) => s1(a.leased_at - fresh[i].ended_at));
    log(`redrive button for poison-1: re-queued, then ${fresh.length} more deliveries (configured: --max-attempts ${args.maxAttempts}) ` +
      `by ${new Set(fresh.map((a) => a.worker)).size} worker(s), backoff between them ${gaps.join(", ") || "–"}; ` +
      `${redrive.overruled} permanent nack(s) overruled (a worker's word alone does not dead-letter a job, and no engine of the servers' runs ${again.job.model_id}); ` +
      `dead-lettered again after ${s1(redrive.ms)}: ${again.error.code} (${again.error.message}); ${again.history.length} attempts in its history`);
  }

  // ---- checks the demo stands on ---------------------------------------------------------------
  const problems = [];
  if (r1.dead !== poison.length) problems.push(`run 1: ${r1.dead} dead letters, expected the ${poison.length} poison jobs`);
  if (r1.by.engine + r1.by.backend < texts.length * 0.5) problems.push("run 1: most vectors should be embedded");
  if (r2.dead !== 0) problems.push(`run 2: ${r2.dead} dead letters`);
  if (r2.by.local + r2.by.remote < texts.length * 0.9) problems.push("run 2: fewer than 90 % cache hits");
  if (shown.samples < 5 || shown.workers < 1) problems.push("the dashboard shows no live data");
  if (redrive.problem) problems.push(`the dashboard's redrive: ${redrive.problem}`);
  else {
    if (redrive.fresh.length !== args.maxAttempts) problems.push(`the dashboard's redrive: poison-1 was delivered ${redrive.fresh.length} more time(s) before its dead letter, not its ${args.maxAttempts} attempts`);
    const nacked = redrive.fresh.filter((a) => a.error.code !== "lease_expired").length;
    if (redrive.overruled !== nacked) problems.push(`the dashboard's redrive: ${redrive.overruled} nack(s) overruled by the servers, for ${nacked} nacked deliveries`);
  }
  if (problems.length) { console.error("demo: FAILED: " + problems.join("; ")); exitCode = 1; }
  await tab.evaluate(() => Promise.all(window.__workers.map((w) => w.stop({ deadline: 3000 }))));
} finally {
  await browser.close();
  stat.close();
}
process.exit(exitCode);
