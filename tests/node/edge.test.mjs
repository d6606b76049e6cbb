// The wasm outside a browser: Node has neither Web Workers nor IndexedDB nor the Cache API, like an
// edge isolate. Runs the edge handler (www/edge/handler.mjs) over the npm package's build in pkg/ (scripts/build-pkg.sh).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as bindings from "../../pkg/ternflow.js";
import { createHandler } from "../../www/edge/handler.mjs";

const root = new URL("../../", import.meta.url);
const wasmModule = new WebAssembly.Module(readFileSync(new URL("pkg/ternflow_bg.wasm", root)));
const modelBytes = readFileSync(new URL("crates/engine/tests/data/ref_tiny_ternary.tern", root));
const handle = createHandler({ bindings, wasmModule, modelBytes });
const post = (body) =>
  handle(new Request("http://edge/embed", { method: "POST", body: typeof body === "string" ? body : JSON.stringify(body) }), {});

test("embeds with the in-wasm engine, then hits the in-memory local cache", async () => {
  const r = await post({ texts: ["hello edge", "hello edge", "another text"] });
  assert.equal(r.status, 200);
  const { vectors, sources } = await r.json();
  assert.deepEqual(sources, ["engine", "local", "engine"]);
  assert.deepEqual(vectors[0], vectors[1]);
  const norm = Math.hypot(...vectors[0]);
  assert.ok(Math.abs(norm - 1) < 1e-4, `unit length, got ${norm}`);
  assert.notDeepEqual(vectors[0], vectors[2]);
});

test("maxTokens cuts a text and info says what each vector covers, as the engine's embedDetailed", async () => {
  const engine = new bindings.TernflowEngine(new Uint8Array(modelBytes));
  const long = "edge windows pooled and cut ".repeat(50);
  const texts = [long, "short edge text"];
  for (const maxTokens of [undefined, 9]) {
    const r = await post({ texts, maxTokens });
    assert.equal(r.status, 200);
    const { vectors, info } = await r.json();
    texts.forEach((t, i) => {
      const want = engine.embedDetailed(t, maxTokens);
      assert.deepEqual(vectors[i], Array.from(want.vector), `${maxTokens} text ${i}`);
      assert.deepEqual(info[i], { tokens: want.tokens, chunks: want.chunks, truncated: want.truncated });
    });
    assert.equal(info[0].truncated, maxTokens !== undefined);
  }
  // the cut vector is cached apart: asked again whole, the text is not served the cut one
  const again = await (await post({ texts: [long] })).json();
  assert.deepEqual(again.vectors[0], Array.from(engine.embed(long)));
  assert.ok(again.info[0].chunks > 1, JSON.stringify(again.info));
  // the message API: info only when asked (embedMany does not ask; embedDetailed does)
  const plain = await bindings.handle({ type: "embed", id: 51, texts: ["info asked?"] });
  assert.equal(plain.embeddings[0].info, undefined);
  const asked = await bindings.handle({ type: "embed", id: 52, texts: ["info asked?"], info: true, maxTokens: 1 });
  assert.deepEqual(asked.embeddings[0].info, { tokens: 1, chunks: 1, truncated: true });
  const zero = await post({ texts: ["a"], maxTokens: 0 });
  assert.equal(zero.status, 400);
  assert.equal((await zero.json()).error.code, "bad_request");
  engine.free();
});

test("malformed requests get clear errors", async () => {
  const bad = await post("{not json");
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error.code, "bad_json");
  const wrong = await post({ texts: "one string" });
  assert.equal(wrong.status, 400);
  assert.equal((await wrong.json()).error.code, "bad_request");
  const get = await handle(new Request("http://edge/embed"), {});
  assert.equal(get.status, 405);
});

test("oversized texts are refused with text_too_long", async () => {
  const r = await post({ texts: ["x".repeat(20_000)] });
  assert.equal(r.status, 413);
  assert.equal((await r.json()).error.code, "text_too_long");
});

