#!/usr/bin/env bash
# Every engine figure of docs/engine.md in one go: native (CLI), node and headless Chromium, short
# (~14 ids) and 128-id inputs, on a generated d384 / 2-layer / 6-head / ffn 1536 / int4 model.
# Usage: bench/engine-all.sh [MODEL]   (default: generates target/bench-base-int4.tern)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-target/bench-base-int4.tern}
cargo build --release -q -p ternflow-cli
[ -f "$MODEL" ] || target/release/ternflow gen-model "$MODEL"
scripts/build-pkg.sh >/dev/null 2>&1
[ -d node_modules/playwright-core ] || npm ci --no-audit --no-fund --loglevel=error
echo "# $(date -u +%FT%TZ) $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
target/release/ternflow bench --model "$MODEL" --iters 500
node bench/engine.mjs --model "$MODEL" --iters 500
node bench/engine.mjs --model "$MODEL" --input bench/long.txt --iters 60
node bench/engine-browser.mjs --model "$MODEL" --iters 500 2>/dev/null
node bench/engine-browser.mjs --model "$MODEL" --input bench/long.txt --iters 60 2>/dev/null
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
