// Cloudflare-Workers-style entry: bundle it with the npm package (wrangler treats `.wasm` imports
// as WebAssembly.Module and, with a `Data` rule for `.bin`, the model as an ArrayBuffer).
import * as bindings from "../ternflow.js";
import wasmModule from "../ternflow_bg.wasm";
import modelBytes from "../ternlight-int4.bin";
import { createWorker } from "./handler.mjs";

export default createWorker({ bindings, wasmModule, modelBytes });
