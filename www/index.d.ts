// Type declarations for the ternflow npm package's main-thread API (client.js): browsers and
// Web Workers (exports conditions `browser`, `worker`, `default`).

import type { SimilarHit, TernflowError } from "./common.js";
export { TernflowError, cosineSim } from "./common.js";
export type { SimilarHit, TernflowErrorCode } from "./common.js";

export type Source = "local" | "remote" | "engine" | "backend";

export interface ServerOptions {
  url: string;
  /**
   * A bearer token, or a function that mints a fresh one (your backend's short-lived signed
   * token for this visitor): the worker calls it at start, again before the token expires and
   * on a 401, without dropping leases or in-flight jobs.
   */
  token?: string | (() => string | Promise<string>);
}

export interface ModelOptions {
  /** URL of a TERN v1 file (default: the model shipped beside client.js). Cached with the Cache API. */
  url?: string;
  /** Expected SHA-256 (hex) of the file. */
  sha256?: string;
  /** The file's bytes, instead of a URL. */
  bytes?: ArrayBuffer | Uint8Array;
  /** Download progress (bytes; `total` when the server sends `Content-Length`). */
  onProgress?: (p: Progress) => void;
  /** Cancels the download (`TernflowError` code `aborted`). */
  signal?: AbortSignal;
}

/** A progress report: the model download (bytes) or an `embedMany` (texts). */
export interface Progress {
  phase: "model" | "embed";
  loaded: number;
  total?: number;
}

/** Backoff settings (`lockWait`, `retry`). */
export interface BackoffConfig {
  baseMs?: number;
  maxMs?: number;
  maxAttempts?: number;
}

/**
 * Pipeline settings; every field is optional (see `Config` in ternflow-core for defaults).
 * Unknown keys are refused (`TernflowError` code `bad_config`), so a typo does not pass silently.
 */
export interface WorkerConfig {
  /** Default: a random `w-xxxxxxxx`, so every worker reports its own metrics. */
  workerId?: string;
  /** Jobs in flight at once (default 128; leases held stay at most twice this). */
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
  lockWait?: BackoffConfig;
  retry?: BackoffConfig;
  seed?: number;
  /**
   * How long a finished job's ack waits for others to share its request, ms (default 60: longer
   * than one engine message of 32 texts, so two messages' results share a request; never waits
   * once every job in flight has finished).
   */
  ackLingerMs?: number;
  /** Most acks in one `POST /v1/jobs/ack` (default 128). */
  ackBatchMax?: number;
  /**
   * Whether queue jobs write their vectors into this browser's IndexedDB (default false: the
   * server's cache already answers a repeated text at claim, and a visitor's storage and CPU are
   * not spent on other people's texts). The page's own `embed()`/`embedMany()` always write;
   * queue jobs always read. True suits one long-lived worker that sees texts again after the
   * server's cache forgot them (`remoteTtlMs`).
   */
  queueLocalWrites?: boolean;
  /** Limit of one request to the server, ms (a claim adds its long-poll wait; default 30 000). */
  requestTimeoutMs?: number;
  /** Limit of a whole model download, ms (default 120 000). */
  modelTimeoutMs?: number;
  /** Byte bound of the in-memory vector cache (default 32 MiB; at most 8 MiB of it in front of IndexedDB). */
  memoryCacheBytes?: number;
  /**
   * Run the model in an engine worker of its own, nested in the ternflow worker (default true),
   * so embeds never hold the thread its network and IndexedDB work runs on. Where no nested
   * worker can start (engine-worker.js not served, no nested workers), the model runs on the
   * ternflow worker's thread; `stats().gauges.engine_in_worker` says which (1 or 0).
   */
  engineWorker?: boolean;
}

