// An edge handler (Cloudflare-Workers-style `fetch(request, env)`) over the ternflow wasm.
// No Web Worker and no IndexedDB there: the same wasm falls back to an in-memory LRU for its local
// cache, and still uses the server's remote cache and backend when `env.TERNFLOW_SERVER` is set.
// `bindings` is the wasm-pack `--target web` module, `wasmModule` its compiled WebAssembly.Module,
// and the model either `modelBytes` (a TERN v1 file bundled with the Worker: see worker.mjs) or,
// without them, fetched at run time by the wasm from `env.TERNFLOW_MODEL_URL` (default
// `${TERNFLOW_SERVER}/v1/model`), checked (and against `env.TERNFLOW_MODEL_SHA256` when set),
// and kept in the Cache API (see worker-remote-model.mjs).

export function createHandler({ bindings, wasmModule, modelBytes }) {
  return createWorker({ bindings, wasmModule, modelBytes }).fetch;
}

/**
 * `{ fetch, queue }` for `export default`: `fetch` as in `createHandler`; `queue(batch, env)`
 * embeds each message's `{"texts": [...]}` (or a string) through the same pipeline (so the vectors
 * land in the caches), acks what succeeded, retries a message whose failure is retryable (the
 * wasm says which) until `env.TERNFLOW_QUEUE_MAX_ATTEMPTS` (default 3) deliveries, and reports
 * the rest (acked, logged with `console.error` as one JSON line) so a poisoned message does not
 * block the queue. Resolves to the batch's summary.
 */
export function createWorker({ bindings, wasmModule, modelBytes }) {
  let ready = null;
  const setup = (env) =>
    (ready ??= (async () => {
      try {
        bindings.initSync({ module: wasmModule });
      } catch (e) {
        // Not a WebAssembly.Module (a bundler or runtime that imported the .wasm as something
        // else), or one that does not instantiate: say so, not "bad model".
        throw Object.assign(new Error(`the wasm did not start: ${e?.message ?? e}`), { code: "bad_wasm" });
      }
      const server = env?.TERNFLOW_SERVER
        ? { url: env.TERNFLOW_SERVER, token: env.TERNFLOW_TOKEN ?? "" }
        : null;
      const r = await bindings.handle({ type: "init", id: 0, server, config: { workerId: "edge" } });
      if (r.type === "error") throw Object.assign(new Error(r.message), { code: r.code });
      if (modelBytes) {
        const m = await bindings.handle({ type: "loadModelBytes", id: 0, bytes: new Uint8Array(modelBytes) });
        if (m.type === "error") throw Object.assign(new Error(m.message), { code: m.code });
      } else {
        const url = env?.TERNFLOW_MODEL_URL ?? (server ? `${server.url.replace(/\/$/, "")}/v1/model` : null);
        if (!url) throw Object.assign(new Error("no model: set TERNFLOW_MODEL_URL (or TERNFLOW_SERVER)"), { code: "no_model" });
        const m = await bindings.handle({ type: "loadModel", id: 0, url, sha256: env?.TERNFLOW_MODEL_SHA256 ?? null });
        if (m.type === "error") throw Object.assign(new Error(m.message), { code: m.code });
      }
    })().catch((e) => {
      ready = null; // the next request tries again (a model host that was down may be back)
      throw e;
    }));

  // Every reply, errors included, is the wasm's (the contract lives in Rust: core's http_handler).
  const respond = ({ status, body }) => new Response(body, { status, headers: { "content-type": "application/json" } });

  async function queue(batch, env) {
    const summary = { acked: 0, retried: 0, reported: [] };
    try {
      await setup(env);
    } catch (e) {
      // Nothing in this batch can run (no model yet): deliver it again later.
      batch.retryAll();
      summary.retried = batch.messages.length;
      console.error(JSON.stringify({ ternflow: "queue_setup_failed", code: e.code, message: String(e.message ?? e) }));
      return summary;
    }
    const maxAttempts = Number(env?.TERNFLOW_QUEUE_MAX_ATTEMPTS ?? 3);
    for (const m of batch.messages) {
      const texts = typeof m.body === "string" ? [m.body] : m.body?.texts;
      let r;
      if (!Array.isArray(texts) || !texts.every((t) => typeof t === "string")) {
        r = { type: "error", code: "bad_request", message: 'a message is a string or {"texts": [strings]}', retryable: false };
      } else {
        r = await bindings.handle({ type: "embed", id: 2, texts });
      }
      if (r.type !== "error") {
        m.ack();
        summary.acked++;
      } else if (r.retryable && m.attempts < maxAttempts) {
        m.retry();
        summary.retried++;
      } else {
        m.ack();
        const report = { id: m.id, attempts: m.attempts, code: r.code, message: r.message };
        summary.reported.push(report);
        console.error(JSON.stringify({ ternflow: "queue_message_failed", ...report }));
      }
    }
    return summary;
  }

  return { fetch, queue };

  async function fetch(request, env) {
    try {
      await setup(env);
    } catch (e) {
      // A model or wasm that cannot load: the request says why (in the contract's shape, when
      // the wasm itself started).
      const [code, message] = [e.code ?? "bad_model", String(e.message ?? e)];
      if (code === "bad_wasm") return Response.json({ error: { code, message } }, { status: 503 });
      return respond(bindings.httpError(503, code, message));
    }
    // A body whose declared length is over the contract's bound is refused unread (the wasm
    // refuses a longer one too, once read: core's http_handler::MAX_BODY_BYTES, `maxBodyBytes`).
    const max = bindings.maxBodyBytes();
    if (Number(request.headers.get("content-length") ?? 0) > max) {
      return respond(bindings.httpError(413, "too_large", `the body is over ${max} bytes`));
    }
    const body = new Uint8Array(await request.arrayBuffer());
    return respond(await bindings.handleHttp(request.method, body));
  }
}
