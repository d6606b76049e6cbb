// Node benchmark of the engine in wasm (single thread).
// Build first:  scripts/build-pkg.sh (the npm package in pkg/, the wasm that ships)
// Run:          node bench/engine.mjs --model MODEL.tern [--input bench/short.txt] [--iters 500]
// Prints one summary line: median / p90 / p99 ms per embed, embeds/s, cold start (instantiate +
// load + first embed) and wasm memory after load.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL, fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";
import { measure, summary, parseArgs } from "./measure.mjs";

const here = fileURLToPath(new URL(".", import.meta.url));
const args = parseArgs(process.argv.slice(2));
const inputPath = args.input ?? resolve(here, "short.txt");
const inputs = readFileSync(inputPath, "utf8").split("\n").filter((l) => l.length > 0);
const modelBytes = new Uint8Array(readFileSync(args.model));
const pkg = resolve(here, "..", args.pkg);
const wasm = await import(pathToFileURL(resolve(pkg, "ternflow.js")).href);
const source = readFileSync(resolve(pkg, "ternflow_bg.wasm"));
const r = await measure({ wasm, source, modelBytes, inputs, iters: args.iters, now: () => performance.now() });
console.log(summary(`node ${process.version}`, r));
