// Type declarations for the ternflow package's Node entry (exports condition `node`, and
// `ternflow/node`): a synchronous engine.

import type { SimilarHit } from "./common.js";
export { TernflowError, cosineSim } from "./common.js";
export type { SimilarHit, TernflowErrorCode } from "./common.js";

export interface EngineOptions {
  /** A file path, a `file:` URL, or the model's bytes (default: the model in the package). */
  model?: string | URL | ArrayBuffer | Uint8Array;
}

/** A loaded Ternlight model, used synchronously. Throws `TernflowError` (`bad_model`, `not_found`). */
export class Engine {
  constructor(options?: EngineOptions);
  /** First 16 hex digits of the model file's SHA-256. */
  readonly modelId: string;
  /** Length of every vector. */
  readonly dim: number;
  embed(text: string): Float32Array;
  embedMany(texts: string[]): Float32Array[];
  similar(query: string, corpus: string[], options?: { topK?: number }): SimilarHit[];
  /** Frees the engine's wasm memory now. */
  free(): void;
}

/** Loads the model synchronously (default: the one in the package). */
export function loadEngine(options?: EngineOptions): Engine;
/** Ternlight-compatible: embeds with a shared engine over the shipped model. */
export function embed(text: string): Float32Array;
/** Ternlight-compatible: ranks `corpus` by similarity to `query`, best first. */
export function similar(query: string, corpus: string[], options?: { topK?: number }): SimilarHit[];

/** Not available in Node: its constructor throws `TernflowError` code `unsupported_runtime`. */
export class EmbeddingWorker {
  constructor(options?: unknown);
}
