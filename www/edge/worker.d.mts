// Types of `ternflow/edge` (and of `ternflow` under the `workerd` condition): a Workers module
// with the wasm and the model bundled.

import type { EdgeWorker } from "./handler.mjs";
export type { EdgeEnv, EdgeWorker, QueueBatch, QueueMessage, QueueSummary } from "./handler.mjs";

declare const worker: EdgeWorker;
export default worker;
