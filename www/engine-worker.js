// The engine's own worker, started by worker.js (the pipeline's worker) so that embeds never hold
// the thread its network and IndexedDB work runs on. The first message carries the compiled wasm;
// every later one goes to the wasm's engineHandle (the messages are ToEngine / FromEngine in
// crates/core/src/messages.rs; this side is src/engine_entry.rs).
// `engine-glue.js` is a copy of `ternflow.js` (scripts/build-pkg.sh): the two workers share no
// module, so no bundler puts one in a chunk both load (Parcel 2.16 loses such a chunk's modules
// when it scope-hoists: "Cannot find module" at run time).
import init, { engineHandle } from "./engine-glue.js";

let ready = null;

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
  let reply;
  try {
    reply = engineHandle(msg);
  } catch (e) {
    // A trap leaves the wasm unusable: the pipeline worker moves the model to its own thread.
    self.postMessage({ type: "broken", message: `the engine threw: ${message(e)}` });
    return;
  }
  self.postMessage(reply, reply.vectors ? [reply.vectors.buffer] : []);
};
