// Types of the package's Deno and Bun entry (exports conditions `deno` and `bun`): the Node API,
// and the edge handler as the default export.

import type { QueueBatch, QueueSummary } from "./edge/handler.mjs";
export * from "./node.js";

declare const handler: {
  /** `POST {"texts": [...]}` → `{"vectors", "sources"}`; settings from the environment. */
  fetch(request: Request): Promise<Response>;
  /** Embeds a batch of queue messages (strings or `{"texts": [...]}`), as under workerd. */
  queue(batch: QueueBatch, env?: Record<string, string>): Promise<QueueSummary>;
};
export default handler;
