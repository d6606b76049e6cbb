// What the end-to-end tests share: a real `ternflow serve` of their own (embedded store, the
// default model, 30 s leases), the demo corpus enqueued with `ternflow enqueue`, and a page
// with one EmbeddingWorker of the npm package (pkg/) in queue mode.
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { freePort, root, sleep } from "../../scripts/harness.mjs";

export const BIN = resolve(root, process.env.TERNFLOW_BIN ?? "target/debug/ternflow");
export const MODEL = resolve(root, "models/ternlight-int4.bin");
const JOBS = 3000;

/** `ternflow serve` on a free port with its own data directory; resolves to `{ url, stop }`. */
export async function serve(token) {
  const dir = mkdtempSync(join(tmpdir(), "ternflow-leaving-"));
  const port = await freePort();
  const proc = spawn(BIN, ["serve", "--addr", `127.0.0.1:${port}`, "--data-dir", join(dir, "data"),
    "--model", MODEL, "--insecure-dev-token", token, "--cors-allow-localhost"],
    { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, RUST_LOG: "info,tower_http=debug,ternflow_server::routes=debug" } });
  let log = "", partial = "";
  // What a test may print when it fails: the answers to the hand-back requests.
  const releases = [];
  proc.stderr.on("data", (d) => {
    log = (log + d).slice(-4000);
    const lines = (partial + d).split("\n");
    partial = lines.pop();
    for (const l of lines) {
      const answer = l.includes("/v1/jobs/release") && l.includes("processing request");
      const ended = l.includes("a worker session ended") || l.includes("a worker session's stream dropped");
      if ((answer || ended) && releases.length < 200) releases.push(l);
    }
  });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try { if ((await fetch(url + "/healthz")).ok) break; } catch { /* not yet */ }
    if (i > 100) throw new Error(`ternflow serve did not start: ${log}`);
    await sleep(100);
  }
  return { url, dir, releases, stop: () => { proc.kill(); rmSync(dir, { recursive: true, force: true }); } };
}

/** A page with one EmbeddingWorker in queue mode on `server`. */
export const workerPage = (server, token, start = {}) => `<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,"><script type="module">
import { EmbeddingWorker } from "/pkg/client.js";
try {
  const w = new EmbeddingWorker({ server: { url: ${JSON.stringify(server)}, token: ${JSON.stringify(token)} }, dbName: "e2e-" + Math.random() });
  await w.ready;
  await w.start(${JSON.stringify(start)});
  window.__worker = w;
  window.__ready = true;
} catch (e) { window.__error = String(e && e.stack || e); }
</script>`;


/**
 * Enqueues `n` sentences of the corpus on `server` (past its 3 000, the same again with a
 * number after each: other texts, other jobs); their job ids.
 */
export function enqueueCorpus(server, token, n) {
  const corpus = readFileSync(resolve(root, "www/demo/corpus.txt"), "utf8").split("\n").filter(Boolean);
  const texts = Array.from({ length: n }, (_, i) =>
    i < corpus.length ? corpus[i] : `${corpus[i % corpus.length]} (${Math.floor(i / corpus.length)})`);
  const file = join(server.dir, "jobs.txt");
  writeFileSync(file, texts.join("\n") + "\n");
  const idsFile = join(server.dir, "ids");
  execFileSync(BIN, ["enqueue", file, "--server", server.url, "--token", token, "--ids-out", idsFile], { stdio: ["ignore", "ignore", "inherit"] });
  return readFileSync(idsFile, "utf8").split("\n").filter(Boolean);
}
