// The package's entry for Deno and Bun (exports conditions `deno` and `bun`): the Node API
// (a synchronous engine: `loadEngine`, `embed`, `similar`, `Engine`) as named exports, and the
// edge handler `{ fetch, queue }` as the default export, so that `deno serve`, `Bun.serve` and
// `export default` recipes work as they do under workerd. Both read the wasm and the model from
// the package's own files (Deno: `--allow-read`); the handler does so on its first request, so
// importing the engine alone costs nothing more.

import { readFileSync } from "node:fs";
import * as bindings from "./ternflow.js";
import { createWorker } from "./edge/handler.mjs";
import { TernflowError } from "./common.js";

export * from "./node.js";

/** The handler's settings from the environment (Deno: `--allow-env`; unset when not allowed). */
function env() {
  const read = (k) => {
    try {
      return globalThis.Deno ? globalThis.Deno.env.get(k) : globalThis.process?.env?.[k];
    } catch {
      return undefined; // Deno without --allow-env: as if unset
    }
  };
  const out = {};
  for (const k of ["TERNFLOW_SERVER", "TERNFLOW_TOKEN", "TERNFLOW_QUEUE_MAX_ATTEMPTS"]) {
    const v = read(k);
    if (v !== undefined) out[k] = v;
  }
  return out;
}

let worker = null;
function edge() {
  if (worker) return worker;
  const file = (name) => {
    const url = new URL(name, import.meta.url);
    try {
      return readFileSync(url);
    } catch (e) {
      const hint = globalThis.Deno ? " (Deno needs --allow-read)" : "";
      throw new TernflowError("not_found", `cannot read ${url.href}: ${e?.message ?? e}${hint}`, { url: url.href, cause: e });
    }
  };
  let wasmModule;
  const wasm = file("./ternflow_bg.wasm");
  try {
    wasmModule = new WebAssembly.Module(wasm);
  } catch (e) {
    throw new TernflowError("bad_wasm", `ternflow_bg.wasm does not compile: ${e?.message ?? e}`, { cause: e });
  }
  worker = createWorker({ bindings, wasmModule, modelBytes: file("./ternlight-int4.bin") });
  return worker;
}

const failed = (e) =>
  Response.json({ error: { code: e?.code ?? "internal", message: String(e?.message ?? e) } }, { status: 503 });

/**
 * `fetch(request)`: `POST {"texts": [...]}` → `{"vectors", "sources"}`, as under workerd. The
 * second argument is the runtime's (Deno's serve info, Bun's server), never an env: the settings
 * come from the process environment (`TERNFLOW_SERVER`, `TERNFLOW_TOKEN`).
 */
async function fetchHandler(request) {
  let w;
  try {
    w = edge();
  } catch (e) {
    return failed(e);
  }
  return w.fetch(request, env());
}

export default {
  fetch: fetchHandler,
  queue: (batch, queueEnv) => edge().queue(batch, queueEnv ?? env()),
};
