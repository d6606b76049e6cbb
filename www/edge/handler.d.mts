// Types of `ternflow/edge/handler`: build a Workers-style `fetch` handler over the wasm.

/** Bindings a deployment sets (wrangler `vars` / secrets). */
export interface EdgeEnv {
  /** Base URL of a `ternflow serve` (remote cache and backend); without it, local only. */
  TERNFLOW_SERVER?: string;
  /** Its bearer token. */
  TERNFLOW_TOKEN?: string;
  /** Where the model is, for builds without a bundled model (default: the server's /v1/model). */
  TERNFLOW_MODEL_URL?: string;
  /** Its expected SHA-256 (hex). */
  TERNFLOW_MODEL_SHA256?: string;
}

export interface HandlerParts {
  /** The wasm-pack `--target web` module (`import * as bindings from "ternflow/wasm"`). */
  bindings: unknown;
  /** The compiled wasm (`import wasmModule from "ternflow/ternflow_bg.wasm"` under wrangler). */
  wasmModule: WebAssembly.Module;
  /** A TERN v1 model file; without it, fetched at run time (see `EdgeEnv`). */
  modelBytes?: ArrayBuffer | Uint8Array;
}

/**
 * A `fetch(request, env)` answering `POST {"texts": [...]}` with
 * `{"vectors": number[][], "sources": string[]}`; errors are `{"error": {"code", "message"}}`.
 */
export function createHandler(
  parts: HandlerParts,
): <E extends object = EdgeEnv>(request: Request, env?: E & EdgeEnv) => Promise<Response>;

/** One Queues message (the subset `queue` uses). */
export interface QueueMessage {
  readonly id: string;
  readonly body: unknown;
  readonly attempts: number;
  ack(): void;
  retry(options?: { delaySeconds?: number }): void;
}

/** A Queues batch (the subset `queue` uses). */
export interface QueueBatch {
  readonly messages: readonly QueueMessage[];
  retryAll(options?: { delaySeconds?: number }): void;
}

/** What `queue` did with a batch. */
export interface QueueSummary {
  acked: number;
  retried: number;
  /** Messages given up on (acked so they do not block the queue), with the error. */
  reported: { id: string; attempts: number; code: string; message: string }[];
}

/**
 * `env` is the deployment's own `Env` (whatever bindings it declares), checked only where it
 * names ternflow's: generic, because an interface of other bindings alone has "no properties in
 * common" with `EdgeEnv` (TS2559) under strict TypeScript.
 */
export interface EdgeWorker {
  fetch<E extends object = EdgeEnv>(request: Request, env?: E & EdgeEnv): Promise<Response>;
  queue<E extends object = EdgeEnv>(
    batch: QueueBatch,
    env?: E & EdgeEnv & { TERNFLOW_QUEUE_MAX_ATTEMPTS?: string },
  ): Promise<QueueSummary>;
}

/** `{ fetch, queue }`, for `export default`. */
export function createWorker(parts: HandlerParts): EdgeWorker;
