// Shared pieces of the fixture tests: a static file server (with failure switches), headless
// Chromium through playwright-core (Debian's chromium: nothing is downloaded), and commands.
import { createServer } from "node:http";
import { createServer as createNetServer } from "node:net";
import { createReadStream, existsSync, statSync } from "node:fs";
import { execFile } from "node:child_process";
import { extname, join, normalize, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

export const HERE = fileURLToPath(new URL(".", import.meta.url));
export const ROOT = resolve(HERE, "../..");
export const WORK = process.env.TERNFLOW_FIXTURE_WORK ?? join(HERE, ".work");
export const BIN = join(HERE, "node_modules/.bin");

const MIME = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript",
  ".mjs": "text/javascript",
  ".wasm": "application/wasm",
  ".bin": "application/octet-stream",
  ".json": "application/json",
};

const exec = promisify(execFile);

/** Runs a command; resolves to its stdout, rejects with its output on failure. */
export async function sh(cmd, args, opts = {}) {
  try {
    const { stdout } = await exec(cmd, args, { maxBuffer: 64 << 20, timeout: 300_000, ...opts, env: { ...process.env, ...opts.env } });
    return stdout;
  } catch (e) {
    throw new Error(`${cmd} ${args.join(" ")} failed:\n${e.stdout ?? ""}\n${e.stderr ?? ""}`);
  }
}

/**
 * Serves `dir` on a free port. `routes` answers some paths itself: `"404"`, `"html"` (a 200
 * HTML page, as a misconfigured dev server sends), `"hang"` (never answers). Records every
 * request path in `log`. `cors: true` lets every origin read the files (as a CDN does).
 */
export async function serve(dir, routes = {}, { cors = false } = {}) {
  const log = [];
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, "http://x").pathname);
    log.push(path);
    const route = Object.entries(routes).find(([re]) => new RegExp(re).test(path))?.[1];
    if (route === "404") return res.writeHead(404).end("not found");
    if (route === "html") return res.writeHead(200, { "content-type": "text/html" }).end("<!doctype html><p>app</p>");
    if (route === "hang") return; // never answers
    let file = normalize(join(dir, path === "/" ? "index.html" : path));
    if (!file.startsWith(normalize(dir)) || !existsSync(file) || statSync(file).isDirectory()) {
      return res.writeHead(404).end("not found");
    }
    res.writeHead(200, {
      "content-type": MIME[extname(file)] ?? "application/octet-stream",
      "content-length": statSync(file).size,
      ...(cors ? { "access-control-allow-origin": "*" } : {}),
    });
    createReadStream(file).pipe(res);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${server.address().port}`;
  return {
    url,
    log,
    close: () => new Promise((r) => { server.closeAllConnections(); server.close(r); }),
  };
}

/** A free loopback port. */
export function freePort() {
  return new Promise((r) => {
    const s = createNetServer().listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => r(p));
    });
  });
}

let browserPromise = null;
/** One headless Chromium for the whole test file. */
export async function browser() {
  const { chromium } = await import("playwright-core");
  browserPromise ??= chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: [
      "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
      "--disable-quic", "--no-first-run", "--no-default-browser-check",
    ],
  });
  return browserPromise;
}

/** Opens `url` in `page` and waits for the fixture's `window.__result`. */
export async function runPage(page, url, timeout = 60_000) {
  const logs = [];
  const onConsole = (m) => logs.push(`${m.type()}: ${m.text()}`);
  const onError = (e) => logs.push(`pageerror: ${e.message}`);
  page.on("console", onConsole);
  page.on("pageerror", onError);
  try {
    await page.goto(url);
    await page.waitForFunction(() => window.__result !== undefined, null, { timeout });
    const r = await page.evaluate(() => window.__result);
    if (r.crash) throw new Error(`page crashed: ${r.crash}\n${logs.join("\n")}`);
    return { ...r, logs };
  } catch (e) {
    e.message += `\nconsole:\n${logs.join("\n")}`;
    throw e;
  } finally {
    page.off("console", onConsole);
    page.off("pageerror", onError);
  }
}
