// The engine's wasm kernels, in the wasm the package ships (a dev build in pkg-test/, simd128 as
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
  const out = execFileSync(process.execPath, ["bench/engine-check.mjs", "--pkg", "pkg-test"], { cwd: root, encoding: "utf8" });
  const m = out.match(/^kernel (\S+): self-test (\d+) exact comparisons passed; (\d+) sentences vs numpy reference, min cosine ([\d.]+)/m);
  assert.ok(m, `unexpected output: ${out}`);
  assert.equal(m[1], "simd128");
  // 200 cases × (scalar, scalar over pairs, simd128 from i8 rows, simd128 over pairs), plus the
  // extremes: fewer means cases or kernels went missing.
  assert.ok(Number(m[2]) >= 800, `only ${m[2]} comparisons`);
  assert.equal(Number(m[3]), 260);
  assert.ok(Number(m[4]) >= 0.9999, `min cosine ${m[4]}`);
});
