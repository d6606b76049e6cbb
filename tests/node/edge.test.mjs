// The wasm outside a browser: Node has neither Web Workers nor IndexedDB nor the Cache API, like an
// edge isolate. Runs the edge handler (www/edge/handler.mjs) over a dev build in pkg-test/.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as bindings from "../../pkg-test/ternflow.js";
import { createHandler } from "../../www/edge/handler.mjs";

const root = new URL("../../", import.meta.url);
const wasmModule = new WebAssembly.Module(readFileSync(new URL("pkg-test/ternflow_bg.wasm", root)));
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

test("the message API reports typed errors", async () => {
  const r = await bindings.handle({ type: "nope", id: 9 });
  assert.equal(r.type, "error");
  assert.equal(r.code, "bad_message");
  const start = await bindings.handle({ type: "start", id: 10 });
  assert.equal(start.type, "error");
  assert.match(start.message, /needs a server/);
});
