// Types of `ternflow/edge` (and of `ternflow` under the `workerd` condition): a Workers module
// with the wasm and the model bundled.

import type { EdgeEnv } from "./handler.mjs";
export type { EdgeEnv } from "./handler.mjs";

declare const worker: {
  fetch(request: Request, env?: EdgeEnv): Promise<Response>;
};
export default worker;
