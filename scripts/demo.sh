#!/usr/bin/env bash
# The main job, end to end: build the npm package (wasm + JS + model) and the `ternflow` binary,
# start the server, enqueue texts, run a Web Worker in headless Chromium that pulls the jobs,
# embeds them (caches, lock, engine), acks them, then answers a semantic search. Ends with the
# server's stats.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

MODEL=models/ternlight-int4.bin
echo "==> native binary"
cargo build --release --locked -q -p ternflow-cli
BIN=$(realpath "${CARGO_TARGET_DIR:-target}")/release/ternflow
WORK=$(mktemp -d)
if [ ! -f "$MODEL" ]; then
  echo "demo: $MODEL is missing: using a generated random model (search results will be meaningless)"
  MODEL=$WORK/random-int4.bin
  "$BIN" gen-model "$MODEL" >/dev/null
fi

echo "==> npm package (pkg/)"
scripts/build-pkg.sh "$MODEL"

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
TOKEN="demo-$RANDOM$RANDOM"
"$BIN" serve --addr "127.0.0.1:$PORT" --data-dir "$WORK/data" --model "$MODEL" \
  --insecure-dev-token "$TOKEN" --cors-allow-localhost >"$WORK/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
echo "==> server on http://127.0.0.1:$PORT (embedded store in $WORK/data)"

echo "==> enqueue"
N=$(grep -c . www/demo/texts.txt)
"$BIN" enqueue www/demo/texts.txt --server "http://127.0.0.1:$PORT" --token "$TOKEN"

echo "==> Web Worker in headless Chromium"
node scripts/demo-browser.mjs "http://127.0.0.1:$PORT" "$TOKEN" "$N"

echo "==> server stats"
"$BIN" stats --server "http://127.0.0.1:$PORT" --token "$TOKEN"
echo "demo: ok"
