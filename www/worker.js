// The Web Worker bootstrap: load the wasm, then forward every message to Rust and post the reply.
// All logic (and the message types) live in Rust: see src/worker.rs and crates/core/src/messages.rs.
import init, { handle, loadModelBytes } from "./ternflow.js";

const ready = init();

self.onmessage = async (event) => {
  await ready;
  const msg = event.data;
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
  self.postMessage(await handle(msg));
};
