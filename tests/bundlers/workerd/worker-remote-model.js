// A user's Worker for the Workers Free plan: the model is fetched at run time.
import ternflow from "ternflow/edge/remote-model";

export default {
  fetch: (request, env) => ternflow.fetch(request, env),
  queue: (batch, env) => ternflow.queue(batch, env),
};
