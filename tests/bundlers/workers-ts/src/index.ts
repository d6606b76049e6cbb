/**
 * The `npm create cloudflare` TypeScript template's src/index.ts (create-cloudflare 2.74.0,
 * hello-world/ts), its handler replaced by the npm README's two edge lines, unchanged.
 */
import ternflow from "ternflow/edge";

export default {
  fetch: (request, env) => ternflow.fetch(request, env),
  async queue(batch, env) { await ternflow.queue(batch, env); },
} satisfies ExportedHandler<Env>;
