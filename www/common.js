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

/**
 * The address of the package's file `name`, when the module at `moduleUrl` (its
 * `import.meta.url`) still is the package's file `own`: the package runs as published (no
 * bundler, an import map, a CDN). Null under a bundler, which renamed and moved the files (only
 * its literal `new URL("./x.js", import.meta.url)` knows where they went), and where
 * `import.meta.url` is not an address (Parcel makes it a `file:` URL of the source).
 */
export function publishedSibling(moduleUrl, own, name) {
  const here = new URL(moduleUrl);
  return /^https?:$/.test(here.protocol) && here.pathname.endsWith(`/${own}`)
    ? new URL(name, here).href
    : null;
}

/**
 * Starts a module worker in a browser: `create()` (the literal `new Worker(new URL("./x.js",
 * import.meta.url))` that bundlers see and emit), or, when the browser refuses it because the
 * script is on another origin (the package loaded from a CDN: a worker's script must be
 * same-origin), a same-origin bootstrap made from a Blob that imports `url`. The CDN's CORS
 * headers allow that import, and the script's own imports (its wasm, its model) resolve against
 * its own URL. `url` is the script's address when it is known (null under a bundler, which moved
 * it). Throws a TernflowError (`worker_failed`) naming `url` when neither starts.
 */
export function startModuleWorker(create, url, options = {}) {
  let error;
  try {
    return create();
  } catch (e) {
    error = e;
  }
  if (url && error?.name === "SecurityError" && typeof Blob === "function") {
    // Not revoked: the worker fetches it after this returns, and it is a few bytes, once.
    const boot = URL.createObjectURL(
      new Blob([`import ${JSON.stringify(String(url))};\n`], { type: "text/javascript" }),
    );
    try {
      return new Worker(boot, { type: "module", ...options });
    } catch (e) {
      error = e;
    }
  }
  throw new TernflowError(
    "worker_failed",
    `cannot start a worker from ${url ?? "its script"}: ${error?.message ?? error}`,
    { url: url ?? undefined, cause: error },
  );
}

/**
 * Why the module script at `url` did not load: the first of it and the modules it imports
 * (relative or absolute URLs, two levels down) that answers with an error, is not JavaScript,
 * or cannot be fetched, as `{ url, why }`; null when they all load (the failure is elsewhere).
 * A worker's `error` event says none of this.
 */
export async function whyNotLoaded(url, depth = 0, seen = new Set()) {
  if (seen.has(url) || seen.size >= 16) return null;
  seen.add(url);
  let resp;
  try {
    resp = await fetch(url, { cache: "no-store" });
  } catch (e) {
    return { url, why: `cannot be fetched (${e?.message ?? e}: unreachable, or no CORS headers for this origin)` };
  }
  if (!resp.ok) return { url, why: `HTTP ${resp.status}` };
  const type = resp.headers.get("content-type") ?? "";
  if (!/javascript|ecmascript/i.test(type)) {
    return { url, why: `served as ${type || "no content type"}, not as JavaScript` };
  }
  if (depth >= 2) return null;
  const text = await resp.text();
  const imports = /(?:^|[;\n])\s*(?:import|export)\b[^'";]*?\bfrom\s*["']([^"']+)["']|(?:^|[;\n])\s*import\s*["']([^"']+)["']/g;
  for (const m of text.matchAll(imports)) {
    const spec = m[1] ?? m[2];
    if (!/^(\.{1,2}\/|\/|https?:)/.test(spec)) continue; // a bare name: the import map's business
    const found = await whyNotLoaded(new URL(spec, url).href, depth + 1, seen);
    if (found) return found;
  }
  return null;
}
