// The packed package, installed unchanged, built by Vite 8 (and under its dev server), webpack 5,
// esbuild and Next.js 16, served, and run in headless Chromium: ready, embed, similar, abort, terminate, and the caches after a
// reload; then the failure paths, each a typed error with nothing cached wrongly.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { cpSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { BIN, HERE, WORK, browser, runPage, serve, sh, freePort } from "./lib.mjs";
import { BUILDS } from "./builds.mjs";


after(async () => (await browser()).close());

function checkHappyPath(r, engineInWorker = 1) {
  assert.equal(r.error, undefined, `ready/embed failed: ${JSON.stringify(r.error)}\n${r.logs?.join("\n")}`);
  assert.equal(r.engineInWorker, engineInWorker, "where the model runs (1: its own engine worker)");
  assert.match(r.modelId, /^[0-9a-f]{16}$/);
  assert.equal(r.dim, 384);
  assert.ok(Math.abs(r.norm - 1) < 1e-3, `unit vector, got ${r.norm}`);
  assert.deepEqual(r.info, { tokens: 2, chunks: 1, truncated: false }, "hello world: 2 word pieces");
  assert.ok(r.long.whole.chunks > 1 && r.long.whole.tokens > 126 && !r.long.whole.truncated, JSON.stringify(r.long));
  assert.deepEqual(r.long.cut, { tokens: 16, chunks: 1, truncated: true });
  // (the first two are "engine" on a page's first load: checked there)
  assert.deepEqual(r.long.sources.slice(2), ["local", "local"], "the cut vector is cached apart from the whole one");
  assert.ok(r.long.cutDiffers && r.long.againSame && r.long.wholeAgainSame, JSON.stringify(r.long));
  assert.equal(r.zeroTokens, "bad_message");
  assert.equal(r.hits.length, 3);
  assert.equal(r.hits[0].text, "the kitten rests on the rug", JSON.stringify(r.hits));
  assert.equal(r.hits[0].sim, r.hits[0].score, "score is an alias of sim");
  assert.ok(r.hits[0].sim > r.hits[1].sim);
  assert.deepEqual(r.settled, [384, "text_too_long:true", 384], "settle: per-text results");
  assert.equal(r.abort, "aborted");
  assert.ok(r.abortedAfter >= 5 && r.abortedAfter < 300, `stopped early (after ${r.abortedAfter})`);
  assert.equal(r.afterAbort, 384, "the worker still answers after an abort");
  assert.equal(r.terminated, "terminated");
  assert.equal(r.cachedModels.length, 1, "the model is in the Cache API");
  const last = r.progress.at(-1);
  assert.equal(last.phase, "model");
  assert.ok(last.loaded > 1_000_000 && last.loaded === last.total, JSON.stringify(last));
}

for (const [name, buildApp] of Object.entries(BUILDS)) {
  describe(`${name} app`, () => {
    const out = join(WORK, `dist-${name}`);
    let srv;
    before(async () => {
      rmSync(out, { recursive: true, force: true });
      mkdirSync(out, { recursive: true });
      await buildApp(out);
      srv = await serve(out);
    });
    after(() => srv?.close());

    test("ready, embed, similar, abort mid-embedMany, terminate; cached after a reload", async () => {
      const ctx = await (await browser()).newContext();
      const page = await ctx.newPage();
      try {
        const first = await runPage(page, `${srv.url}/`);
        checkHappyPath(first);
        assert.equal(first.source, "engine");
        assert.deepEqual(first.long.sources.slice(0, 2), ["engine", "engine"], "whole and cut each embedded once");
        const modelPath = new URL(first.cachedModels[0]).pathname;
        const fetched = srv.log.filter((p) => p === modelPath).length;
        assert.equal(fetched, 1, "downloaded once");

        const second = await runPage(page, `${srv.url}/`);
        checkHappyPath(second);
        assert.equal(second.source, "local", "the vector comes from IndexedDB after the reload");
        assert.equal(second.modelId, first.modelId);
        assert.equal(srv.log.filter((p) => p === modelPath).length, 1, "the model comes from the Cache API");
        console.log(`figures ${name}: cold start to first vector ${first.firstVectorMs.toFixed(0)} ms, warm ${second.firstVectorMs.toFixed(0)} ms`);
      } finally {
        await ctx.close();
      }
    });
  });
}

