// The main-thread client: starts the Web Worker and turns its typed messages into promises.
// Thin by design: every decision (caches, locks, retries, fallback, timeouts) is made in Rust in
// the worker. This file only keeps the promise book: ids, progress callbacks, AbortSignals.

import {
  TernflowError, cosineSim, publishedSibling, rank, startModuleWorker, whyNotLoaded,
} from "./common.js";

export { TernflowError, cosineSim };

// scripts/build-pkg.sh writes the shipped model's SHA-256 here: the default model is checked
// before it is used or stored in the Cache API.
const DEFAULT_MODEL_SHA256 = null;

const OPTION_KEYS = [
  "server", "token", "model", "config", "dbName", "maxLocalEntries", "workerUrl", "onProgress",
  "signal",
];
const MODEL_KEYS = ["url", "sha256", "bytes", "onProgress", "signal"];

function refuseUnknown(obj, known, what) {
  for (const k of Object.keys(obj ?? {})) {
    if (!known.includes(k)) {
      throw new TernflowError("bad_config", `${what}: unknown key \`${k}\` (known: ${known.join(", ")})`);
    }
  }
}

function abortError(signal, what) {
  const why = signal.reason instanceof Error ? signal.reason.message : String(signal.reason ?? "");
  return new TernflowError("aborted", `${what} aborted${why ? `: ${why}` : ""}`, { cause: signal.reason });
}

/**
 * An embedding worker running the ternflow wasm in a dedicated Web Worker.
 * Emits `metrics` events (`event.detail` is a metrics snapshot) while the queue loop runs.
 * See index.d.ts for the options.
 */
export class EmbeddingWorker extends EventTarget {
  #worker;
  #next = 1;
  /** The page's token function, when `server.token` is one. */
  #tokenFn = null;
  #pending = new Map();
  #options;
  #dead = null;
  /** The server the worker talks to, `{ url, token }` (the token as last handed to it). */
  #server = null;
  /** The leases the worker's queue loop holds, job id → token (its `leases` messages). */
  #leases = new Map();
  #leaving = null;
  #primed = 0;
  /** The id of the queue loop's run, named in its claims; `ended` once a hand-back ended it. */
  #session = null;
  /** Why queue mode is paused: `hidden`, `save-data`, `battery`, `paused`. */
  #pausedFor = new Set();
  #pausedSent = false;
  #watchers = null;

