// The Web Worker bootstrap: load the wasm, then forward every message to Rust and post the reply.
// All logic (and the message types) live in Rust: see src/worker.rs and crates/core/src/messages.rs.
import init, { handle, loadModelBytes } from "./ternflow.js";

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
  try {
    await init({ module_or_path: resp });
  } catch (e) {
    throw { code: "bad_wasm", url: wasmUrl.href, message: `${wasmUrl.href}: ${e?.message ?? e}` };
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
  if (msg && msg.type === "loadModelBytes") {
    // Bytes arrive as a transferred ArrayBuffer; the engine copies them once into wasm memory.
    try {
      const modelId = loadModelBytes(new Uint8Array(msg.bytes));
      self.postMessage({ type: "ready", id: msg.id, modelId });
    } catch (e) {
      self.postMessage({ type: "error", id: msg.id, code: "bad_model", message: String(e.message ?? e) });
    }
    return;
  }
  const reply = await handle(msg);
  if (reply) self.postMessage(reply);
};