test("a request asking for too many embed units is refused with batch_too_large", async () => {
  // 16 texts of 16 000 bytes, each within the text limit, 256 KB in all: 16 × 4 001 units, over
  // the 32 768 a request may ask for (long texts are embedded whole, a forward per window).
  const r = await post({ texts: Array(16).fill("w".repeat(16_000)) });
  assert.equal(r.status, 413);
  const e = (await r.json()).error;
  assert.equal(e.code, "batch_too_large");
  assert.match(e.message, /64016 embed units/);
});

test("the message API reports typed errors", async () => {
  const r = await bindings.handle({ type: "nope", id: 9 });
  assert.equal(r.type, "error");
  assert.equal(r.code, "bad_message");
  const start = await bindings.handle({ type: "start", id: 10 });
  assert.equal(start.type, "error");
  assert.match(start.message, /needs a server/);
});

test("unknown config keys are refused with bad_config, naming the key", async () => {
  const r = await bindings.handle({ type: "init", id: 11, config: { maxTextByte: 10 } });
  assert.equal(r.type, "error");
  assert.equal(r.code, "bad_config");
  assert.match(r.message, /maxTextByte/);
  const nested = await bindings.handle({ type: "init", id: 12, config: { retry: { maxAtempts: 1 } } });
  assert.equal(nested.code, "bad_config");
  assert.match(nested.message, /retry\.maxAtempts/);
  const typed = await bindings.handle({ type: "init", id: 13, config: { requestTimeoutMs: "soon" } });
  assert.equal(typed.code, "bad_config");
});

test("a server that never answers costs requestTimeoutMs, not forever", async () => {
  const { createServer } = await import("node:http");
  const held = [];
  const srv = createServer((req, res) => held.push(res)); // never answers
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  try {
    const init = await bindings.handle({
      type: "init", id: 20, server: { url: `http://127.0.0.1:${srv.address().port}`, token: "t" },
      config: { requestTimeoutMs: 300, retry: { baseMs: 1, maxMs: 1, maxAttempts: 1 } },
    });
    assert.equal(init.type, "ready", JSON.stringify(init));
    const t0 = Date.now();
    const r = await bindings.handle({ type: "embed", id: 21, texts: ["timeout check"] });
    const ms = Date.now() - t0;
    assert.ok(ms < 5_000, `answered in ${ms} ms`);
    assert.ok(held.length >= 1, "the server was asked");
    if (r.type === "error") assert.equal(r.code, "timeout", JSON.stringify(r));
    else assert.equal(r.embeddings[0].source, "engine", "fell back to the engine after the timeout");
  } finally {
    for (const res of held) res.destroy();
    srv.close();
    await bindings.handle({ type: "init", id: 22 });
  }
});

test("settle: one result or typed error per text; errors say whether they are retryable", async () => {
  await bindings.handle({ type: "init", id: 30 });
  const r = await bindings.handle({ type: "embed", id: 31, texts: ["fine", "x".repeat(20_000)], settle: true });
  assert.equal(r.type, "embedded");
  assert.equal(r.embeddings[0].vector.length > 0, true);
  assert.equal(r.embeddings[1].error.code, "text_too_long");
  assert.equal(r.embeddings[1].error.retryable, false);
  const whole = await bindings.handle({ type: "embed", id: 32, texts: ["fine", "x".repeat(20_000)] });
  assert.equal(whole.type, "error");
  assert.equal(whole.code, "text_too_long");
  assert.equal(whole.retryable, false);
});

