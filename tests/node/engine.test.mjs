// The engine's wasm kernels, in the wasm the package ships (pkg/, built by scripts/build-pkg.sh, simd128 as
// every build): bench/engine-check.mjs checks the scalar kernel over row pairs and the simd128
// kernel (which always runs over row pairs; given `i8` rows it packs them first) against the
// scalar kernel exactly, and the whole forward pass against the numpy reference on the committed
// fixture. Run here, so its check is part of the test command.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../../", import.meta.url));

test("every wasm kernel equals the scalar one exactly, and the forward pass matches numpy", () => {
  // Exits non-zero on a kernel mismatch or a cosine below 0.9999.
  const out = execFileSync(process.execPath, ["bench/engine-check.mjs", "--pkg", "pkg"], { cwd: root, encoding: "utf8" });
  const m = out.match(/^kernel (\S+): self-test (\d+) exact comparisons passed; (\d+) sentences vs numpy reference, min cosine ([\d.]+)/m);
  assert.ok(m, `unexpected output: ${out}`);
  assert.equal(m[1], "simd128");
  // 200 cases × (scalar, scalar over pairs, simd128 from i8 rows, simd128 over pairs), plus the
  // extremes: fewer means cases or kernels went missing.
  assert.ok(Number(m[2]) >= 800, `only ${m[2]} comparisons`);
  assert.equal(Number(m[3]), 260);
  assert.ok(Number(m[4]) >= 0.9999, `min cosine ${m[4]}`);
});

// The determinism invariant in wasm: the shipped wasm (simd128) gives the same bits as every
// native kernel for both shipped models on the 510-text corpus (crates/engine/tests/determinism.rs
// checks the native kernels against the same committed digests).
test("the wasm engine gives the native kernels' bits for the shipped models", async () => {
  const { readFileSync } = await import("node:fs");
  const { createHash } = await import("node:crypto");
  const { pathToFileURL } = await import("node:url");
  const pkg = `${root}pkg/`;
  const wasm = await import(pathToFileURL(`${pkg}ternflow.js`).href);
  await wasm.default({ module_or_path: readFileSync(`${pkg}ternflow_bg.wasm`) });
  const data = `${root}crates/engine/tests/data/`;
  const corpus = readFileSync(`${data}determinism_corpus.txt`, "utf8").replace(/\n$/, "").split("\n");
  assert.equal(corpus.length, 510);
  const digests = Object.fromEntries(readFileSync(`${data}determinism.sha256`, "utf8").trim().split("\n")
    .map((l) => l.trim().split(/\s+/)).map(([d, name]) => [name, d]));
  for (const name of ["ternlight-int4.bin", "ternlight-ternary.bin"]) {
    const engine = new wasm.TernflowEngine(new Uint8Array(readFileSync(`${root}models/${name}`)));
    const h = createHash("sha256");
    for (const text of corpus) {
      const v = engine.embed(text);
      h.update(Buffer.from(v.buffer, v.byteOffset, v.byteLength));
    }
    assert.equal(h.digest("hex"), digests[name], `${name} (kernel ${engine.kernel})`);
  }
});

// Long texts in the wasm API: embedDetailed says what the vector covers; maxTokens cuts the text.
test("embedDetailed embeds a long text whole and maxTokens cuts it", async () => {
  const { readFileSync } = await import("node:fs");
  const { pathToFileURL } = await import("node:url");
  const pkg = `${root}pkg/`;
  const wasm = await import(pathToFileURL(`${pkg}ternflow.js`).href);
  await wasm.default({ module_or_path: readFileSync(`${pkg}ternflow_bg.wasm`) });
  const engine = new wasm.TernflowEngine(readFileSync(`${root}models/ternlight-int4.bin`));
  const long = "the quick brown fox jumps over the lazy dog ".repeat(40); // 360 word pieces
  const whole = engine.embedDetailed(long);
  assert.deepEqual([whole.tokens, whole.chunks, whole.truncated], [360, 3, false]);
  assert.deepEqual(Array.from(whole.vector), Array.from(engine.embed(long)), "embed is embedDetailed without a limit");
  const cut = engine.embedDetailed(long, 126);
  assert.deepEqual([cut.tokens, cut.chunks, cut.truncated], [126, 1, true]);
  assert.notDeepEqual(Array.from(cut.vector), Array.from(whole.vector));
  const short = engine.embedDetailed("hello world", 126);
  assert.deepEqual([short.tokens, short.chunks, short.truncated], [2, 1, false]);
  assert.deepEqual(Array.from(short.vector), Array.from(engine.embed("hello world")));
});
