// How each bundler fixture is built (into `out`), as its README recipe says.
import { join } from "node:path";
import { BIN, HERE, sh } from "./lib.mjs";

export const BUILDS = {
  vite: (out) => sh(join(BIN, "vite"), ["build", "--config", join(HERE, "vite/vite.config.js")], { env: { OUT_DIR: out } }),
  webpack: (out) => sh(process.execPath, [join(HERE, "webpack/build.mjs")], { env: { OUT_DIR: out } }),
  esbuild: (out) => sh(process.execPath, [join(HERE, "esbuild/build.mjs")], { env: { OUT_DIR: out } }),
  // Parcel 2: nothing to configure (its cache kept out of the source tree).
  parcel: (out) =>
    sh(join(BIN, "parcel"), ["build", join(HERE, "app/index.html"), "--dist-dir", out, "--cache-dir", join(out, "..", ".parcel-cache"), "--no-autoinstall"]),
  rollup: (out) => sh(join(BIN, "rollup"), ["--config", join(HERE, "rollup/rollup.config.mjs")], { env: { OUT_DIR: out } }),
};
