// A plain Vite 8 app (the page in ../app): the only setting ternflow needs is ES-module workers.
import { defineConfig } from "vite";
import { fileURLToPath } from "node:url";

export default defineConfig({
  root: fileURLToPath(new URL("../app", import.meta.url)),
  worker: { format: "es" },
  build: { outDir: process.env.OUT_DIR ?? "dist", emptyOutDir: true },
  logLevel: "warn",
});
