// Headless Chromium benchmark of the engine in wasm (single thread, page main thread).
// Build first:  scripts/build-pkg.sh (the npm package in pkg/, the wasm that ships)
// Run:          node bench/engine-browser.mjs --model MODEL.tern [--input bench/short.txt] [--iters 500]
// Serves the repo's pkg/ and bench/ plus the model and input from a tiny http server on
// 127.0.0.1 (cross-origin isolated, for fine-grained performance.now()), drives /usr/bin/chromium
// with playwright-core, and prints the same summary line as bench/engine.mjs.
import { createServer } from "node:http";
import { readFileSync, existsSync } from "node:fs";
import { resolve, extname, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { summary, parseArgs } from "./measure.mjs";

const root = resolve(fileURLToPath(new URL(".", import.meta.url)), "..");
const args = parseArgs(process.argv.slice(2));
const inputPath = args.input ?? resolve(root, "bench/short.txt");
const types = { ".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm", ".html": "text/html" };

const page = `<!doctype html><meta charset="utf-8"><title>ternflow engine bench</title>
<script type="module">
import { measure } from "/bench/measure.mjs";
import * as wasm from "/${args.pkg}/ternflow.js";
try {
  const modelBytes = new Uint8Array(await (await fetch("/model.tern")).arrayBuffer());
  const inputs = (await (await fetch("/input.txt")).text()).split("\\n").filter((l) => l.length > 0);
  const source = new URL("/${args.pkg}/ternflow_bg.wasm", location.href);
  window.__result = await measure({ wasm, source, modelBytes, inputs, iters: ${args.iters}, now: () => performance.now() });
} catch (e) { window.__error = String(e && e.stack || e); }
</script>`;

const server = createServer((req, res) => {
  const url = new URL(req.url, "http://x");
  let body, type;
  if (url.pathname === "/") [body, type] = [page, "text/html"];
  else if (url.pathname === "/model.tern") [body, type] = [readFileSync(args.model), "application/octet-stream"];
  else if (url.pathname === "/input.txt") [body, type] = [readFileSync(inputPath), "text/plain; charset=utf-8"];
  else {
    const rel = normalize(decodeURIComponent(url.pathname)).replace(/^\/+/, "");
    const ok = rel.startsWith(`${args.pkg}/`) || rel.startsWith("bench/");
    const file = resolve(root, rel);
    if (!ok || !file.startsWith(root) || !existsSync(file)) { res.writeHead(404).end(); return; }
    [body, type] = [readFileSync(file), types[extname(file)] ?? "application/octet-stream"];
  }
  res.writeHead(200, {
    "Content-Type": type,
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
    "Cache-Control": "no-store",
  });
  res.end(body);
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const { port } = server.address();

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--headless=new", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run"],
});
try {
  const tab = await browser.newPage();
  tab.on("console", (m) => console.error(`[page] ${m.text()}`));
  await tab.goto(`http://127.0.0.1:${port}/`);
  await tab.waitForFunction(() => window.__result || window.__error, null, { timeout: 600000, polling: 200 });
  const err = await tab.evaluate(() => window.__error);
  if (err) throw new Error(err);
  const r = await tab.evaluate(() => window.__result);
  console.log(summary(`chromium ${browser.version()}`, r));
} finally {
  await browser.close();
  server.close();
}
