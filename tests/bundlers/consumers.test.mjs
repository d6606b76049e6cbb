// Node and TypeScript consumers of the packed package, installed unchanged: Node ESM and CJS get
// the synchronous engine (`node` condition); strict `tsc --noEmit` (no skipLibCheck) accepts the
// declarations of every entry and refuses misuse (`@ts-expect-error` lines must error).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { BIN, HERE, sh } from "./lib.mjs";

const node = async (file) => JSON.parse(await sh(process.execPath, [join(HERE, "node", file)]));

test("Node ESM: import gives the synchronous engine; EmbeddingWorker is a typed error", async () => {
  const r = await node("esm.mjs");
  assert.equal(r.dim, 384);
  assert.equal(r.isF32, true);
  assert.ok(Math.abs(r.norm - 1) < 1e-4);
  assert.ok(Math.abs(r.self - 1) < 1e-6, "deterministic");
  assert.equal(r.top.text, "the kitten rests on the rug");
  assert.equal(r.top.sim, r.top.score);
  assert.deepEqual(r.workerError, { code: "unsupported_runtime", typed: true });
  assert.equal(r.badModel, "bad_model");
});

test("Node CJS: require gives the same engine and vectors", async () => {
  const [esm, cjs] = [await node("esm.mjs"), await node("cjs.cjs")];
  assert.equal(cjs.dim, 384);
  assert.equal(cjs.same, true);
  assert.equal(cjs.modelId, esm.modelId);
});

test("strict tsc: browser and edge entries (Bundler resolution)", async () => {
  await sh(join(BIN, "tsc"), ["-p", join(HERE, "ts/tsconfig.json")]);
});

test("strict tsc: Node entry (NodeNext resolution)", async () => {
  await sh(join(BIN, "tsc"), ["-p", join(HERE, "ts/tsconfig.node.json")]);
});

test("strict tsc: the Cloudflare Workers TypeScript template with the README's edge lines", async () => {
  // The fixture is the template's tsconfig.json and src/index.ts with the README's lines as they are.
  const readme = readFileSync(join(HERE, "node_modules/ternflow/README.md"), "utf8");
  const src = readFileSync(join(HERE, "workers-ts/src/index.ts"), "utf8");
  for (const line of [
    'import ternflow from "ternflow/edge";',
    "fetch: (request, env) => ternflow.fetch(request, env),",
    "async queue(batch, env) { await ternflow.queue(batch, env); },",
  ]) {
    assert.ok(readme.includes(line), `the README has ${line}`);
    assert.ok(src.includes(line), `the fixture has ${line}`);
  }
  await sh(join(BIN, "tsc"), ["-p", join(HERE, "workers-ts/tsconfig.json")]);
});
