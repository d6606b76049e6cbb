#!/usr/bin/env node
// Prints the npm package's figures, measured now (nothing hard-coded): per bundler fixture the
// bundle raw / gzipped and what the page downloads on a cold load; cold start to first vector in
// each app (Chromium, fresh profile); in workerd: cold start, CPU time per short-text request
// (the workerd process's own CPU time, from /proc), and the upload per edge build against the
// Workers limits (3 MiB Free, 10 MiB Paid, gzipped).
// Usage: scripts/build-pkg.sh && tests/bundlers/prepare.sh && node tests/bundlers/figures.mjs
import { mkdirSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { BUILDS } from "./builds.mjs";
import { HERE, WORK, browser, runPage, serve } from "./lib.mjs";
import { buildEdge, edgeUploads, startWorkerd, workerdCpuMs } from "./edge.mjs";

const kib = (n) => `${(n / 1024).toFixed(0)} KiB`;
const mib = (n) => `${(n / 1048576).toFixed(2)} MiB`;
const files = (dir) =>
  readdirSync(dir, { recursive: true }).map((f) => join(dir, f)).filter((f) => statSync(f).isFile());
const gz = (f) => gzipSync(readFileSync(f), { level: 9 }).length;

console.log("| fixture | JS raw | JS gzipped | wasm gzipped | model | page downloads (cold) | cold start to first vector |");
console.log("|---|---|---|---|---|---|---|");
for (const [name, buildApp] of Object.entries(BUILDS)) {
  const out = join(WORK, `figures-${name}`);
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  await buildApp(out);
  const all = files(out);
  const js = all.filter((f) => f.endsWith(".js"));
  const raw = js.reduce((s, f) => s + statSync(f).size, 0);
  const jsGz = js.reduce((s, f) => s + gz(f), 0);
  const wasmGz = all.filter((f) => f.endsWith(".wasm")).reduce((s, f) => s + gz(f), 0);
  const model = all.filter((f) => f.endsWith(".bin")).reduce((s, f) => s + statSync(f).size, 0);
  const srv = await serve(out);
  const ctx = await (await browser()).newContext();
  const page = await ctx.newPage();
  let bytes = 0;
  page.on("response", async (r) => {
    const len = Number(r.headers()["content-length"] ?? 0);
    bytes += len;
  });
  const r = await runPage(page, `${srv.url}/`);
  await ctx.close();
  await srv.close();
  console.log(`| ${name} | ${kib(raw)} | ${kib(jsGz)} | ${kib(wasmGz)} | ${mib(model)} | ${mib(bytes)} (uncompressed) | ${r.firstVectorMs.toFixed(0)} ms |`);
}
await (await browser()).close();

const edge = await buildEdge(join(WORK, "figures-edge"));
const w = await startWorkerd(edge.dir, edge.variants[0]);
console.log(`\nworkerd (${edge.variants[0].name}): cold start (spawn to first vector) ${w.coldMs.toFixed(0)} ms`);
const cpu0 = workerdCpuMs(w.pid);
const n = 50;
for (let i = 0; i < n; i++) {
  await fetch(w.url, { method: "POST", body: JSON.stringify({ texts: [`a short text to embed, number ${i}`] }) }).then((r) => r.json());
}
console.log(`workerd: CPU per request for a short text (engine, no cache hit): ${((workerdCpuMs(w.pid) - cpu0) / n).toFixed(1)} ms (workerd process CPU over ${n} requests)`);
await w.stop();
const modelHost = await serve(join(HERE, "node_modules/ternflow"));
const free = await startWorkerd(edge.dir, edge.variants[1], { TERNFLOW_MODEL_URL: `${modelHost.url}/ternlight-int4.bin` });
if (free.first.status !== 200) throw new Error(`remote-model build failed: ${JSON.stringify(free.first.body)}`);
console.log(`workerd (${edge.variants[1].name}): cold start incl. the model download from loopback ${free.coldMs.toFixed(0)} ms`);
await free.stop();
await modelHost.close();
console.log("\n| edge build | upload gzipped | Free (3 MiB) | Paid (10 MiB) |");
console.log("|---|---|---|---|");
for (const u of edgeUploads(edge)) {
  console.log(`| ${u.name} | ${mib(u.gzipped)} | ${u.gzipped < 3 * 1048576 ? "fits" : "too big"} | ${u.gzipped < 10 * 1048576 ? "fits" : "too big"} |`);
}
