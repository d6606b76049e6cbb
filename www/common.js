// Pieces every entry shares (browser client, Node engine, edge handler): the one error type and
// the Ternlight-compatible similarity helpers. No side effects.

/**
 * Every failure the package reports. `code` is machine-readable (see `TernflowErrorCode` in
 * common.d.ts); `url` names the file or server the failure is about, when there is one;
 * `retryable` (from the worker) says whether trying again later may succeed.
 */
export class TernflowError extends Error {
  constructor(code, message, { url, cause, retryable } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "TernflowError";
    this.code = code;
    if (url !== undefined) this.url = url;
    if (retryable !== undefined) this.retryable = retryable;
  }
}

/** Cosine similarity of two vectors (1 for identical directions). */
export function cosineSim(a, b) {
  if (a.length !== b.length) {
    throw new TernflowError("bad_request", `length mismatch: ${a.length} vs ${b.length}`);
  }
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return na && nb ? dot / Math.sqrt(na * nb) : 0;
}

/** `corpus[i]` with its vector `docs[i]` ranked by similarity to `q`: `{ text, index, sim, score }`. */
export function rank(q, docs, corpus, topK) {
  return docs
    .map((v, index) => {
      const sim = cosineSim(q, v);
      return { text: corpus[index], index, sim, score: sim };
    })
    .sort((a, b) => b.sim - a.sim)
    .slice(0, topK);
}
