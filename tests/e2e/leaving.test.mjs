// A visitor who leaves strands nothing: a tab closed while its worker holds leases hands them
// back in one request that outlives the page (`pagehide`, `fetch` with `keepalive`), so the jobs
// are claimable again at once instead of after their lease; another visitor's worker then
// finishes every job, none lost and none done twice. Real `ternflow serve` (embedded store,
// 30 s leases: the default), the npm package's worker (pkg/) in headless Chromium.
//
// Run (after scripts/build-pkg.sh and a `ternflow` build): TERNFLOW_BIN=target/debug/ternflow
//   node --test tests/e2e/
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { client, freePort, launchChromium, root, serveStatic, sleep } from "../../scripts/harness.mjs";

const BIN = resolve(root, process.env.TERNFLOW_BIN ?? "target/debug/ternflow");
const MODEL = resolve(root, "models/ternlight-int4.bin");
const JOBS = 3000;

/** `ternflow serve` on a free port with its own data directory; resolves to `{ url, stop }`. */
async function serve(token) {
  const dir = mkdtempSync(join(tmpdir(), "ternflow-leaving-"));
  const port = await freePort();
  const proc = spawn(BIN, ["serve", "--addr", `127.0.0.1:${port}`, "--data-dir", join(dir, "data"),
    "--model", MODEL, "--insecure-dev-token", token, "--cors-allow-localhost"], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  proc.stderr.on("data", (d) => { log = (log + d).slice(-4000); });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try { if ((await fetch(url + "/healthz")).ok) break; } catch { /* not yet */ }
    if (i > 100) throw new Error(`ternflow serve did not start: ${log}`);
    await sleep(100);
  }
  return { url, dir, stop: () => { proc.kill(); rmSync(dir, { recursive: true, force: true }); } };
}

/** A page with one EmbeddingWorker in queue mode on `server`. */
const workerPage = (server, token) => `<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,"><script type="module">
import { EmbeddingWorker } from "/pkg/client.js";
try {
  const w = new EmbeddingWorker({ server: { url: ${JSON.stringify(server)}, token: ${JSON.stringify(token)} }, dbName: "leaving-" + Math.random() });
  await w.ready;
  await w.start();
  window.__worker = w;
  window.__ready = true;
} catch (e) { window.__error = String(e && e.stack || e); }
</script>`;

test("a tab closed mid-run hands its leases back at once; another worker finishes every job once", { timeout: 600_000 }, async () => {
  const token = "leaving-" + Math.random().toString(36).slice(2);
  const server = await serve(token);
  const api = client(server.url, token);
  const stat = await serveStatic({ "/": workerPage(server.url, token) });
  const browser = await launchChromium();
  try {
    const texts = readFileSync(resolve(root, "www/demo/corpus.txt"), "utf8").split("\n").filter(Boolean).slice(0, JOBS);
    const file = join(server.dir, "jobs.txt");
    writeFileSync(file, texts.join("\n") + "\n");
    const idsFile = join(server.dir, "ids");
    execFileSync(BIN, ["enqueue", file, "--server", server.url, "--token", token, "--ids-out", idsFile], { stdio: ["ignore", "ignore", "inherit"] });
    const ids = readFileSync(idsFile, "utf8").split("\n").filter(Boolean);
    assert.equal(ids.length, JOBS);
    const queue = async () => (await api.get("/v1/dashboard?since=" + Date.now())).queue;
    const counters = async () => (await api.get("/v1/dashboard?since=" + Date.now())).counters;

    // Visitor 1: works until it has finished some jobs and holds 100 leases or more, then
    // closes the tab.
    const tab = await browser.newPage();
    tab.on("console", (m) => { if (m.type() === "error") console.error(`[tab] ${m.text()}`); });
    await tab.goto(stat.url + "/");
    await tab.waitForFunction(() => window.__ready || window.__error, null, { timeout: 120_000, polling: 100 });
    assert.equal(await tab.evaluate(() => window.__error ?? null), null);
    let q;
    for (const t0 = Date.now(); ; await sleep(20)) {
      q = await queue();
      if (q.leased >= 100 && ((await counters()).jobs_acked ?? 0) >= 300) break;
      assert.ok(Date.now() - t0 < 120_000, `the worker never held 100 leases after 300 jobs: ${JSON.stringify(q)}`);
    }
    // The worker tells the page what it holds at most 50 ms after a change: let that land.
    await sleep(200);
    const c0 = await counters();
    const atClose = (await queue()).leased;
    const closed = performance.now();
    await tab.close();
    let freedMs = null;
    for (;;) {
      q = await queue();
      if (q.leased === 0) { freedMs = performance.now() - closed; break; }
      if (performance.now() - closed > 10_000) break;
      await sleep(10);
    }
    const c1 = await counters();
    const released = (c1.leases_released ?? 0) - (c0.leases_released ?? 0);
    console.log(`leaving: ${atClose} leases held at close; all claimable again after ${freedMs == null ? "> 10 s" : freedMs.toFixed(0) + " ms"} ` +
      `(${released} handed back; lease 30 s)`);
    assert.ok(freedMs != null, `${q.leased} jobs still leased 10 s after the tab closed`);
    assert.ok(freedMs < 1000, `claimable again after ${freedMs} ms, not within 1 s`);
    assert.ok(released >= atClose * 0.9, `${released} leases handed back of the ${atClose} held`);

    // Visitor 2 finishes the queue: every job done, each acked exactly once.
    const acked0 = c1.jobs_acked ?? 0;
    const tab2 = await browser.newPage();
    await tab2.goto(stat.url + "/");
    await tab2.waitForFunction(() => window.__ready || window.__error, null, { timeout: 120_000, polling: 100 });
    for (const t0 = Date.now(); ; await sleep(100)) {
      q = await queue();
      if (q.ready + q.delayed + q.leased === 0) break;
      assert.ok(Date.now() - t0 < 300_000, `not drained: ${JSON.stringify(q)}`);
    }
    const st = await api.statuses(ids, { vectors: false });
    const notDone = st.filter((s) => s.state !== "done");
    assert.deepEqual(notDone.map((s) => `${s.id}: ${s.state}`), [], "every job done");
    const c2 = await counters();
    const doneBefore = (c1.jobs_acked ?? 0);
    console.log(`leaving: after the close, ${c2.jobs_acked - acked0} acks for the ${JOBS - doneBefore} jobs left; ${c2.jobs_acked} acks for ${JOBS} jobs in all`);
    assert.equal(c2.jobs_acked, JOBS, "each job acked exactly once");
    await tab2.evaluate(() => window.__worker.stop({ deadline: 3000 }));
  } finally {
    await browser.close();
    stat.close();
    server.stop();
  }
});
