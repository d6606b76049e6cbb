// A plain webpack 5 app: webpack recognises ternflow's `new Worker(new URL(...))` and
// `new URL("./x.wasm" | "./x.bin", import.meta.url)` on its own.
const path = require("node:path");

module.exports = {
  mode: "production",
  entry: path.resolve(__dirname, "../app/main.js"),
  output: { path: process.env.OUT_DIR ?? path.resolve(__dirname, "dist"), filename: "main.js", clean: true },
  performance: { hints: false },
};
