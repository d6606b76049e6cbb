// A Rollup 4 app, as the npm README's recipe says: Rollup does not follow
// `new URL(..., import.meta.url)` into a worker (the usual import-meta-assets plugin copies the
// worker unbundled, and its imports 404), so the worker and the engine worker are inputs of
// their own, named as the package's code expects, and the wasm and the model are emitted beside
// them.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { nodeResolve } from "@rollup/plugin-node-resolve";

const here = dirname(fileURLToPath(import.meta.url));
const app = join(here, "../app");
const pkg = dirname(createRequire(join(app, "main.js")).resolve("ternflow/package.json"));

export default {
  input: {
    main: join(app, "main.js"),
    worker: join(pkg, "worker.js"),
    "engine-worker": join(pkg, "engine-worker.js"),
  },
  output: { dir: process.env.OUT_DIR ?? join(here, "dist"), format: "es", entryFileNames: "[name].js" },
  plugins: [
    nodeResolve({ browser: true }),
    {
      name: "ternflow-files",
      generateBundle() {
        for (const f of ["ternflow_bg.wasm", "ternlight-int4.bin"]) {
          this.emitFile({ type: "asset", fileName: f, source: readFileSync(join(pkg, f)) });
        }
        this.emitFile({ type: "asset", fileName: "index.html", source: readFileSync(join(app, "index.html")) });
      },
    },
  ],
};
