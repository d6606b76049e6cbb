// The packed package, installed unchanged, under Deno and Bun (from npm: `deno`, `bun`): the Node
// API (`loadEngine`, `embed`, `similar`) and the edge handler (the default export under their
// `deno` / `bun` conditions) called directly, behind `deno serve` and behind `Bun.serve`; every
// vector bit-identical to Node's. Prints the time to the engine and to the first vector.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { BIN, HERE, sh, freePort } from "./lib.mjs";

const R = join(HERE, "runtimes");
const run = async (cmd, args) => JSON.parse((await sh(cmd, args, { cwd: HERE })).trim().split("\n").at(-1));
const DENO = [join(BIN, "deno"), ["run", "--allow-read", "--allow-env"]];
const BUN = [join(BIN, "bun"), ["run"]];

let nodeRef;
async function reference() {
  nodeRef ??= await run(process.execPath, [join(R, "engine.mjs")]);
  return nodeRef;
}

/** Starts a server process and POSTs to it until it answers (or 30 s pass). */
async function serveAndPost(cmd, args, port, env = {}) {
  const proc = spawn(cmd, args, { cwd: HERE, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } });
  let output = "";
  proc.stdout.on("data", (d) => (output += d));
  proc.stderr.on("data", (d) => (output += d));
  const t0 = performance.now();
  try {
    for (let i = 0; i < 600; i++) {
      try {
        const r = await fetch(`http://127.0.0.1:${port}/`, {
          method: "POST",
          body: JSON.stringify({ texts: ["hello from a runtime"] }),
        });
        return { status: r.status, body: await r.json(), firstVectorMs: performance.now() - t0 };
      } catch {}
      if (proc.exitCode !== null) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`${cmd} ${args.join(" ")} did not serve:\n${output}`);
  } finally {
    proc.kill();
  }
}

function checkEngine(r, ref, who) {
  assert.equal(r.modelId, ref.modelId, who);
  assert.equal(r.vector.length, 384, who);
  assert.deepEqual(r.vector, ref.vector, `${who}: the vector is bit-identical to Node's`);
  assert.equal(r.top, "the kitten rests on the rug", who);
  assert.equal(r.badModel, "bad_model:true", `${who}: a bad model is a TernflowError`);
}

function checkEdge(r, ref, who) {
  assert.equal(r.status, 200, `${who}: ${JSON.stringify(r.body)}`);
  assert.deepEqual(r.body.vectors[0], ref.vector, `${who}: the handler's vector is bit-identical to Node's engine's`);
}

for (const [name, [cmd, runArgs]] of [["deno", DENO], ["bun", BUN]]) {
  describe(name, () => {
    test(`${name}: the Node API (named exports of "ternflow")`, async () => {
      const ref = await reference();
      const r = await run(cmd, [...runArgs, join(R, "engine.mjs")]);
      checkEngine(r, ref, name);
      console.log(`figures ${name}: engine ready ${r.readyMs.toFixed(0)} ms, first vector ${r.firstVectorMs.toFixed(0)} ms (node: ${ref.readyMs.toFixed(0)} / ${ref.firstVectorMs.toFixed(0)} ms)`);
    });

    for (const spec of ["ternflow", "ternflow/edge"]) {
      test(`${name}: the edge handler, default export of "${spec}"`, async () => {
        const ref = await reference();
        const r = await run(cmd, [...runArgs, join(R, "edge.mjs"), spec]);
        checkEdge(r, ref, `${name} ${spec}`);
        assert.deepEqual(r.body.sources, ["engine"]);
        assert.deepEqual(r.againSources, ["local"], "the repeat comes from the isolate's memory");
        assert.equal(r.badStatus, 400);
        assert.equal(r.badCode, "bad_request");
        console.log(`figures ${name} ${spec}: import to first vector ${r.firstVectorMs.toFixed(0)} ms`);
      });
    }
  });
}

test("deno serve: the default export is the server", async () => {
  const ref = await reference();
  const port = await freePort();
  const r = await serveAndPost(join(BIN, "deno"), ["serve", "--port", String(port), "--host", "127.0.0.1", "--allow-read", "--allow-env", join(R, "deno-serve.mjs")], port);
  checkEdge(r, ref, "deno serve");
  console.log(`figures deno serve: process start to first vector ${r.firstVectorMs.toFixed(0)} ms`);
});

test("Bun.serve with the default export's fetch", async () => {
  const ref = await reference();
  const port = await freePort();
  const r = await serveAndPost(join(BIN, "bun"), ["run", join(R, "bun-serve.mjs")], port, { PORT: String(port) });
  checkEdge(r, ref, "Bun.serve");
  console.log(`figures Bun.serve: process start to first vector ${r.firstVectorMs.toFixed(0)} ms`);
});

test("deno without --allow-read: the handler answers 503 naming the file and the flag", async () => {
  const r = await run(join(BIN, "deno"), ["run", "--allow-env", join(R, "edge.mjs")]);
  assert.equal(r.status, 503, JSON.stringify(r));
  assert.equal(r.body.error.code, "not_found");
  assert.match(r.body.error.message, /ternflow_bg\.wasm.*--allow-read/);
});
