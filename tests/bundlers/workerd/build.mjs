// Bundles the Worker with esbuild the way wrangler does: `workerd` / `worker` / `browser`
// conditions, `.wasm` kept as a WebAssembly.Module import and the model as a Data module.
import { build } from "esbuild";
import { copyFileSync, mkdirSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = process.env.OUT_DIR ?? join(here, "dist");
mkdirSync(out, { recursive: true });
const copied = new Set();
const modules = {
  name: "wasm-and-data-modules",
  setup(b) {
    b.onResolve({ filter: /\.(wasm|bin)$/ }, (args) => {
      const file = join(args.resolveDir, args.path);
      copyFileSync(file, join(out, basename(file)));
      copied.add(basename(file));
      return { path: `./${basename(file)}`, external: true };
    });
  },
};
await build({
  entryPoints: [join(here, "worker.js"), join(here, "worker-remote-model.js")],
  bundle: true,
  format: "esm",
  platform: "neutral",
  conditions: ["workerd", "worker", "browser"],
  mainFields: ["module", "main"],
  minify: true,
  outdir: out,
  plugins: [modules],
  logLevel: "warning",
});
// The queue driver is a plain module (nothing to bundle).
copyFileSync(join(here, "driver.js"), join(out, "driver.js"));
console.log(JSON.stringify([...copied]));
