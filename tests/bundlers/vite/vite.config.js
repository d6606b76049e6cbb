// A plain Vite 8 app: the only setting ternflow needs is ES-module workers.
import { defineConfig } from "vite";

export default defineConfig({
  worker: { format: "es" },
  build: { outDir: process.env.OUT_DIR ?? "dist", emptyOutDir: true },
  logLevel: "warn",
});
