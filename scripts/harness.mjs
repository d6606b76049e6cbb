// What the demo, chaos and liars drivers and the browser benchmarks share: a static file server
// for the pages that run the engine and the Web Workers (pkg/ and www/ of this checkout by
// default), Debian's Chromium through playwright-core (never a downloaded browser), a free port,
// signed test tokens, the server's HTTP API, an SSE reader and the figures' arithmetic.
import { createServer } from "node:http";
import { createServer as createNetServer } from "node:net";
import { createHmac } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { resolve, extname, normalize, sep } from "node:path";
import { fileURLToPath } from "node:url";

export const root = resolve(fileURLToPath(new URL(".", import.meta.url)), "..");

const TYPES = { ".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm",
  ".bin": "application/octet-stream", ".txt": "text/plain", ".html": "text/html", ".css": "text/css" };

/** Whether `file` is `dir` or under it. */
const within = (dir, file) => file === dir || file.startsWith(dir.endsWith(sep) ? dir : dir + sep);
const isFile = (file) => { try { return statSync(file).isFile(); } catch { return false; } };

/**
 * Serves `pages` (path → HTML) and files on 127.0.0.1; resolves to `{ url, close }`. Anything
 * else is a 404. Options:
 *   allow    path prefixes under the repo root that may be served (default `pkg/` and `www/`)
 *   files    URL path → absolute file path, for files outside those folders (a model, an input);
 *            a URL path ending in `/` maps a folder instead (e.g. `{ "/pkg/": "/tmp/other-pkg" }`),
 *            taking precedence over `allow`
 *   headers  added to every page and file served (e.g. COOP / COEP for cross-origin isolation,
 *            `Cache-Control`)
 *   routes   URL path → `(url, res) => void`, answered before anything else (dynamic endpoints)
 */
