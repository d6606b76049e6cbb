#!/usr/bin/env bash
# Builds the npm package in pkg/: the wasm (wasm-pack, --target web), the thin JS glue from www/,
# its TypeScript declarations and the default model, and prints the sizes that ship.
# Usage: scripts/build-pkg.sh [MODEL_FILE]   (default: models/ternlight-int4.bin)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-models/ternlight-int4.bin}

wasm-pack --log-level warn build --release --target web --mode no-install --out-dir pkg
cp www/worker.js www/client.js www/index.d.ts pkg/
mkdir -p pkg/edge && cp www/edge/handler.mjs www/edge/worker.mjs pkg/edge/
if [ -f "$MODEL" ]; then
  cp "$MODEL" pkg/ternlight-int4.bin
else
  echo "build-pkg: $MODEL not found; the package ships without a default model" >&2
fi

# The package's entry is the main-thread client; the wasm-pack module stays importable.
node - <<'JS'
const fs = require("fs");
const p = JSON.parse(fs.readFileSync("pkg/package.json", "utf8"));
p.main = "client.js";
p.module = "client.js";
p.types = "index.d.ts";
p.type = "module";
p.exports = {
  ".": { types: "./index.d.ts", default: "./client.js" },
  "./wasm": "./ternflow.js",
  "./worker.js": "./worker.js",
  "./edge": "./edge/worker.mjs",
  "./edge/handler": "./edge/handler.mjs",
  "./ternlight-int4.bin": "./ternlight-int4.bin",
};
const extra = ["client.js", "worker.js", "index.d.ts", "edge/"];
if (fs.existsSync("pkg/ternlight-int4.bin")) extra.push("ternlight-int4.bin");
p.files = Array.from(new Set([...(p.files || []), ...extra]));
p.sideEffects = ["./worker.js"];
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
