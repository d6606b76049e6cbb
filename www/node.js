// The package's Node entry (`exports` condition `node`): a synchronous engine, no Web Worker.
// Node has no Web Workers, IndexedDB or Cache API; here the wasm and the model are read from the
// package's own files (or the caller's bytes), and `embed` returns at once.

import { readFileSync } from "node:fs";
import { initSync, TernflowEngine } from "./ternflow.js";
import { TernflowError, cosineSim, rank } from "./common.js";

export { TernflowError, cosineSim };

let initialised = false;
function initWasm() {
  if (!initialised) {
    initSync({ module: readFileSync(new URL("./ternflow_bg.wasm", import.meta.url)) });
    initialised = true;
  }
}

/** A loaded Ternlight model, used synchronously. */
export class Engine {
  #inner;

  /** @param {{ model?: string | URL | ArrayBuffer | Uint8Array }} [options] a path, file URL or bytes */
  constructor({ model } = {}) {
    initWasm();
    let bytes;
    let where = "bytes";
    if (model === undefined || typeof model === "string" || model instanceof URL) {
      const path = model ?? new URL("./ternlight-int4.bin", import.meta.url);
      where = String(path);
      try {
        bytes = readFileSync(path);
      } catch (e) {
        throw new TernflowError(e.code === "ENOENT" ? "not_found" : "unreachable", `${where}: ${e.message}`, { url: where, cause: e });
      }
    } else {
      bytes = model instanceof Uint8Array ? model : new Uint8Array(model);
    }
    try {
      this.#inner = new TernflowEngine(bytes);
    } catch (e) {
      throw new TernflowError("bad_model", `model ${where}: ${e.message ?? e}`, { url: where, cause: e });
    }
  }

  /** First 16 hex digits of the model file's SHA-256. */
  get modelId() {
    return this.#inner.modelId;
  }

  /** Length of every vector. */
  get dim() {
    return this.#inner.outputDim;
  }

  /** The L2-normalised embedding of `text`. */
  embed(text) {
    if (typeof text !== "string") throw new TernflowError("bad_request", "text must be a string");
    return this.#inner.embed(text);
  }

  /** One embedding per text, in order: one call into the wasm engine for all of them. */
  embedMany(texts) {
    if (!Array.isArray(texts) || texts.some((t) => typeof t !== "string")) {
      throw new TernflowError("bad_request", "texts must be an array of strings");
    }
    const dim = this.#inner.outputDim;
    const flat = this.#inner.embedBatch(texts);
    return texts.map((_, i) => flat.subarray(i * dim, (i + 1) * dim));
  }

  /** `corpus` ranked by similarity to `query`: `[{ text, index, sim, score }]`, best first. */
  similar(query, corpus, { topK = 5 } = {}) {
    return rank(this.embed(query), this.embedMany(corpus), corpus, topK);
  }

  /** Frees the engine's wasm memory now (otherwise when it is garbage-collected). */
  free() {
    this.#inner.free();
  }
}

/** Loads the model (default: the one shipped in the package) synchronously. */
export function loadEngine(options) {
  return new Engine(options);
}

let shared = null;
/** Ternlight-compatible: embeds `text` with a shared engine over the shipped model. */
export function embed(text) {
  shared ??= new Engine();
  return shared.embed(text);
}

/** Ternlight-compatible: ranks `corpus` by similarity to `query` with the shared engine. */
export function similar(query, corpus, { topK = 5 } = {}) {
  shared ??= new Engine();
  return shared.similar(query, corpus, { topK });
}

/** Web Workers do not exist in Node: use `loadEngine()` (synchronous) instead. */
export class EmbeddingWorker {
  constructor() {
    throw new TernflowError(
      "unsupported_runtime",
      "EmbeddingWorker needs Web Workers, which Node does not have: use loadEngine() from \"ternflow\" (synchronous) instead",
    );
  }
}