export async function serveStatic(pages, { allow = ["pkg/", "www/"], files = {}, headers = {}, routes = {} } = {}) {
  const mounts = Object.entries(files).filter(([p]) => p.endsWith("/"));
  const lookup = (path) => {
    if (Object.hasOwn(files, path) && !path.endsWith("/")) return files[path];
    let rel;
    try { rel = normalize(decodeURIComponent(path)).replace(/^\/+/, ""); } catch { return null; }
    for (const [prefix, dir] of mounts) {
      if (!("/" + rel).startsWith(prefix)) continue;
      const file = resolve(dir, ("/" + rel).slice(prefix.length));
      return within(resolve(dir), file) ? file : null;
    }
    const file = resolve(root, rel);
    return allow.some((a) => rel.startsWith(a)) && within(root, file) ? file : null;
  };
  const http = createServer((req, res) => {
    const url = new URL(req.url, "http://x");
    const path = url.pathname;
    if (Object.hasOwn(routes, path)) { routes[path](url, res); return; }
    if (pages[path]) { res.writeHead(200, { ...headers, "Content-Type": "text/html" }).end(pages[path]); return; }
    const file = lookup(path);
    if (!file || !isFile(file)) { res.writeHead(404).end(); return; }
    res.writeHead(200, { ...headers, "Content-Type": TYPES[extname(file)] ?? "application/octet-stream" }).end(readFileSync(file));
  });
  await new Promise((r) => http.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${http.address().port}`, close: () => http.close() };
}

/** Headless Chromium (Debian's /usr/bin/chromium); `extraArgs` are added to its command line. */
export async function launchChromium(extraArgs = []) {
  // Imported here: the drivers that start no browser (bench/tenants.mjs, bench/noisy.mjs) do not need playwright-core.
  const { chromium } = await import("playwright-core");
  return chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--no-sandbox", "--headless=new", "--disable-gpu", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run",
      "--disable-background-timer-throttling", "--disable-renderer-backgrounding", ...extraArgs],
  });
}

/**
 * Opens `url` in a new tab of `browser` (its console on stderr, as `[page] …`) and waits, 10 min
 * at most, for the page to set `window.__result` or `window.__error`: resolves to the result,
 * throws the error.
 */
export async function pageResult(browser, url) {
  const tab = await browser.newPage();
  tab.on("console", (m) => console.error(`[page] ${m.text()}`));
  await tab.goto(url);
  await tab.waitForFunction(() => window.__result || window.__error, null, { timeout: 600000, polling: 200 });
  const err = await tab.evaluate(() => window.__error);
  if (err) throw new Error(err);
  return tab.evaluate(() => window.__result);
}

/** A free TCP port on 127.0.0.1. */
export const freePort = () => new Promise((res) => {
  const s = createNetServer();
  s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => res(p)); });
});

/** `mint(role, tenant, sub)`: HS256 tokens signed with `secret` (key id `k1`, valid for 3 500 s). */
export const minter = (secret) => (role, tenant, sub) => {
  const b64url = (b) => Buffer.from(b).toString("base64url");
  const head = b64url(JSON.stringify({ alg: "HS256", kid: "k1", typ: "JWT" }));
  const body = b64url(JSON.stringify({ role, tenant, sub, exp: Math.floor(Date.now() / 1000) + 3500 }));
  const sig = b64url(createHmac("sha256", secret).update(`${head}.${body}`).digest());
  return `${head}.${body}.${sig}`;
};

/** A client of one `ternflow serve`. */
export function client(base, token) {
  const call = async (method, path, body) => {
    const r = await fetch(base + path, {
      // A server that stops answering fails the call (and the run says why) instead of
      // stalling it.
      signal: AbortSignal.timeout(60_000),
      method,
      headers: { authorization: "Bearer " + token, ...(body ? { "content-type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await r.text();
    if (!r.ok) throw new Error(`${method} ${base}${path}: ${r.status} ${text}`);
    return text && (r.headers.get("content-type") ?? "").includes("json") ? JSON.parse(text) : text;
  };
  return {
    base,
    get: (p) => call("GET", p),
    post: (p, b) => call("POST", p, b ?? {}),
    del: (p) => call("DELETE", p),
    /** Statuses of `ids` (1 000 per request), in order; without the vectors unless `vectors`. */
    async statuses(ids, { vectors = false } = {}) {
      const out = [];
      for (let i = 0; i < ids.length; i += 1000) {
        const r = await call("POST", "/v1/jobs/status", { ids: ids.slice(i, i + 1000), vectors });
        out.push(...r.jobs);
      }
      return out;
    },
    /** The cumulative claim → ack histogram from `/metrics`: [[le_ms, cumulative count], …]. */
    async jobLatency() {
      const text = await call("GET", "/metrics");
      return [...text.matchAll(/^ternflow_job_latency_seconds_bucket\{le="([^"]+)"\} (\d+)$/gm)]
        .map(([, le, n]) => [le === "+Inf" ? Infinity : 1000 * Number(le), Number(n)]);
    },
  };
}

/** Opens `GET /v1/events` on `base`; `next(pred, ms)` resolves with the first event matching;
 * `listen(fn)` calls `fn(event)` for every event from then on (and keeps none for `next`). */
export async function sse(base, token) {
  const ctl = new AbortController();
  const r = await fetch(base + "/v1/events", { headers: { authorization: "Bearer " + token }, signal: ctl.signal });
  if (!r.ok) throw new Error(`SSE ${base}: ${r.status}`);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  const queue = [];
  let waiting = null;
  let listener = null;
  (async () => {
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const frame = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const ev = { id: null, event: "message", data: null, at: performance.now() };
          let any = false;
          for (const line of frame.split("\n")) {
            if (line.startsWith("id:")) ev.id = Number(line.slice(3).trim());
            else if (line.startsWith("event:")) { ev.event = line.slice(6).trim(); any = true; }
            else if (line.startsWith("data:")) { ev.data = JSON.parse(line.slice(5).trim()); any = true; }
          }
          if (!any) continue;
          if (listener) { listener(ev); continue; }
          queue.push(ev);
          if (waiting) waiting();
        }
      }
    } catch { /* aborted */ }
  })();
  return {
    async next(pred, ms = 10000) {
      const deadline = performance.now() + ms;
      for (;;) {
        const i = queue.findIndex(pred);
        if (i >= 0) return queue.splice(i, 1)[0];
        const left = deadline - performance.now();
        if (left <= 0) throw new Error("no matching SSE event within " + ms + " ms");
        await new Promise((res) => { waiting = res; setTimeout(res, Math.min(left, 200)); });
        waiting = null;
      }
    },
    clear() { queue.length = 0; },
    listen(fn) { listener = fn; queue.splice(0).forEach(fn); },
    close() { ctl.abort(); },
  };
}

/** `q` quantile of the claim → ack latency between two cumulative histograms (each summed over servers). */
export function latencyQuantile(before, after, q) {
  const per = after.map(([le, n], i) => [le, n - (before[i]?.[1] ?? 0)]);
  const counts = per.map(([, n], i) => (i === 0 ? n : n - per[i - 1][1]));
  const total = per.length ? per[per.length - 1][1] : 0;
  if (total <= 0) return null;
  const rank = q * total;
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    if (counts[i] > 0 && seen + counts[i] >= rank) {
      const lo = i === 0 ? 0 : per[i - 1][0];
      const hi = per[i][0];
      if (!Number.isFinite(hi)) return lo;
      return lo + (hi - lo) * Math.min(1, Math.max(0, (rank - seen) / counts[i]));
    }
    seen += counts[i];
  }
  return per[per.length - 2]?.[0] ?? null;
}

/** Element-wise sum of cumulative histograms from several servers. */
export function sumHistograms(hs) {
  return hs[0].map(([le], i) => [le, hs.reduce((s, h) => s + (h[i]?.[1] ?? 0), 0)]);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
