#!/usr/bin/env bash
# Builds the WASI components (crates/wasi, wasm32-wasip2, release) into ${CARGO_TARGET_DIR:-target}/wasi/:
#   ternflow-wasi-worker.wasm          the long-running worker, engine inside (wasmtime run -S http)
#   ternflow-wasi-worker-backend.wasm  the same worker, backend-only (embeds through POST /v1/embed)
#   ternflow-wasi-handler.wasm         the HTTP handler (wasmtime serve -S cli)
#   ternflow-wasi-worker-p3.wasm       the worker on WASI 0.3 (wasmtime run -S p3 -S http)
#   ternflow-wasi-handler-p3.wasm      the handler on WASI 0.3 (wasmtime serve -S p3 -S cli)
# and prints their sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-target}
OUT=$TARGET/wasi
REL=$TARGET/wasm32-wasip2/release
mkdir -p "$OUT"
cargo build --release --locked -q --target wasm32-wasip2 -p ternflow-wasi
cp "$REL/ternflow-wasi-worker.wasm" "$OUT/ternflow-wasi-worker.wasm"
cp "$REL/ternflow-wasi-handler.wasm" "$OUT/ternflow-wasi-handler.wasm"
cargo build --release --locked -q --target wasm32-wasip2 -p ternflow-wasi --no-default-features \
  --features p2 --bin ternflow-wasi-worker
cp "$REL/ternflow-wasi-worker.wasm" "$OUT/ternflow-wasi-worker-backend.wasm"
cargo build --release --locked -q --target wasm32-wasip2 -p ternflow-wasi --no-default-features \
  --features engine,p3
cp "$REL/ternflow-wasi-worker.wasm" "$OUT/ternflow-wasi-worker-p3.wasm"
cp "$REL/ternflow-wasi-handler.wasm" "$OUT/ternflow-wasi-handler-p3.wasm"
for f in ternflow-wasi-worker ternflow-wasi-worker-backend ternflow-wasi-handler ternflow-wasi-worker-p3 ternflow-wasi-handler-p3; do
  printf '[build-wasi] %-30s %9d bytes\n' "$f.wasm" "$(stat -c %s "$OUT/$f.wasm")"
done
