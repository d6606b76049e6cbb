// Types shared by every entry of the ternflow package.

/** Every `code` a `TernflowError` can carry. */
export type TernflowErrorCode =
  /** A download (model, wasm) answered with this HTTP status, e.g. `http_404`. */
  | `http_${number}`
  /** The model file is not a TERN v1 model (HTML from a dev server, truncated, another format). */
  | "bad_model"
  /** The model does not have the SHA-256 asked for. */
  | "model_checksum"
  /** The wasm was fetched but could not be compiled or instantiated. */
  | "bad_wasm"
  /** The worker script could not be loaded, or crashed. */
  | "worker_failed"
  /** `terminate()` was called while the request was pending. */
  | "terminated"
  /** The `AbortSignal` fired. */
  | "aborted"
  /** No complete answer within the timeout (`requestTimeoutMs`, `modelTimeoutMs`). */
  | "timeout"
  /** A server (or the model's host) could not be reached. */
  | "unreachable"
  /** A text is longer than `maxTextBytes`. */
  | "text_too_long"
  /** An unknown option or `config` key, or a value of the wrong type. */
  | "bad_config"
  | "bad_message"
  | "bad_request"
  | "not_found"
  /** This entry cannot run here (e.g. `EmbeddingWorker` in Node). */
  | "unsupported_runtime"
  | "no_model"
  | "engine_failed"
  | "backend_unavailable"
  | "indexeddb"
  | "local_cache"
  | "lease_lost"
  | "protocol"
  | "stopped"
  | "unauthorized"
  | "forbidden"
  | "too_many_requests"
  | "unavailable"
  | "js";

/** The one error type of the package. */
export class TernflowError extends Error {
  constructor(
    code: TernflowErrorCode,
    message: string,
    options?: { url?: string; cause?: unknown; retryable?: boolean },
  );
  readonly name: "TernflowError";
  readonly code: TernflowErrorCode;
  /** The file or server the failure is about, when there is one. */
  readonly url?: string;
  /** Whether trying again later may succeed (set on errors from the worker). */
  readonly retryable?: boolean;
}

/** One ranked text of `similar`. */
export interface SimilarHit {
  text: string;
  /** Its index in the corpus. */
  index: number;
  /** Cosine similarity to the query. */
  sim: number;
  /** Alias of `sim`. */
  score: number;
}

/** Cosine similarity of two vectors (1 for identical directions). */
export function cosineSim(a: ArrayLike<number>, b: ArrayLike<number>): number;
