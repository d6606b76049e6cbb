// The demo's browser half: a page imports the npm package built in pkg/, starts an
// EmbeddingWorker in queue mode against the server, waits until the queue is drained, then runs a
// semantic search with the ternlight-compatible `similar()` helper. Prints what the page saw.
// Usage: node scripts/demo-browser.mjs SERVER_URL TOKEN N_JOBS
import { createServer } from "node:http";
import { readFileSync, existsSync } from "node:fs";
import { resolve, extname, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const [api, token, nJobs] = process.argv.slice(2);
const root = resolve(fileURLToPath(new URL(".", import.meta.url)), "..");
const page = `<!doctype html><meta charset="utf-8"><script type="module">
import { EmbeddingWorker, similar } from "/pkg/client.js";
const log = (...a) => console.log(a.join(" "));
try {
  const w = new EmbeddingWorker({ server: { url: ${JSON.stringify(api)}, token: ${JSON.stringify(token)} } });
  log("model loaded:", await w.ready);
  w.addEventListener("metrics", (e) => log("metrics: done", e.detail.counters.jobs_done ?? 0,
    "rate", (e.detail.gauges.processing_rate ?? 0).toFixed(1), "jobs/s"));
  const t0 = performance.now();
  await w.start({ concurrency: 4 });
  let s;
  do { await new Promise((r) => setTimeout(r, 200)); s = await w.stats(); }
  while ((s.counters.jobs_done ?? 0) + (s.counters.jobs_dead ?? 0) < ${Number(nJobs)});
  const summary = await w.stop({ deadline: 5000 });
  log("queue drained in", (performance.now() - t0).toFixed(0), "ms:", JSON.stringify(summary));
  const corpus = (await (await fetch("/www/demo/texts.txt")).text()).split("\\n").filter(Boolean);
  const detailed = await w.embedDetailed(corpus);
  log("sources of the corpus vectors:", JSON.stringify(detailed.map((d) => d.source)));
  for (const q of ["I can't log in to my account", "getting a refund", "public transport to the airport"]) {
    const hits = await similar(q, corpus, { topK: 2, worker: w });
    log("query:", JSON.stringify(q), "->", hits.map((h) => JSON.stringify(h.text) + " " + h.score.toFixed(3)).join(" | "));
  }
  window.__done = true;
} catch (e) { window.__error = String(e && e.stack || e); }
</script>`;
const types = { ".js": "text/javascript", ".wasm": "application/wasm", ".bin": "application/octet-stream", ".txt": "text/plain" };
const http = createServer((req, res) => {
  const rel = normalize(decodeURIComponent(new URL(req.url, "http://x").pathname)).replace(/^\/+/, "");
  if (rel === "" || rel === ".") { res.writeHead(200, { "Content-Type": "text/html" }).end(page); return; }
  const file = resolve(root, rel);
  if (!(rel.startsWith("pkg/") || rel.startsWith("www/")) || !existsSync(file)) { res.writeHead(404).end(); return; }
  res.writeHead(200, { "Content-Type": types[extname(file)] ?? "application/octet-stream" }).end(readFileSync(file));
});
await new Promise((r) => http.listen(0, "127.0.0.1", r));
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--headless=new", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run"],
});
try {
  const tab = await browser.newPage();
  tab.on("console", (m) => console.log(`[page] ${m.text()}`));
  await tab.goto(`http://127.0.0.1:${http.address().port}/`);
  await tab.waitForFunction(() => window.__done || window.__error, null, { timeout: 300000, polling: 200 });
  const err = await tab.evaluate(() => window.__error);
  if (err) throw new Error(err);
} finally {
  await browser.close();
  http.close();
}
