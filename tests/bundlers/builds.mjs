// How each bundler fixture is built (into `out`), as its README recipe says.
import { join } from "node:path";
import { BIN, HERE, sh } from "./lib.mjs";

export const BUILDS = {
  vite: (out) => sh(join(BIN, "vite"), ["build", "--config", join(HERE, "vite/vite.config.js")], { env: { OUT_DIR: out } }),
  webpack: (out) => sh(process.execPath, [join(HERE, "webpack/build.mjs")], { env: { OUT_DIR: out } }),
  esbuild: (out) => sh(process.execPath, [join(HERE, "esbuild/build.mjs")], { env: { OUT_DIR: out } }),
};
