// The engine's own worker, started by worker.js (the pipeline's worker) so that embeds never hold
// the thread its network and IndexedDB work runs on. It only embeds: the pipeline worker sends it
// the compiled wasm, then a model, then texts; the protocol is in src/engine_worker.rs.
// `engine-glue.js` is a copy of `ternflow.js` (scripts/build-pkg.sh): the two workers share no
// module, so no bundler puts one in a chunk both load (Parcel 2.16 loses such a chunk's modules
// when it scope-hoists: "Cannot find module" at run time).
import init, { TernflowEngine, wasmMemoryBytes } from "./engine-glue.js";

let ready = null;
let engine = null;

const message = (e) => String(e?.message ?? e);

self.onmessage = async ({ data: msg }) => {
  if (msg.type === "init") {
    ready = init({ module_or_path: msg.module });
    return;
  }
  try {
    await ready;
  } catch (e) {
    self.postMessage({ type: "broken", message: `the wasm did not start: ${message(e)}` });
    return;
  }
  if (msg.type === "load") {
    let next;
    try {
      next = new TernflowEngine(new Uint8Array(msg.bytes));
    } catch (e) {
      self.postMessage({ type: "refused", id: msg.id, message: message(e) });
      return;
    }
    engine?.free();
    engine = next;
    self.postMessage({
      type: "loaded", id: msg.id, modelId: engine.modelId, dim: engine.outputDim, memoryBytes: wasmMemoryBytes(),
    });
  } else if (msg.type === "embed") {
    let vectors;
    try {
      vectors = engine.embedBatch(msg.texts);
    } catch (e) {
      // A trap leaves the wasm unusable: the pipeline worker moves the model to its own thread.
      self.postMessage({ type: "broken", message: `embed threw: ${message(e)}` });
      return;
    }
    self.postMessage({ type: "embedded", id: msg.id, vectors, memoryBytes: wasmMemoryBytes() }, [vectors.buffer]);
  }
};
