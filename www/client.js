// The main-thread client: starts the Web Worker and turns its typed messages into promises.
// Thin by design: every decision (caches, locks, retries, fallback) is made in Rust in the worker.

const DEFAULT_MODEL = "ternlight-int4.bin";

/**
 * An embedding worker running the ternflow wasm in a dedicated Web Worker.
 * Emits `metrics` events (`event.detail` is a metrics snapshot) while the queue loop runs.
 */
export class EmbeddingWorker extends EventTarget {
  #worker;
  #next = 1;
  #pending = new Map();
  #options;

  /**
   * @param {object} [options]
   * @param {{url: string, token?: string} | string} [options.server] ternflow server (optional)
   * @param {string} [options.token] bearer token when `server` is a URL string
   * @param {{url?: string, sha256?: string, bytes?: ArrayBuffer} | false} [options.model]
   *   the model: a URL (default: the model shipped beside this file), bytes, or `false` for none
   * @param {object} [options.config] pipeline settings (see `Config` in ternflow-core)
   * @param {string} [options.dbName] IndexedDB database name (default `ternflow`)
   * @param {number} [options.maxLocalEntries] IndexedDB size bound
   * @param {string | URL} [options.workerUrl] where worker.js is (default: beside this file)
   */
  constructor(options = {}) {
    super();
    this.#options = options;
    this.#worker = new Worker(options.workerUrl ?? new URL("./worker.js", import.meta.url), {
      type: "module",
    });
    this.#worker.onmessage = (event) => this.#receive(event.data);
    this.#worker.onerror = (event) => {
      for (const p of this.#pending.values()) p.reject(new Error(event.message ?? "worker error"));
      this.#pending.clear();
    };
    this.ready = this.#init(normaliseServer(options.server, options.token)).then(() =>
      options.model === false ? null : this.loadModel(options.model ?? {}),
    );
  }

  #receive(msg) {
    if (msg.type === "metrics") {
      this.dispatchEvent(new CustomEvent("metrics", { detail: msg.metrics }));
      return;
    }
    const p = this.#pending.get(msg.id);
    if (!p) return;
    this.#pending.delete(msg.id);
    if (msg.type === "error") {
      const err = new Error(msg.message);
      err.code = msg.code;
      p.reject(err);
    } else {
      p.resolve(msg);
    }
  }

  #request(msg, transfer = []) {
    const id = this.#next++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#worker.postMessage({ ...msg, id }, transfer);
    });
  }

  #init(server) {
    const o = this.#options;
    return this.#request({
      type: "init",
      server,
      config: o.config ?? null,
      dbName: o.dbName ?? null,
      maxLocalEntries: o.maxLocalEntries ?? null,
    });
  }

  /** Loads a model from `{url, sha256}` (Cache API cached) or `{bytes}`; resolves to its id. */
  async loadModel({ url, sha256, bytes } = {}) {
    if (bytes) {
      const copy = bytes instanceof ArrayBuffer ? bytes.slice(0) : new Uint8Array(bytes).buffer;
      return (await this.#request({ type: "loadModelBytes", bytes: copy }, [copy])).modelId;
    }
    const href = new URL(url ?? DEFAULT_MODEL, import.meta.url).href;
    return (await this.#request({ type: "loadModel", url: href, sha256: sha256 ?? null })).modelId;
  }

  /** Embeds one text (through the local and remote caches); resolves to a Float32Array. */
  async embed(text) {
    return (await this.embedMany([text]))[0];
  }

  /** Embeds several texts; resolves to Float32Arrays in order. */
  async embedMany(texts) {
    return (await this.embedDetailed(texts)).map((e) => e.vector);
  }

  /** Like embedMany, with where each vector came from (`local`, `remote`, `engine`, `backend`). */
  async embedDetailed(texts) {
    await this.ready;
    const r = await this.#request({ type: "embed", texts });
    return r.embeddings.map((e) => ({
      vector: e.vector instanceof Float32Array ? e.vector : Float32Array.from(e.vector),
      source: e.source,
    }));
  }

  /** Starts queue mode: pull jobs from the server with at most `concurrency` in flight. */
  async start({ server, token, concurrency } = {}) {
    await this.ready;
    if (server) await this.#init(normaliseServer(server, token));
    await this.#request({ type: "start", concurrency: concurrency ?? null });
  }

  /** Stops queue mode, finishing in-flight jobs for up to `deadline` ms; resolves to a summary. */
  async stop({ deadline } = {}) {
    return (await this.#request({ type: "stop", deadlineMs: deadline ?? null })).summary;
  }

  /** A metrics snapshot: counters and gauges (hit ratios, processing rate, latency quantiles). */
  async stats() {
    return (await this.#request({ type: "stats" })).metrics;
  }

  /** Ends the worker at once (no drain: prefer `stop` first in queue mode). */
  terminate() {
    this.#worker.terminate();
  }
}

function normaliseServer(server, token) {
  if (!server) return null;
  if (typeof server === "string") return { url: server, token: token ?? "" };
  return { url: server.url, token: server.token ?? token ?? "" };
}

/** Cosine similarity of two vectors (1 for identical directions). */
export function cosineSim(a, b) {
  if (a.length !== b.length) throw new Error(`length mismatch: ${a.length} vs ${b.length}`);
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return na && nb ? dot / Math.sqrt(na * nb) : 0;
}

let shared = null;
function defaultWorker() {
  shared ??= new EmbeddingWorker();
  return shared;
}

/** Ternlight-compatible: embeds `text` with a shared default worker. */
export function embed(text, { worker } = {}) {
  return (worker ?? defaultWorker()).embed(text);
}

/**
 * Ternlight-compatible: ranks `corpus` (strings) by similarity to `query`.
 * Resolves to `[{ text, index, score }]`, best first, at most `topK`.
 */
export async function similar(query, corpus, { topK = 5, worker } = {}) {
  const w = worker ?? defaultWorker();
  const [q, ...docs] = await w.embedMany([query, ...corpus]);
  return docs
    .map((v, index) => ({ text: corpus[index], index, score: cosineSim(q, v) }))
    .sort((a, b) => b.score - a.score)
    .slice(0, topK);
}