test("the in-memory cache is bounded by bytes (memoryCacheBytes), least recently used out first", async () => {
  await bindings.handle({ type: "init", id: 40 });
  const probe = await bindings.handle({ type: "embed", id: 41, texts: ["probe"] });
  const dim = probe.embeddings[0].vector.length;
  // Room for two entries (key < 100 bytes + vector + the counted overhead), not three.
  const bytes = 2 * (100 + 4 * dim + 96);
  const init = await bindings.handle({ type: "init", id: 42, config: { memoryCacheBytes: bytes } });
  assert.equal(init.type, "ready", JSON.stringify(init));
  const src = async (t) => (await bindings.handle({ type: "embed", id: 43, texts: [t] })).embeddings[0].source;
  assert.equal(await src("bound one"), "engine");
  assert.equal(await src("bound two"), "engine");
  assert.equal(await src("bound two"), "local");
  assert.equal(await src("bound three"), "engine");
  assert.equal(await src("bound one"), "engine", "the least recently used was evicted");
  assert.equal(await src("bound three"), "local");
  await bindings.handle({ type: "init", id: 44 });
});

test("embedBatch answers every text in one call, equal to one embed per text", () => {
  const engine = new bindings.TernflowEngine(new Uint8Array(modelBytes));
  const texts = ["first text", "a second, longer text to embed", ""];
  const flat = engine.embedBatch(texts);
  assert.ok(flat instanceof Float32Array);
  assert.equal(flat.length, texts.length * engine.outputDim);
  texts.forEach((t, i) => {
    const one = engine.embed(t);
    assert.deepEqual(flat.subarray(i * engine.outputDim, (i + 1) * engine.outputDim), one, `text ${i}`);
  });
  assert.equal(engine.embedBatch([]).length, 0);
  engine.free();
});

test("a bundled model that is not a model answers 503 bad_model, in the contract's shape", async () => {
  const broken = createHandler({ bindings, wasmModule, modelBytes: new TextEncoder().encode("<html>not a model</html>") });
  const r = await broken(new Request("http://edge/embed", { method: "POST", body: '{"texts":["a"]}' }), {});
  assert.equal(r.status, 503);
  assert.equal(r.headers.get("content-type"), "application/json");
  const body = await r.json();
  assert.equal(body.error.code, "bad_model");
  assert.ok(body.error.message.length > 0);
});

test("the engine worker's entry reads ToEngine and answers FromEngine", () => {
  const copy = new Uint8Array(modelBytes).slice().buffer;
  const loaded = bindings.engineHandle({ type: "load", id: 1, bytes: copy });
  assert.equal(loaded.type, "loaded", JSON.stringify(loaded));
  assert.equal(loaded.id, 1);
  assert.ok(loaded.dim > 0 && loaded.memoryBytes > 0);
  const texts = ["first text", "second"];
  const r = bindings.engineHandle({ type: "embed", id: 2, texts });
  assert.equal(r.type, "embedded");
  assert.ok(r.vectors instanceof Float32Array);
  const engine = new bindings.TernflowEngine(new Uint8Array(modelBytes));
  assert.deepEqual(r.vectors, engine.embedBatch(texts), "the same bits as the engine's own batch");
  engine.free();
  const refused = bindings.engineHandle({ type: "load", id: 3, bytes: new Uint8Array([1, 2, 3]) });
  assert.equal(refused.type, "refused");
  assert.equal(refused.id, 3);
  assert.equal(bindings.engineHandle({ type: "embed", id: 4, texts: ["still the first model"] }).type, "embedded");
  const unknown = bindings.engineHandle({ type: "nope" });
  assert.equal(unknown.type, "broken");
  assert.match(unknown.message, /not an engine message/);
});

test("a body over the contract's bound is refused with 413 too_large, declared or not", async () => {
  const max = bindings.maxBodyBytes();
  assert.equal(max, 1 << 20);
  const big = JSON.stringify({ texts: ["x".repeat(max)] });
  const declared = await handle(new Request("http://edge/embed", { method: "POST", body: big }), {});
  assert.equal(declared.status, 413);
  assert.equal((await declared.json()).error.code, "too_large");
  // A stream has no declared length: the wasm refuses it once read.
  const stream = new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode(big)); c.close(); } });
  const chunked = await handle(new Request("http://edge/embed", { method: "POST", body: stream, duplex: "half" }), {});
  assert.equal(chunked.status, 413);
  assert.equal((await chunked.json()).error.code, "too_large");
});
