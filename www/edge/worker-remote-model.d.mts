// Types of `ternflow/edge/remote-model`: a Workers module with the wasm bundled and the model
// fetched at run time (TERNFLOW_MODEL_URL, or TERNFLOW_SERVER's /v1/model).

import type { EdgeWorker } from "./handler.mjs";
export type { EdgeEnv, EdgeWorker, QueueBatch, QueueMessage, QueueSummary } from "./handler.mjs";

declare const worker: EdgeWorker;
export default worker;
