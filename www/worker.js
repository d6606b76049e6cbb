// The Web Worker bootstrap: load the wasm, then forward every message to Rust and post the reply.
// All logic (and the message types) live in Rust: see src/worker.rs and crates/core/src/messages.rs.
import init, { handle, setEngineWorkerFactory } from "./ternflow.js";
import { publishedSibling, startModuleWorker } from "./common.js";

// The literal form bundlers recognise (they emit the file and rewrite the URL).
const wasmUrl = new URL("./ternflow_bg.wasm", import.meta.url);

// Fetched here, not inside init(), so a missing or unreachable wasm becomes a typed error reply
// (naming the URL) instead of a rejection nobody sees.
const ready = (async () => {
  let resp;
  try {
    resp = await fetch(wasmUrl);
  } catch (e) {
    throw { code: "unreachable", url: wasmUrl.href, message: `GET ${wasmUrl.href}: ${e?.message ?? e}` };
  }
  if (!resp.ok) {
    throw { code: `http_${resp.status}`, url: wasmUrl.href, message: `GET ${wasmUrl.href}: HTTP ${resp.status}` };
  }
  let module;
  try {
    // Compiled here (streaming where the server says application/wasm) so the same module also
    // starts the engine worker: the wasm is fetched and compiled once.
    const streaming = (resp.headers.get("content-type") ?? "").startsWith("application/wasm");
    module = streaming
      ? await WebAssembly.compileStreaming(resp)
      : await WebAssembly.compile(await resp.arrayBuffer());
    await init({ module_or_path: module });
  } catch (e) {
    throw { code: "bad_wasm", url: wasmUrl.href, message: `${wasmUrl.href}: ${e?.message ?? e}` };
  }
  // The engine runs in a worker of its own where this worker can start one (nested dedicated
  // workers); the literal `new Worker(new URL(...))` form is the one bundlers see and emit.
  if (typeof Worker === "function") {
    // When this worker started from a CDN through a same-origin bootstrap, the engine worker's
    // script is on the CDN's origin too and starts the same way (a throw here leaves the model
    // on this worker's thread). Its URL is known only when the package runs as published (a
    // bundler renames the files); not written as `new URL(…, import.meta.url)`, which bundlers
    // would take for a second asset (webpack: "Critical dependency").
    const engineUrl = publishedSibling(import.meta.url, "worker.js", "engine-worker.js");
    setEngineWorkerFactory(() => {
      const w = startModuleWorker(
        () => new Worker(new URL("./engine-worker.js", import.meta.url), { type: "module", name: "ternflow-engine" }),
        engineUrl,
        { name: "ternflow-engine" },
      );
      w.postMessage({ type: "init", module });
      return w;
    });
  }
})();

self.onmessage = async (event) => {
  const msg = event.data;
  try {
    await ready;
  } catch (e) {
    if (msg?.type !== "cancel") self.postMessage({ type: "error", id: msg?.id ?? 0, ...e });
    return;
  }
  const reply = await handle(msg);
  if (reply) self.postMessage(reply);
};