  constructor(options = {}) {
    super();
    refuseUnknown(options, OPTION_KEYS, "EmbeddingWorker options");
    if (options.model) refuseUnknown(options.model, MODEL_KEYS, "model");
    this.#options = options;
    const url = options.workerUrl
      ? new URL(options.workerUrl, globalThis.location?.href ?? import.meta.url).href
      : publishedSibling(import.meta.url, "client.js", "worker.js");
    try {
      // Two literal forms, so that Vite, webpack and others see (and emit) the worker; from
      // another origin (a CDN), a same-origin bootstrap that imports it.
      this.#worker = startModuleWorker(
        () => options.workerUrl
          ? new Worker(options.workerUrl, { type: "module" })
          : new Worker(new URL("./worker.js", import.meta.url), { type: "module" }),
        url,
      );
    } catch (e) {
      // Through `ready` like every other failure to start, never thrown at the caller.
      this.#dead = e instanceof TernflowError ? e : new TernflowError("worker_failed", String(e?.message ?? e), { url, cause: e });
      this.ready = Promise.reject(this.#dead);
      this.ready.catch(() => {});
      return;
    }
    this.#worker.onmessage = (event) => this.#receive(event.data);
    this.#worker.onerror = (event) => {
      event.preventDefault?.();
      if (event.message) {
        this.#fail(new TernflowError("worker_failed", `the worker failed: ${event.message}`, { url: url ?? undefined }));
        return;
      }
      // It did not load, and the event says neither which file nor why: find out.
      const unknown = url
        ? `the worker could not be loaded from ${url} (it and what it imports answer: is a Content-Security-Policy refusing it?)`
        : "the worker could not be loaded (the bundler's worker script: was it emitted, and is it served as JavaScript?)";
      (url ? whyNotLoaded(url) : Promise.resolve(null)).catch(() => null).then((found) =>
        this.#fail(new TernflowError(
          "worker_failed",
          found ? `the worker could not be loaded: ${found.url} ${found.why}` : unknown,
          { url: found?.url ?? url ?? undefined },
        )),
      );
    };
    const { onProgress, signal } = options;
    this.ready = this.#init(normaliseServer(options.server, options.token), signal).then(() =>
      options.model === false ? null : this.loadModel({ onProgress, signal, ...(options.model ?? {}) }),
    );
    // `ready` rejecting is reported to whoever awaits it (or embeds); not as an unhandled rejection.
    this.ready.catch(() => {});
  }

  #fail(err) {
    this.#dead ??= err;
    for (const p of this.#pending.values()) p.reject(err);
    this.#pending.clear();
    this.#worker?.terminate();
  }

  #receive(msg) {
    if (msg.type === "tokenNeeded") {
      this.#renewToken();
      return;
    }
    if (msg.type === "metrics") {
      this.dispatchEvent(new CustomEvent("metrics", { detail: msg.metrics }));
      return;
    }
    if (msg.type === "leases") {
      for (const id of msg.gone) this.#leases.delete(id);
      for (const l of msg.held) this.#leases.set(l.id, l.token);
      if (msg.held.length) this.#primeHandBack();
      return;
    }
    const p = this.#pending.get(msg.id);
    if (!p) return;
    if (msg.type === "progress") {
      p.onProgress?.({ phase: msg.phase, loaded: msg.loaded, total: msg.total ?? undefined });
      return;
    }
    this.#pending.delete(msg.id);
    p.cleanup?.();
    if (msg.type === "error") {
      p.reject(new TernflowError(msg.code, msg.message, { url: msg.url, retryable: msg.retryable }));
    } else {
      p.resolve(msg);
    }
  }

  #request(msg, { transfer = [], signal, onProgress, what = msg.type } = {}) {
    if (this.#dead) return Promise.reject(this.#dead);
    if (signal?.aborted) return Promise.reject(abortError(signal, what));
    const id = this.#next++;
    return new Promise((resolve, reject) => {
      const entry = { resolve, reject, onProgress };
      if (signal) {
        const onAbort = () => {
          this.#pending.delete(id);
          this.#worker.postMessage({ type: "cancel", target: id });
          reject(abortError(signal, what));
        };
        signal.addEventListener("abort", onAbort, { once: true });
        entry.cleanup = () => signal.removeEventListener("abort", onAbort);
      }
      this.#pending.set(id, entry);
      this.#worker.postMessage({ ...msg, id, progress: Boolean(onProgress) }, transfer);
    });
  }

  /** Asks the page's token function for a fresh token and hands it to the worker. */
  #renewToken() {
    if (!this.#tokenFn) return;
    Promise.resolve()
      .then(() => this.#tokenFn())
      .then((token) => {
        if (this.#server) this.#server.token = String(token);
        return this.#request({ type: "token", token: String(token) });
      })
      // The worker stops waiting after a while and reports the 401 as the job's error.
      .catch(() => {});
  }

  async #init(server, signal) {
    const o = this.#options;
    if (server && typeof server.token === "function") {
      this.#tokenFn = server.token;
      server = { url: server.url, token: String(await this.#tokenFn()), renewable: true };
    }
    if (server) this.#server = { url: server.url, token: server.token };
    return this.#request(
      {
        type: "init",
        server,
        config: o.config ?? null,
        dbName: o.dbName ?? null,
        maxLocalEntries: o.maxLocalEntries ?? null,
      },
      { signal },
    );
  }

  /**
   * Loads a model from `{url, sha256}` (checked, then kept in the Cache API) or `{bytes}`;
   * resolves to its id. Without a URL: the model shipped beside this file.
   */
  async loadModel({ url, sha256, bytes, onProgress, signal } = {}) {
    if (bytes) {
      const copy = bytes instanceof ArrayBuffer ? bytes.slice(0) : new Uint8Array(bytes).slice().buffer;
      return (await this.#request({ type: "loadModelBytes", bytes: copy }, { transfer: [copy], signal })).modelId;
    }
    const href = url
      ? new URL(url, globalThis.location?.href ?? import.meta.url).href
      : new URL("./ternlight-int4.bin", import.meta.url).href;
    const want = sha256 ?? (url ? null : DEFAULT_MODEL_SHA256);
    const r = await this.#request(
      { type: "loadModel", url: href, sha256: want },
      { signal, onProgress, what: `loading ${href}` },
    );
    return r.modelId;
  }

  /**
   * Embeds one text (through the local and remote caches); resolves to a Float32Array. With a
   * W3C `traceparent`, the requests it causes (remote cache, lock, backend) join that trace.
   */
  async embed(text, { signal, traceparent } = {}) {
    return (await this.embedMany([text], { signal, traceparent }))[0];
  }

  /**
   * Embeds several texts; resolves to Float32Arrays in order. With `settle: true`, one result
   * per text instead, like `Promise.allSettled`: `{ status: "fulfilled", value }` or
   * `{ status: "rejected", reason: TernflowError }` (one bad text does not fail the rest).
   */
  async embedMany(texts, options = {}) {
    const items = await this.#embed(texts, options, false);
    if (!options.settle) return items.map((e) => e.vector);
    return items.map((e) =>
      e.error ? { status: "rejected", reason: e.error } : { status: "fulfilled", value: e.vector },
    );
  }

  /**
   * Like embedMany, with where each vector came from (`local`, `remote`, `engine`, `backend`)
   * and what it covers of its text (`info: { tokens, chunks, truncated }`, when the engine runs
   * the model); with `settle: true` a text that failed is `{ error: TernflowError }`.
   * `maxTokens` cuts each text at that many word pieces (default: whole texts).
   */
  async embedDetailed(texts, options = {}) {
    return this.#embed(texts, options, true);
  }

  async #embed(texts, { signal, onProgress, settle = false, maxTokens, traceparent } = {}, info) {
    await this.ready;
    const msg = { type: "embed", texts, settle, info };
    if (maxTokens !== undefined) msg.maxTokens = maxTokens;
    if (traceparent !== undefined) msg.traceparent = traceparent;
    const r = await this.#request(msg, { signal, onProgress, what: "embed" });
    return r.embeddings.map((e) =>
      e.error
        ? { error: new TernflowError(e.error.code, e.error.message, { retryable: e.error.retryable }) }
        : {
            vector: e.vector instanceof Float32Array ? e.vector : Float32Array.from(e.vector),
            source: e.source,
            ...(e.info ? { info: e.info } : {}),
          },
    );
  }

  /**
   * Ranks `corpus` by similarity to `query`: `[{ text, index, sim, score }]` (`score` is `sim`),
   * best first, at most `topK`.
   */
  async similar(query, corpus, { topK = 5, signal } = {}) {
    const [q, ...docs] = await this.embedMany([query, ...corpus], { signal });
    return rank(q, docs, corpus, topK);
  }

  /**
   * Starts queue mode: pull jobs from the server with at most `concurrency` in flight. When
   * `signal` fires (before or after it started), queue mode stops.
   */
  async start({ server, token, concurrency, signal, budget, pauseWhenHidden = true,
    pauseOnSaveData = true, pauseOnBatteryBelow = 0.2 } = {}) {
    if (budget !== undefined && !(typeof budget === "number" && budget > 0 && budget <= 1)) {
      throw new TernflowError("bad_config", `budget must be a share of one core in (0, 1], not ${budget}`);
    }
    await this.ready;
    if (server) await this.#init(normaliseServer(server, token), signal);
    this.#watchLeaving();
    this.#primeHandBack();
    this.#watchDevice({ pauseWhenHidden, pauseOnSaveData, pauseOnBatteryBelow });
    this.#session = { id: newSession(), ended: false };
    await this.#request({ type: "start", concurrency: concurrency ?? null, cpuShare: budget ?? null,
      session: this.#session.id }, { signal, what: "start" });
    signal?.addEventListener("abort", () => this.stop().catch(() => {}), { once: true });
  }

  /** Pauses queue mode: no new claims (jobs in hand finish) until `resume()`. */
  pause() {
    this.#setPaused("paused", true);
  }

  /** Ends a `pause()`; the worker claims again unless another reason holds it. */
  resume() {
    this.#setPaused("paused", false);
  }

  /** Why queue mode is paused now (empty: it is not). */
  get pausedFor() {
    return [...this.#pausedFor];
  }

  #setPaused(reason, on) {
    if (on) this.#pausedFor.add(reason);
    else this.#pausedFor.delete(reason);
    const paused = this.#pausedFor.size > 0;
    if (paused === this.#pausedSent || this.#dead) return;
    this.#pausedSent = paused;
    this.#worker.postMessage({ type: "pause", paused });
  }

  /**
   * What the visitor's device says, followed while queue mode may run: a hidden tab, a request
   * to save data, a discharging battery below a level, each a reason to claim nothing.
   */
  #watchDevice({ pauseWhenHidden, pauseOnSaveData, pauseOnBatteryBelow }) {
    this.#watchers?.abort();
    const ctl = new AbortController();
    this.#watchers = ctl;
    const opts = { signal: ctl.signal };
    const doc = globalThis.document;
    this.#setPaused("hidden", false);
    this.#setPaused("save-data", false);
    this.#setPaused("battery", false);
    if (pauseWhenHidden && doc) {
      const seen = () => this.#setPaused("hidden", doc.visibilityState === "hidden");
      doc.addEventListener("visibilitychange", seen, opts);
      seen();
    }
    const conn = globalThis.navigator?.connection;
    if (pauseOnSaveData && conn) {
      const seen = () => this.#setPaused("save-data", Boolean(conn.saveData));
      conn.addEventListener?.("change", seen, opts);
      seen();
    }
    const getBattery = globalThis.navigator?.getBattery;
    if (pauseOnBatteryBelow > 0 && typeof getBattery === "function") {
      getBattery.call(globalThis.navigator).then((battery) => {
        if (ctl.signal.aborted) return;
        const seen = () => this.#setPaused("battery", !battery.charging && battery.level < pauseOnBatteryBelow);
        battery.addEventListener("levelchange", seen, opts);
        battery.addEventListener("chargingchange", seen, opts);
        seen();
      }, () => {});
    }
  }

  /**
   * When the page goes away (`pagehide`: a closed tab, a navigation, the back-forward cache;
   * `freeze`: a tab the browser suspends), its worker is torn down mid-job: the leases it holds
   * are handed back then, so their jobs are claimable again at once instead of after a lease.
   */
  #watchLeaving() {
    if (this.#leaving || typeof globalThis.addEventListener !== "function") return;
    this.#leaving = () => this.#handBack();
    globalThis.addEventListener("pagehide", this.#leaving);
    globalThis.document?.addEventListener?.("freeze", this.#leaving);
    // Back from the back-forward cache, or a frozen tab resumed: the hand-back ended the run's
    // session, so the worker claims under a new one (the server refuses the old one's claims).
    const back = () => {
      if (!this.#session?.ended || this.#dead) return;
      this.#session = { id: newSession(), ended: false };
      this.#worker.postMessage({ type: "session", session: this.#session.id });
    };
    globalThis.addEventListener("pageshow", back);
    globalThis.document?.addEventListener?.("resume", back);
  }

  /**
   * Sends the hand-back's request once now, for a lease nobody holds (answered `lost`): the
   * server is on another origin, so the real one needs a CORS preflight, and a preflight
   * started while the page is being torn down can be lost with it. Done now, its answer is
   * cached (the server's `Access-Control-Max-Age`, 10 min), and the request at `pagehide` goes
   * out at once. Again when the cached answer may have expired.
   */
  #primeHandBack() {
    const server = this.#server;
    if (!server?.url || Date.now() - this.#primed < 5 * 60_000) return;
    this.#primed = Date.now();
    const headers = { "content-type": "application/json" };
    if (server.token) headers.authorization = "Bearer " + server.token;
    fetch(server.url.replace(/\/+$/, "") + "/v1/jobs/release", {
      method: "POST",
      headers,
      body: JSON.stringify({ leases: [{ id: "ternflow-preflight", token: "-" }] }),
    }).catch(() => {});
  }

  /**
   * Hands every lease the worker holds back to the server in requests that outlive the page
   * (`fetch` with `keepalive`: at most 64 KiB in flight, so in bodies of at most 100 leases and
   * 48 KiB); the worker finds them lost if it runs on. Best effort: what cannot be sent expires.
   */
  #handBack() {
    const server = this.#server;
    const session = this.#session && !this.#session.ended ? this.#session : null;
    if (!server?.url || (this.#leases.size === 0 && !session)) return;
    const url = server.url.replace(/\/+$/, "") + "/v1/jobs/release";
    const headers = { "content-type": "application/json" };
    if (server.token) headers.authorization = "Bearer " + server.token;
    // Keepalive bodies in flight share 64 KiB: leave room for the headers.
    let left = 60 * 1024, batch = [], size = 16;
    // The first request also ends the run's session: the server hands back what the session
    // claimed that this page has not heard of yet (a claim's answer reaches the page up to
    // 50 ms after the worker, and a claim may still be on its way), and refuses its later
    // claims.
    let first = session?.id;
    if (session) session.ended = true;
    const flush = () => {
      const body = JSON.stringify(first ? { leases: batch, session: first } : { leases: batch });
      first = undefined;
      left -= body.length;
      fetch(url, { method: "POST", keepalive: true, headers, body }).catch(() => {});
      batch = [];
      size = 16;
    };
    for (const [id, token] of this.#leases) {
      const n = id.length + token.length + 24; // ids and tokens are ASCII
      if (batch.length === 100 || size + n > Math.min(48 * 1024, left)) {
        if (batch.length) flush();
        if (size + n > left) break;
      }
      batch.push({ id, token });
      size += n;
    }
    if (batch.length || first) flush();
    this.#leases.clear();
  }

  /** Stops queue mode, finishing in-flight jobs for up to `deadline` ms; resolves to a summary. */
  async stop({ deadline } = {}) {
    return (await this.#request({ type: "stop", deadlineMs: deadline ?? null })).summary;
  }

  /** A metrics snapshot: counters and gauges (hit ratios, processing rate, latency quantiles). */
  async stats() {
    return (await this.#request({ type: "stats" })).metrics;
  }

  /**
   * Ends the worker at once (no drain: prefer `stop` first), handing back the leases it held;
   * pending calls reject `terminated`.
   */
  terminate() {
    this.#handBack();
    this.#fail(new TernflowError("terminated", "the worker was terminated"));
  }
}

/** A worker session id: 128 random bits in hex (`crypto.randomUUID` needs a secure context). */
function newSession() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

function normaliseServer(server, token) {
  if (!server) return null;
  if (typeof server === "string") return { url: server, token: token ?? "" };
  return { url: server.url, token: server.token ?? token ?? "" };
}

let shared = null;
function defaultWorker() {
  shared ??= new EmbeddingWorker();
  return shared;
}

/** Ternlight-compatible: embeds `text` with a shared default worker. */
export function embed(text, { worker, signal, traceparent } = {}) {
  return (worker ?? defaultWorker()).embed(text, { signal, traceparent });
}

/**
 * Ternlight-compatible: ranks `corpus` (strings) by similarity to `query`.
 * Resolves to `[{ text, index, sim, score }]` (`score` = `sim`), best first, at most `topK`.
 */
export function similar(query, corpus, { topK = 5, worker, signal } = {}) {
  return (worker ?? defaultWorker()).similar(query, corpus, { topK, signal });
}
