// Types of `ternflow/edge/handler`: build a Workers-style `fetch` handler over the wasm.

/** Bindings a deployment sets (wrangler `vars` / secrets). */
export interface EdgeEnv {
  /** Base URL of a `ternflow serve` (remote cache and backend); without it, local only. */
  TERNFLOW_SERVER?: string;
  /** Its bearer token. */
  TERNFLOW_TOKEN?: string;
}

export interface HandlerParts {
  /** The wasm-pack `--target web` module (`import * as bindings from "ternflow/wasm"`). */
  bindings: unknown;
  /** The compiled wasm (`import wasmModule from "ternflow/ternflow_bg.wasm"` under wrangler). */
  wasmModule: WebAssembly.Module;
  /** A TERN v1 model file. */
  modelBytes: ArrayBuffer | Uint8Array;
}

/**
 * A `fetch(request, env)` answering `POST {"texts": [...]}` with
 * `{"vectors": number[][], "sources": string[]}`; errors are `{"error": {"code", "message"}}`.
 */
export function createHandler(parts: HandlerParts): (request: Request, env?: EdgeEnv) => Promise<Response>;
