// Headless Chromium benchmark of the engine in wasm (single thread, page main thread).
// Build first:  scripts/build-pkg.sh (the npm package in pkg/, the wasm that ships)
// Run:          node bench/engine-browser.mjs --model MODEL.tern [--input bench/short.txt] [--iters 500] [--pkg pkg]
// Serves the repo's pkg/ (or --pkg, a folder of the repo) and bench/ plus the model and input on
// 127.0.0.1 (cross-origin isolated, for fine-grained performance.now()), drives /usr/bin/chromium
// with playwright-core (both from scripts/harness.mjs), and prints the same summary line as
// bench/engine.mjs.
import { resolve } from "node:path";
import { summary, parseArgs } from "./measure.mjs";
import { launchChromium, pageResult, root, serveStatic } from "../scripts/harness.mjs";

const args = parseArgs(process.argv.slice(2));
const inputPath = args.input ?? resolve(root, "bench/short.txt");

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

// Cross-origin isolated, for fine-grained performance.now().
const server = await serveStatic({ "/": page }, {
  allow: [`${args.pkg}/`, "bench/"],
  files: { "/model.tern": resolve(args.model), "/input.txt": resolve(inputPath) },
  headers: { "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp", "Cache-Control": "no-store" },
});
const browser = await launchChromium();
try {
  const r = await pageResult(browser, `${server.url}/`);
  console.log(summary(`chromium ${browser.version()}`, r));
} finally {
  await browser.close();
  server.close();
}