/** Starts `cmd args` (a dev or production server on `port`) and waits until `url` answers. */
async function startServer(cmd, args, url, env = {}) {
  const { spawn } = await import("node:child_process");
  const proc = spawn(cmd, args, { stdio: "ignore", env: { ...process.env, ...env } });
  for (let i = 0; i < 600; i++) {
    try {
      if ((await fetch(url)).ok) return proc;
    } catch {}
    if (proc.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  proc.kill();
  throw new Error(`${cmd} ${args.join(" ")} did not start`);
}

describe("next app (Next.js 16, Turbopack, a client component)", () => {
  let proc;
  let url;
  const env = { NEXT_TELEMETRY_DISABLED: "1" };
  before(async () => {
    const dir = join(HERE, "next");
    await sh(join(BIN, "next"), ["build", dir], { env });
    const port = await freePort();
    url = `http://127.0.0.1:${port}/`;
    proc = await startServer(join(BIN, "next"), ["start", dir, "-H", "127.0.0.1", "-p", String(port)], url, env);
  });
  after(() => proc?.kill());

  test("next build + next start: the same checks, cached after a reload", async () => {
    const ctx = await (await browser()).newContext();
    const page = await ctx.newPage();
    try {
      const first = await runPage(page, url);
      checkHappyPath(first);
      assert.equal(first.source, "engine");
      const second = await runPage(page, url);
      checkHappyPath(second);
      assert.equal(second.source, "local");
      console.log(`figures next: cold start to first vector ${first.firstVectorMs.toFixed(0)} ms, warm ${second.firstVectorMs.toFixed(0)} ms`);
    } finally {
      await ctx.close();
    }
  });
});

describe("vite dev server", () => {
  let proc;
  let url;
  before(async () => {
    const port = await freePort();
    url = `http://127.0.0.1:${port}/`;
    proc = await startServer(join(BIN, "vite"), ["--config", join(HERE, "vite/vite.config.js"), "--host", "127.0.0.1", "--port", String(port), "--strictPort"], url);
  });
  after(() => proc?.kill());

  test("the unchanged app works under `vite` (dev), model from the Cache API after a reload", async () => {
    const ctx = await (await browser()).newContext();
    const page = await ctx.newPage();
    try {
      const first = await runPage(page, url);
      checkHappyPath(first);
      const second = await runPage(page, url);
      checkHappyPath(second);
      assert.equal(second.source, "local");
    } finally {
      await ctx.close();
    }
  });
});

describe("failure paths (esbuild app)", () => {
  const out = join(WORK, "dist-esbuild-failures");
  before(async () => {
    rmSync(out, { recursive: true, force: true });
    mkdirSync(out, { recursive: true });
    await BUILDS.esbuild(out);
  });

  async function failing(routes, query) {
    const srv = await serve(out, routes);
    const ctx = await (await browser()).newContext();
    try {
      return await runPage(await ctx.newPage(), `${srv.url}/${query}`);
    } finally {
      await ctx.close();
      await srv.close();
    }
  }

  test("a model 404 rejects ready with http_404 naming the URL; nothing cached", async () => {
    const r = await failing({}, "?model=/no-such-model.bin");
    assert.equal(r.error?.code, "http_404", JSON.stringify(r));
    assert.equal(r.error.typed, true, "a TernflowError");
    assert.match(r.error.url, /\/no-such-model\.bin$/);
    assert.match(r.error.message, /no-such-model\.bin/);
    assert.deepEqual(r.cachedModels, []);
  });

  test("a 200 that is not a model (a dev server's HTML) is bad_model; nothing cached", async () => {
    const r = await failing({ "^/ternlight-int4\\.bin$": "html" }, "?model=/ternlight-int4.bin");
    assert.equal(r.error?.code, "bad_model", JSON.stringify(r));
    assert.match(r.error.message, /bad magic/);
    assert.match(r.error.url, /\/ternlight-int4\.bin$/);
    assert.deepEqual(r.cachedModels, []);
  });

  test("the default model answered with HTML fails its checksum; nothing cached", async () => {
    const r = await failing({ "^/ternlight-int4\\.bin$": "html" }, "");
    assert.equal(r.error?.code, "model_checksum", JSON.stringify(r));
    assert.deepEqual(r.cachedModels, []);
  });

  test("a missing wasm rejects ready with http_404 naming the wasm URL", async () => {
    const r = await failing({ "\\.wasm$": "404" }, "");
    assert.equal(r.error?.code, "http_404", JSON.stringify(r));
    assert.match(r.error.url, /ternflow_bg\.wasm$/);
    assert.deepEqual(r.cachedModels, []);
  });

  test("a model host that never answers is a timeout (modelTimeoutMs)", async () => {
    const r = await failing({ "^/slow\\.bin$": "hang" }, "?model=/slow.bin&modelTimeoutMs=1500");
    assert.equal(r.error?.code, "timeout", JSON.stringify(r));
    assert.match(r.error.url, /\/slow\.bin$/);
    assert.deepEqual(r.cachedModels, []);
  });

  test("a server that never answers costs requestTimeoutMs per request, not the page", async () => {
    const { createServer } = await import("node:http");
    const held = [];
    const hang = createServer((req, res) => held.push(res));
    await new Promise((r) => hang.listen(0, "127.0.0.1", r));
    try {
      const server = `http://127.0.0.1:${hang.address().port}`;
      const config = encodeURIComponent(JSON.stringify({ requestTimeoutMs: 400, retry: { baseMs: 1, maxMs: 1, maxAttempts: 1 } }));
      const r = await failing({}, `?mode=server&server=${encodeURIComponent(server)}&config=${config}`);
      assert.equal(r.error, undefined, JSON.stringify(r));
      assert.equal(r.source, "engine", "answered by the engine once the remote tier timed out");
      assert.ok(r.embedMs < 10_000, `embedded in ${r.embedMs} ms`);
      assert.ok(held.length >= 1, "the server was asked");
      assert.ok(r.counters.cache_remote_errors >= 1, JSON.stringify(r.counters));
    } finally {
      for (const res of held) res.destroy();
      hang.closeAllConnections();
      hang.close();
    }
  });

  test("a missing engine-worker.js leaves the model on the worker's thread: everything still works", async () => {
    const r = await failing({ "^/engine-worker\\.js$": "404" }, "");
    checkHappyPath(r, 0);
    assert.equal(r.source, "engine");
  });

  test("a missing worker script rejects ready with worker_failed", async () => {
    const r = await failing({ "^/worker\\.js$": "404" }, "");
    assert.equal(r.error?.code, "worker_failed", JSON.stringify(r));
    assert.equal(r.error.typed, true, "a TernflowError");
  });
});

// No bundler: the installed package's files as they are, on the page's origin or on another one
// (how jsDelivr and unpkg users start), found through an import map. The page is the fixture app.
describe("no bundler: an import map, the package on the same origin or a CDN's", () => {
  const pkgDir = join(HERE, "node_modules/ternflow");
  const pageDir = (name, ternflowUrl) => {
    const out = join(WORK, name);
    rmSync(out, { recursive: true, force: true });
    mkdirSync(out, { recursive: true });
    cpSync(join(HERE, "app/main.js"), join(out, "main.js"));
    const map = JSON.stringify({ imports: { ternflow: ternflowUrl } });
    writeFileSync(join(out, "index.html"), `<!doctype html>\n<meta charset="utf-8"><title>ternflow, no bundler</title>\n<script type="importmap">${map}</script>\n<script type="module" src="./main.js"></script>\n`);
    return out;
  };

  async function open(url) {
    const ctx = await (await browser()).newContext();
    try {
      return await runPage(await ctx.newPage(), url);
    } finally {
      await ctx.close();
    }
  }

  test("same origin: works unchanged, engine in its own worker", async () => {
    const out = pageDir("importmap-same", "./ternflow/client.js");
    cpSync(pkgDir, join(out, "ternflow"), { recursive: true });
    const srv = await serve(out);
    try {
      const r = await open(`${srv.url}/`);
      checkHappyPath(r);
      assert.equal(r.source, "engine");
      console.log(`figures import map (same origin): cold start to first vector ${r.firstVectorMs.toFixed(0)} ms`);
    } finally {
      await srv.close();
    }
  });

  test("the package on another origin (a CDN): a same-origin bootstrap starts both workers", async () => {
    const cdn = await serve(pkgDir, {}, { cors: true });
    const srv = await serve(pageDir("importmap-cdn", `${cdn.url}/client.js`));
    try {
      const r = await open(`${srv.url}/`);
      checkHappyPath(r);
      assert.equal(r.source, "engine");
      for (const file of ["/worker.js", "/engine-worker.js", "/ternflow_bg.wasm", "/ternlight-int4.bin"]) {
        assert.ok(cdn.log.includes(file), `${file} came from the CDN: ${cdn.log.join(" ")}`);
      }
      assert.deepEqual(srv.log.filter((p) => p !== "/" && p !== "/main.js" && p !== "/favicon.ico"), [], "nothing of the package from the page's origin");
      console.log(`figures import map (CDN origin): cold start to first vector ${r.firstVectorMs.toFixed(0)} ms`);
    } finally {
      await srv.close();
      await cdn.close();
    }
  });

  for (const [file, route] of [["worker.js", "^/ternflow/worker\\.js$"], ["ternflow.js", "^/ternflow/ternflow\\.js$"]]) {
    test(`a missing ${file} rejects ready with worker_failed naming its URL and the 404`, async () => {
      const out = pageDir(`importmap-no-${file}`, "./ternflow/client.js");
      cpSync(pkgDir, join(out, "ternflow"), { recursive: true });
      const srv = await serve(out, { [route]: "404" });
      try {
        const r = await open(`${srv.url}/`);
        assert.equal(r.error?.code, "worker_failed", JSON.stringify(r));
        assert.equal(r.error.typed, true, "a TernflowError");
        assert.equal(r.error.url, `${srv.url}/ternflow/${file}`);
        assert.match(r.error.message, new RegExp(`/ternflow/${file.replace(".", "\\.")} HTTP 404`));
      } finally {
        await srv.close();
      }
    });
  }
});
