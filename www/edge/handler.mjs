// An edge handler (Cloudflare-Workers-style `fetch(request, env)`) over the ternflow wasm.
// No Web Worker and no IndexedDB there: the same wasm falls back to an in-memory LRU for its local
// cache, and still uses the server's remote cache and backend when `env.TERNFLOW_SERVER` is set.
// `bindings` is the wasm-pack `--target web` module, `wasmModule` its compiled WebAssembly.Module,
// `modelBytes` a TERN v1 file (bundlers hand both over as imports: see worker.mjs).

export function createHandler({ bindings, wasmModule, modelBytes }) {
  let ready = null;
  const setup = (env) =>
    (ready ??= (async () => {
      bindings.initSync({ module: wasmModule });
      bindings.loadModelBytes(new Uint8Array(modelBytes));
      const server = env?.TERNFLOW_SERVER
        ? { url: env.TERNFLOW_SERVER, token: env.TERNFLOW_TOKEN ?? "" }
        : null;
      const r = await bindings.handle({ type: "init", id: 0, server, config: { workerId: "edge" } });
      if (r.type === "error") throw Object.assign(new Error(r.message), { code: r.code });
    })());

  const error = (status, code, message) => Response.json({ error: { code, message } }, { status });

  return async function fetch(request, env) {
    try {
      await setup(env);
    } catch (e) {
      // A model or wasm that cannot load: every request says so (the isolate is unusable).
      return error(503, e.code ?? "bad_model", String(e.message ?? e));
    }
    if (request.method !== "POST") return error(405, "method_not_allowed", 'POST {"texts": [...]}');
    let body;
    try {
      body = await request.json();
    } catch {
      return error(400, "bad_json", "the body is not JSON");
    }
    if (!Array.isArray(body?.texts) || !body.texts.every((t) => typeof t === "string")) {
      return error(400, "bad_request", '"texts" must be an array of strings');
    }
    const r = await bindings.handle({ type: "embed", id: 1, texts: body.texts });
    if (r.type === "error") return error(r.code === "text_too_long" ? 413 : 400, r.code, r.message);
    return Response.json({
      vectors: r.embeddings.map((e) => Array.from(e.vector)),
      sources: r.embeddings.map((e) => e.source),
    });
  };
}
