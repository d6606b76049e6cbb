// A user's Worker: the package's edge module under the `workerd` condition, as wrangler
// resolves it.
import ternflow from "ternflow";

export default {
  fetch: (request, env) => ternflow.fetch(request, env),
  queue: (batch, env) => ternflow.queue(batch, env),
};