export interface EmbeddingWorkerOptions {
  server?: ServerOptions | string;
  token?: string;
  model?: ModelOptions | false;
  config?: WorkerConfig;
  dbName?: string;
  maxLocalEntries?: number;
  /** Where worker.js is (default: beside client.js, in the form bundlers recognise). */
  workerUrl?: string | URL;
  /** Progress of the model download behind `ready`. */
  onProgress?: (p: Progress) => void;
  /** Cancels `ready` (init and model download). */
  signal?: AbortSignal;
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

export interface EmbedManyOptions {
  signal?: AbortSignal;
  /** Called after each text (`phase: "embed"`, `loaded` of `total` texts). */
  onProgress?: (p: Progress) => void;
  /** One result per text instead of failing whole (see `EmbedResult`). */
  settle?: boolean;
  /**
   * Word pieces to embed of each text at most (an integer ≥ 1). Default: each text whole (a
   * forward per 126 word pieces, pooled). A cut vector is cached in this worker only, never in
   * the shared cache.
   */
  maxTokens?: number;
  /**
   * A W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`): the page's own trace, continued by
   * each text's requests (remote cache, lock, backend; each text a child span). Default: each
   * text starts a trace of its own. A malformed one is refused (`bad_message`).
   */
  traceparent?: string;
}

/** What a vector covers of its text. */
export interface TextInfo {
  /** Word pieces embedded. */
  tokens: number;
  /** Forward passes pooled into the vector (1 for up to 126 word pieces). */
  chunks: number;
  /** Whether word pieces past `maxTokens` were dropped. */
  truncated: boolean;
}

/** One text's vector, where it came from, and (when the engine runs the model) what it covers. */
export type Detailed = { vector: Float32Array; source: Source; info?: TextInfo };

/** One text's outcome of `embedMany(texts, { settle: true })`, like `Promise.allSettled`. */
export type EmbedResult =
  | { status: "fulfilled"; value: Float32Array }
  | { status: "rejected"; reason: TernflowError };

/** One text's outcome of `embedDetailed(texts, { settle: true })`. */
export type DetailedResult = Detailed | { error: TernflowError };

/**
 * An embedding worker running the ternflow wasm in a dedicated Web Worker. Every failure is a
 * `TernflowError` (see `TernflowErrorCode`).
 */
export class EmbeddingWorker extends EventTarget {
  constructor(options?: EmbeddingWorkerOptions);
  /**
   * Resolves once the worker is initialised and the model (if any) is loaded; rejects with a
   * `TernflowError` naming the URL and the cause (`http_404`, `bad_model`, `bad_wasm`, ...).
   */
  readonly ready: Promise<string | null>;
  loadModel(model?: ModelOptions): Promise<string>;
  embed(text: string, options?: { signal?: AbortSignal; traceparent?: string }): Promise<Float32Array>;
  embedMany(texts: string[], options: EmbedManyOptions & { settle: true }): Promise<EmbedResult[]>;
  embedMany(texts: string[], options?: EmbedManyOptions & { settle?: false }): Promise<Float32Array[]>;
  embedDetailed(texts: string[], options: EmbedManyOptions & { settle: true }): Promise<DetailedResult[]>;
  embedDetailed(texts: string[], options?: EmbedManyOptions & { settle?: false }): Promise<Detailed[]>;
  similar(query: string, corpus: string[], options?: { topK?: number; signal?: AbortSignal }): Promise<SimilarHit[]>;
  start(options?: {
    server?: ServerOptions | string;
    token?: string;
    concurrency?: number;
    /**
     * The share of wall time the engine may compute, of one core: `0.25` is a quarter (measured
     * busy time; the worker sleeps between batches). Default `1`: no budget. In (0, 1].
     */
    budget?: number;
    /** No claims while the tab is hidden (jobs in hand finish). Default `true`. */
    pauseWhenHidden?: boolean;
    /** No claims while the visitor's connection asks to save data. Default `true`. */
    pauseOnSaveData?: boolean;
    /**
     * No claims while the battery is discharging below this level (0–1), where the browser
     * says (`navigator.getBattery`). Default `0.2`; `0` never pauses for the battery.
     */
    pauseOnBatteryBelow?: number;
    /** Stops queue mode when it fires. */
    signal?: AbortSignal;
  }): Promise<void>;
  /** Pauses queue mode: no new claims (jobs in hand finish) until `resume()`. */
  pause(): void;
  /** Ends a `pause()` (the worker claims again unless another reason holds it: a hidden tab...). */
  resume(): void;
  /** Why queue mode is paused now: `hidden`, `save-data`, `battery`, `paused` (by `pause()`). */
  readonly pausedFor: string[];
  stop(options?: { deadline?: number }): Promise<StopSummary>;
  stats(): Promise<MetricsSnapshot>;
  /** Ends the worker at once; pending calls reject with code `terminated`. */
  terminate(): void;
}

/** Ternlight-compatible: embeds `text` with a shared default worker. */
export function embed(
  text: string,
  options?: { worker?: EmbeddingWorker; signal?: AbortSignal; traceparent?: string },
): Promise<Float32Array>;
/** Ternlight-compatible: ranks `corpus` by similarity to `query`, best first. */
export function similar(
  query: string,
  corpus: string[],
  options?: { topK?: number; worker?: EmbeddingWorker; signal?: AbortSignal },
): Promise<SimilarHit[]>;
