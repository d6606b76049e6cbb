// What `wrangler types` writes for the template (its Env; here with a binding of another kind,
// so that ternflow's types must accept an Env they share nothing with), against the runtime
// types of @cloudflare/workers-types.
/// <reference types="@cloudflare/workers-types" />
interface Env {
  MY_QUEUE: Queue;
}
