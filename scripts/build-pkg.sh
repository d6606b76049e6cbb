#!/usr/bin/env bash
# Builds the npm package in pkg/: the wasm (wasm-pack, --target web), the thin JS glue from www/,
# its TypeScript declarations, the npm README (www/README.md) and the default model, and prints
# the sizes that ship.
# Usage: scripts/build-pkg.sh [MODEL_FILE]   (default: models/ternlight-int4.bin)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-models/ternlight-int4.bin}

wasm-pack --log-level warn build --release --target web --mode no-install --out-dir pkg

# wasm-opt -O3 from npm `binaryen@132` (root package.json; never Debian's binaryen 108, whose
# output fails at init), then a check that the vectors did not change by one bit.
# TERNFLOW_WASM_OPT=0 skips it.
if [ "${TERNFLOW_WASM_OPT:-1}" != 0 ]; then
  WASM_OPT=node_modules/.bin/wasm-opt
  [ -x "$WASM_OPT" ] || { echo "build-pkg: $WASM_OPT missing: run scripts/setup.sh" >&2; exit 1; }
  "$WASM_OPT" --version | grep -q 'version 132' ||
    { echo "build-pkg: expected wasm-opt 132, got: $("$WASM_OPT" --version)" >&2; exit 1; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cp pkg/ternflow_bg.wasm "$tmp/unopt.wasm"
  "$WASM_OPT" -O3 "$tmp/unopt.wasm" -o pkg/ternflow_bg.wasm
  if [ -f "$MODEL" ]; then
    node scripts/same-vectors.mjs pkg "$tmp/unopt.wasm" pkg/ternflow_bg.wasm "$MODEL"
  fi
  printf 'build-pkg: wasm-opt -O3: %d -> %d bytes\n' "$(wc -c < "$tmp/unopt.wasm")" "$(wc -c < pkg/ternflow_bg.wasm)"
fi
# The engine worker imports its own copy of the wasm-bindgen glue (see www/engine-worker.js).
cp pkg/ternflow.js pkg/engine-glue.js
cp www/worker.js www/engine-worker.js www/client.js www/common.js www/node.js www/runtime.js www/index.d.ts www/common.d.ts www/node.d.ts www/runtime.d.ts pkg/
cp www/README.md pkg/README.md
mkdir -p pkg/edge && cp www/edge/*.mjs www/edge/*.d.mts pkg/edge/
# wasm-bindgen declares `[Symbol.dispose]`, which breaks strict TypeScript consumers whose `lib`
# lacks `esnext.disposable`; the method stays in the JS (where the runtime has it).
sed -i '/\[Symbol\.dispose\]()/d' pkg/ternflow.d.ts
if [ -f "$MODEL" ]; then
  cp "$MODEL" pkg/ternlight-int4.bin
  sha=$(sha256sum "$MODEL" | cut -d' ' -f1)
  # The default model is checked against its SHA-256 before it is used or stored.
  sed -i "s/^const DEFAULT_MODEL_SHA256 = null;/const DEFAULT_MODEL_SHA256 = \"$sha\";/" pkg/client.js
  grep -q "DEFAULT_MODEL_SHA256 = \"$sha\"" pkg/client.js || { echo "build-pkg: could not set the model's SHA-256" >&2; exit 1; }
else
  echo "build-pkg: $MODEL not found; the package ships without a default model" >&2
fi

# Entries by runtime: browsers and Web Workers get the worker client, workerd the edge module
# (wasm and model bundled), Node the synchronous engine. Every entry has its types.
node - <<'JS'
const fs = require("fs");
const p = JSON.parse(fs.readFileSync("pkg/package.json", "utf8"));
const browser = { types: "./index.d.ts", default: "./client.js" };
const node = { types: "./node.d.ts", default: "./node.js" };
const edge = { types: "./edge/worker.d.mts", default: "./edge/worker.mjs" };
// Deno and Bun: the Node API and the edge handler in one module (they take neither the workerd
// entry's .wasm/.bin imports nor, for `export default`, the Node entry).
const runtime = { types: "./runtime.d.ts", default: "./runtime.js" };
p.main = "client.js";
p.module = "client.js";
p.types = "index.d.ts";
p.type = "module";
p.exports = {
  ".": { workerd: edge, deno: runtime, bun: runtime, browser, worker: browser, node, default: browser },
  "./node": node,
  "./edge": { workerd: edge, deno: runtime, bun: runtime, default: edge },
  "./edge/remote-model": { types: "./edge/worker-remote-model.d.mts", default: "./edge/worker-remote-model.mjs" },
  "./edge/handler": { types: "./edge/handler.d.mts", default: "./edge/handler.mjs" },
  "./wasm": { types: "./ternflow.d.ts", default: "./ternflow.js" },
  "./worker.js": "./worker.js",
  "./engine-worker.js": "./engine-worker.js",
  "./ternflow_bg.wasm": "./ternflow_bg.wasm",
  "./ternlight-int4.bin": "./ternlight-int4.bin",
  "./package.json": "./package.json",
};
const extra = ["client.js", "common.js", "node.js", "runtime.js", "runtime.d.ts", "worker.js", "engine-worker.js", "engine-glue.js", "index.d.ts", "common.d.ts", "node.d.ts", "edge/"];
if (fs.existsSync("pkg/ternlight-int4.bin")) extra.push("ternlight-int4.bin");
p.files = Array.from(new Set([...(p.files || []), ...extra]));
// The worker bootstraps install `onmessage`; everything else is side-effect free.
p.sideEffects = ["./worker.js", "./engine-worker.js"];
p.engines = { node: ">=20.19" };
fs.writeFileSync("pkg/package.json", JSON.stringify(p, null, 2) + "\n");
JS

wasm=pkg/ternflow_bg.wasm
gz_wasm=$(gzip -9 -c "$wasm" | wc -c)
gz_all=0
for f in $(node -e 'console.log(require("./pkg/package.json").files.join(" "))'); do
  for g in $(find "pkg/$f" -type f 2>/dev/null); do
    gz_all=$((gz_all + $(gzip -9 -c "$g" | wc -c)))
  done
done
printf 'package: wasm %d bytes (%d gzipped); all shipped files %d bytes gzipped\n' \
  "$(wc -c < "$wasm")" "$gz_wasm" "$gz_all"
