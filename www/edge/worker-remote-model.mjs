// Cloudflare-Workers-style entry for the Workers Free plan (3 MB upload): the wasm is bundled,
// the model is not. It is fetched on the first request from `env.TERNFLOW_MODEL_URL` (or the
// server's `GET /v1/model`), checked, and kept in the Cache API.
import * as bindings from "../ternflow.js";
import wasmModule from "../ternflow_bg.wasm";
import { createWorker } from "./handler.mjs";

export default createWorker({ bindings, wasmModule });
