// The npm README's edge recipe, unchanged.
import ternflow from "ternflow/edge";
export default {
  fetch: (request, env) => ternflow.fetch(request, env),
  async queue(batch, env) { await ternflow.queue(batch, env); },
};
