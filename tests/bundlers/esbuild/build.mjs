// A plain esbuild app. esbuild does not follow `new URL(..., import.meta.url)`, so the worker and
// the engine worker it starts are entry points too and the wasm and the model are copied beside
// the bundle.
import { build } from "esbuild";
import { copyFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = process.env.OUT_DIR ?? join(here, "dist");
const pkg = dirname(createRequire(join(here, "../app/main.js")).resolve("ternflow/package.json"));
mkdirSync(out, { recursive: true });
await build({
  entryPoints: { main: join(here, "../app/main.js"), worker: join(pkg, "worker.js"),
    "engine-worker": join(pkg, "engine-worker.js") },
  bundle: true,
  format: "esm",
  platform: "browser",
  minify: true,
  outdir: out,
  logLevel: "warning",
});
for (const f of ["ternflow_bg.wasm", "ternlight-int4.bin"]) copyFileSync(join(pkg, f), join(out, f));
copyFileSync(join(here, "../app/index.html"), join(out, "index.html"));
