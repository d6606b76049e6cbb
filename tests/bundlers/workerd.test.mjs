// The edge Workers (the package's `workerd` entries) bundled by esbuild and run in real workerd
// (npm `workerd` ships the runtime): cold start, embed, the in-isolate cache on repeat, errors;
// the Free-plan build fetching its model at run time (and refusing a bad one); and, when
// scripts/test.sh started one (TERNFLOW_TEST_SERVER), the remote cache of a real
// `ternflow serve`, seen from a fresh isolate.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createReadStream, statSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { WORK } from "./lib.mjs";
import { VARIANTS, buildEdge, edgeUploads, post, startWorkerd } from "./edge.mjs";

const dir = join(WORK, "dist-workerd");
const [bundled, remoteModel] = VARIANTS;
const MIB = 1048576;

before(() => buildEdge(dir));

describe("edge Worker in workerd", () => {
  test("bundled model: cold start, embed, in-isolate cache hit on repeat, typed errors", async () => {
    const w = await startWorkerd(dir, bundled);
    try {
      assert.equal(w.first.status, 200, JSON.stringify(w.first.body) + w.log());
      assert.deepEqual(w.first.body.sources, ["engine"]);
      assert.equal(w.first.body.vectors[0].length, 384);
      const again = await post(w.url, ["hello edge"]);
      assert.deepEqual(again.body.sources, ["local"], "the repeat comes from the isolate's cache");
      assert.deepEqual(again.body.vectors, w.first.body.vectors);
      const big = await post(w.url, ["x".repeat(20_000)]);
      assert.equal(big.status, 413);
      assert.equal(big.body.error.code, "text_too_long");
      const bad = await fetch(w.url, { method: "POST", body: "{nope" });
      assert.equal((await bad.json()).error.code, "bad_json");
      console.log(`figures workerd: cold start (spawn to first vector) ${w.coldMs.toFixed(0)} ms`);
    } finally {
      await w.stop();
    }
  });

  test("queue(batch): good messages acked, a poisoned one reported (acked, not retried forever), a retryable failure retried", async () => {
    const w = await startWorkerd(dir, bundled);
    const deliver = async (messages) =>
      (await fetch(w.queueUrl, { method: "POST", body: JSON.stringify({ messages }) })).json();
    try {
      const r = await deliver([
        { id: "m1", body: { texts: ["queued text one"] }, attempts: 1 },
        { id: "m2", body: { texts: [42] }, attempts: 1 },
        { id: "m3", body: "queued text two", attempts: 1 },
        { id: "m4", body: { texts: ["x".repeat(20_000)] }, attempts: 1 },
      ]);
      assert.equal(r.outcome, "ok", JSON.stringify(r) + w.log());
      assert.deepEqual([...r.explicitAcks].sort(), ["m1", "m2", "m3", "m4"], JSON.stringify(r));
      assert.deepEqual(r.retryMessages, []);
      assert.match(w.log(), /queue_message_failed.*"id":"m2".*bad_request/);
      assert.match(w.log(), /queue_message_failed.*"id":"m4".*text_too_long/);
      // The queued texts went through the pipeline: a request for one is a cache hit.
      const hit = await post(w.url, ["queued text one"]);
      assert.deepEqual(hit.body.sources, ["local"]);
    } finally {
      await w.stop();
    }
    // A model that cannot load yet fails the whole batch retryably: every message is retried.
    const down = await startWorkerd(dir, remoteModel, { TERNFLOW_MODEL_URL: "http://127.0.0.1:9/none.bin" });
    try {
      const r = await (await fetch(down.queueUrl, {
        method: "POST",
        body: JSON.stringify({ messages: [{ id: "a", body: "x", attempts: 1 }, { id: "b", body: "y", attempts: 1 }] }),
      })).json();
      assert.equal(r.retryBatch?.retry, true, JSON.stringify(r));
    } finally {
      await down.stop();
    }
  });

  test("the Free-plan build fits in 3 MiB gzipped; the bundled one in 10 MiB", () => {
    const [b, r] = edgeUploads({ dir, variants: VARIANTS });
    assert.ok(r.gzipped < 3 * MIB, `${r.name}: ${r.gzipped}`);
    assert.ok(b.gzipped < 10 * MIB, `${b.name}: ${b.gzipped}`);
    console.log(`figures workerd: upload gzipped ${b.name} ${b.gzipped} B, ${r.name} ${r.gzipped} B`);
  });

  describe("model at run time", () => {
    let srv, base, hits;
    before(async () => {
      hits = [];
      srv = createServer((req, res) => {
        hits.push(req.url);
        if (req.url === "/model.bin") {
          const f = join(WORK, "../node_modules/ternflow/ternlight-int4.bin");
          res.writeHead(200, { "content-length": statSync(f).size });
          createReadStream(f).pipe(res);
        } else if (req.url === "/page.html") {
          res.writeHead(200, { "content-type": "text/html" }).end("<!doctype html>");
        } else {
          res.writeHead(404).end();
        }
      });
      await new Promise((r) => srv.listen(0, "127.0.0.1", r));
      base = `http://127.0.0.1:${srv.address().port}`;
    });
    after(() => srv.close());

    test("fetches the model on the first request, then embeds", async () => {
      const w = await startWorkerd(dir, remoteModel, { TERNFLOW_MODEL_URL: `${base}/model.bin` });
      try {
        assert.equal(w.first.status, 200, JSON.stringify(w.first.body) + w.log());
        assert.equal(w.first.body.vectors[0].length, 384);
        const again = await post(w.url, ["hello edge"]);
        assert.deepEqual(again.body.sources, ["local"]);
        assert.equal(hits.filter((h) => h === "/model.bin").length, 1, "downloaded once per isolate");
      } finally {
        await w.stop();
      }
    });

    test("a model URL that 404s or is not a model is a typed 503, not a crash", async () => {
      const missing = await startWorkerd(dir, remoteModel, { TERNFLOW_MODEL_URL: `${base}/nope.bin` });
      try {
        assert.equal(missing.first.status, 503);
        assert.equal(missing.first.body.error.code, "http_404", JSON.stringify(missing.first.body));
      } finally {
        await missing.stop();
      }
      const html = await startWorkerd(dir, remoteModel, { TERNFLOW_MODEL_URL: `${base}/page.html` });
      try {
        assert.equal(html.first.body.error.code, "bad_model", JSON.stringify(html.first.body));
        assert.match(html.first.body.error.message, /page\.html/);
      } finally {
        await html.stop();
      }
    });
  });

  test("remote cache of a real ternflow serve, seen from a fresh isolate", { skip: !process.env.TERNFLOW_TEST_SERVER && "no TERNFLOW_TEST_SERVER (scripts/test.sh starts one)" }, async () => {
    const env = { TERNFLOW_SERVER: process.env.TERNFLOW_TEST_SERVER, TERNFLOW_TOKEN: process.env.TERNFLOW_TEST_TOKEN ?? "" };
    const text = `remote cache check ${Date.now()} ${Math.random()}`;
    const a = await startWorkerd(dir, bundled, env, [text]);
    try {
      assert.equal(a.first.status, 200, JSON.stringify(a.first.body) + a.log());
      assert.deepEqual(a.first.body.sources, ["engine"]);
    } finally {
      await a.stop();
    }
    const b = await startWorkerd(dir, bundled, env, [text]);
    try {
      assert.equal(b.first.status, 200, JSON.stringify(b.first.body));
      assert.deepEqual(b.first.body.sources, ["remote"], "a new isolate finds it in the server's cache");
      assert.deepEqual(b.first.body.vectors, a.first.body.vectors);
    } finally {
      await b.stop();
    }
  });
});
