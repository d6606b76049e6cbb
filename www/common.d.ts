// Types shared by every entry of the ternflow package.

/**
 * Every `code` a `TernflowError` can carry: the server's, the worker's and the package's own, one
 * closed set (`ErrorCode` in crates/core/src/error_code.rs; a test keeps the two equal).
 */
export type TernflowErrorCode =
  /** A download (model, wasm) answered with this HTTP status, e.g. `http_404`. */
  | `http_${number}`
  // requests the server refuses (400, 413)
  /** The body is not what the route takes (JSON of the wrong shape). */
  | "bad_body"
  /** The body is not JSON. */
  | "bad_json"
  /** `Content-Type` is not `application/json`. */
  | "bad_content_type"
  /** A path parameter is malformed. */
  | "bad_path"
  /** A query parameter is malformed. */
  | "bad_query"
  /** A job or cache id is malformed. */
  | "bad_id"
  /** `delay_ms` is out of range. */
  | "bad_delay"
  /** `priority` is out of range. */
  | "bad_priority"
  /** `max` (a claim's batch) is out of range. */
  | "bad_max"
  /** `k` (a search's result count) is out of range. */
  | "bad_k"
  /** A worker name is malformed. */
  | "bad_worker"
  /** A worker session id is malformed. */
  | "bad_session"
  /** A vector is not base64 little-endian `f32`, or has the wrong length. */
  | "bad_vector"
  /** A fence that is not the live lock's. */
  | "bad_fence"
  /** A result that fails the server's checks (shape, norm, the engine's own vector). */
  | "bad_result"
  /** A model file that is not a TERN v1 model; a result or entry of an unknown model. */
  | "bad_model"
  /** A result or cache entry of another model than the job's or key's. */
  | "model_mismatch"
  /** A cache write without the text its key hashes. */
  | "text_required"
  /** An empty batch. */
  | "empty_batch"
  /** An empty search query. */
  | "empty_query"
  /** A body larger than the server takes. */
  | "too_large"
  /** A text longer than the limit. */
  | "text_too_long"
  /** More items in one batch than the limit. */
  | "batch_too_large"
  /** The body did not arrive in time (408). */
  | "body_timeout"
  // who is calling (401, 403)
  /** No token, or an unknown one. */
  | "unauthorized"
  /** A signed token that is expired, not yet valid, badly signed or malformed. */
  | "bad_token"
  /** The token's role may not use this route. */
  | "forbidden"
  /** The caller's identity is quarantined (a result it sent did not verify). */
  | "quarantined"
  // what is there (404, 405, 409)
  /** No such job, entry, lock or route. */
  | "not_found"
  /** The route does not take this method. */
  | "method_not_allowed"
  /** The lease is no longer this caller's. */
  | "lease_lost"
  /** A claim under a worker session that its page's hand-back ended; the worker needs a new session. */
  | "session_ended"
  /** A lock someone else holds. */
  | "lock_held"
  /** A lock that is no longer the caller's. */
  | "lock_lost"
  /** A cache write older than the stored entry. */
  | "stale_fence"
  /** A result the server holds back until a second worker agrees with it. */
  | "awaiting_agreement"
  // load (429, 503)
  /** Over a rate limit or a cap; retry after the hint. */
  | "too_many_requests"
  /** The tenant is at one of its quotas. */
  | "quota_exceeded"
  /** The server cannot serve this now (no model, shutting down). */
  | "unavailable"
  /** The store failed (Redis down, a full disk). */
  | "store_unavailable"
  // dead-letter reasons the server writes
  /** A lease ran out on its last attempt. */
  | "lease_expired"
  /** A delivery handed back by release past the job's free releases: it counts as an attempt. */
  | "released"
  // the worker
  /** A server (or a model's host) could not be reached. */
  | "unreachable"
  /** No complete answer within the timeout. */
  | "timeout"
  /** The engine failed on a text. */
  | "engine_failed"
  /** The backend fallback is unavailable (breaker open, refused, no server). */
  | "backend_unavailable"
  /** No model is loaded. */
  | "no_model"
  /** The model does not have the SHA-256 asked for. */
  | "model_checksum"
  /** The local cache failed. */
  | "local_cache"
  /** IndexedDB failed. */
  | "indexeddb"
  /** The server answered something the protocol does not allow. */
  | "protocol"
  /** The worker is stopping. */
  | "stopped"
  /** A request the worker does not understand (a page message, a malformed argument). */
  | "bad_request"
  /** A page message that is not one of the worker's. */
  | "bad_message"
  /** An unknown option or `config` key, or a value of the wrong type. */
  | "bad_config"
  /** A JavaScript exception the worker caught. */
  | "js"
  // the npm package's glue
  /** The wasm could not be compiled or instantiated. */
  | "bad_wasm"
  /** The worker script could not be loaded, or crashed. */
  | "worker_failed"
  /** `terminate()` was called while the request was pending. */
  | "terminated"
  /** The caller's `AbortSignal` fired. */
  | "aborted"
  /** This entry cannot run here (`EmbeddingWorker` in Node). */
  | "unsupported_runtime";

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
