// Type declarations for the ternflow npm package's main-thread API (client.js).

export type Source = "local" | "remote" | "engine" | "backend";

export interface ServerOptions {
  url: string;
  token?: string;
}

export interface ModelOptions {
  /** URL of a TERN v1 file (default: the model shipped beside client.js). Cached with the Cache API. */
  url?: string;
  /** Expected SHA-256 (hex) of the file. */
  sha256?: string;
  /** The file's bytes, instead of a URL. */
  bytes?: ArrayBuffer | Uint8Array;
}

/** Pipeline settings; every field is optional (see `Config` in ternflow-core for defaults). */
export interface WorkerConfig {
  workerId?: string;
  concurrency?: number;
  maxTextBytes?: number;
  localTtlMs?: number;
  remoteTtlMs?: number;
  ttlJitter?: number;
  lockTtlMs?: number;
  claimWaitMs?: number;
  watchdogMs?: number;
  engineBreakerFailures?: number;
  backendBreakerFailures?: number;
  breakerOpenMs?: number;
  backendRatePerS?: number;
  backendBurst?: number;
  [key: string]: unknown;
}

export interface EmbeddingWorkerOptions {
  server?: ServerOptions | string;
  token?: string;
  model?: ModelOptions | false;
  config?: WorkerConfig;
  dbName?: string;
  maxLocalEntries?: number;
  workerUrl?: string | URL;
}

export interface MetricsSnapshot {
  worker: string;
  counters: Record<string, number>;
  gauges: Record<string, number>;
}

export interface StopSummary {
  claimed: number;
  done: number;
  retried: number;
  dead: number;
  lost: number;
  handedBack: number;
}

export class EmbeddingWorker extends EventTarget {
  constructor(options?: EmbeddingWorkerOptions);
  /** Resolves once the worker is initialised and the model (if any) is loaded. */
  readonly ready: Promise<string | null>;
  loadModel(model?: ModelOptions): Promise<string>;
  embed(text: string): Promise<Float32Array>;
  embedMany(texts: string[]): Promise<Float32Array[]>;
  embedDetailed(texts: string[]): Promise<{ vector: Float32Array; source: Source }[]>;
  start(options?: { server?: ServerOptions | string; token?: string; concurrency?: number }): Promise<void>;
  stop(options?: { deadline?: number }): Promise<StopSummary>;
  stats(): Promise<MetricsSnapshot>;
  terminate(): void;
}

export function cosineSim(a: ArrayLike<number>, b: ArrayLike<number>): number;
export function embed(text: string, options?: { worker?: EmbeddingWorker }): Promise<Float32Array>;
export function similar(
  query: string,
  corpus: string[],
  options?: { topK?: number; worker?: EmbeddingWorker },
): Promise<{ text: string; index: number; score: number }[]>;
