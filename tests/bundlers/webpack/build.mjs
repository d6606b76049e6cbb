// Builds the webpack app through webpack's Node API (no webpack-cli needed).
import webpack from "webpack";
import { copyFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const config = createRequire(import.meta.url)("./webpack.config.cjs");
const stats = await new Promise((resolve, reject) =>
  webpack(config, (err, s) => (err ? reject(err) : resolve(s))),
);
if (stats.hasErrors() || stats.hasWarnings()) {
  console.error(stats.toString("errors-warnings"));
  if (stats.hasErrors()) process.exit(1);
}
copyFileSync(join(import.meta.dirname, "../app/index.html"), join(config.output.path, "index.html"));
