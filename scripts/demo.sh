#!/usr/bin/env bash
# The main job, end to end: build the npm package (wasm + JS + model) and the `ternflow` binary,
# start `ternflow serve`, open headless Chromium with one Web Worker per core, enqueue the demo
# corpus (3 000 sentences of the Python documentation, www/demo/CORPUS.md) twice, drain it, print
# the figures, search it, and save a PNG screenshot of the live dashboard. Ends with `demo: ok`.
#
# Usage: scripts/demo.sh [--workers N] [--redis URL] [--out DIR] [--sentences N] [--bin PATH]
#   --workers N     Web Workers in the browser (default: one per core)
#   --redis URL     run on that Redis instead of the embedded store, with two `ternflow serve`
#                   processes behind the same workers (half the workers on each); the demo then
#                   prints the evidence that wake-ups and invalidations cross between them
#   --out DIR       where the screenshot and the id files go (default: a new temporary directory)
#   --sentences N   only the corpus's first N sentences (the test command's short form: 300)
#   --bin PATH      use this `ternflow` binary and the npm package already in pkg/ instead of
#                   building both (the test command has built them)
set -euo pipefail
cd "$(dirname "$0")/.."

WORKERS=$(nproc)
REDIS=""
OUT=""
SENTENCES=""
PREBUILT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) WORKERS=$2; shift 2 ;;
    --redis) REDIS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --sentences) SENTENCES=$2; shift 2 ;;
    --bin) PREBUILT=$2; shift 2 ;;
    *) echo "usage: scripts/demo.sh [--workers N] [--redis URL] [--out DIR] [--sentences N] [--bin PATH]" >&2; exit 2 ;;
  esac
done

scripts/setup.sh demo   # only what the demo uses (no Wasmtime, no fixtures)

MODEL=models/ternlight-int4.bin
CORPUS=www/demo/corpus.txt
# Deliveries before a job is dead-lettered, given to the servers and to the driver, which follows
# the redriven poison job through exactly this many attempts.
MAX_ATTEMPTS=5
[ -f "$MODEL" ] || { echo "demo: $MODEL is missing (it is part of the repository)" >&2; exit 1; }
if [ -n "$PREBUILT" ]; then
  BIN=$(realpath "$PREBUILT")
  [ -x "$BIN" ] || { echo "demo: --bin $PREBUILT is not an executable" >&2; exit 1; }
  [ -f pkg/client.js ] && [ -f pkg/ternflow_bg.wasm ] && [ -f pkg/ternlight-int4.bin ] ||
    { echo "demo: --bin needs the npm package in pkg/ (scripts/build-pkg.sh)" >&2; exit 1; }
  echo "==> using $BIN and the npm package in pkg/"
else
  echo "==> native binary"
  cargo build --release --locked -q -p ternflow-cli
  BIN=$(realpath "${CARGO_TARGET_DIR:-target}")/release/ternflow
  echo "==> npm package (pkg/)"
  scripts/build-pkg.sh "$MODEL"
fi

WORK=$(mktemp -d)
OUT=${OUT:-$(mktemp -d /tmp/ternflow-demo.XXXXXX)}
mkdir -p "$OUT"
PIDS=()
cleanup() {
  local rc=$?
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ "$rc" -ne 0 ]; then
    # What the servers said last, for the failure above.
    for f in "$WORK"/*.log; do [ -f "$f" ] && { echo "--- last lines of $(basename "$f")" >&2; tail -n 20 "$f" >&2; }; done
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
if [ -n "$SENTENCES" ]; then
  [ "$SENTENCES" -gt 0 ] 2>/dev/null || { echo "demo: --sentences wants a positive count" >&2; exit 2; }
  head -n "$SENTENCES" "$CORPUS" > "$WORK/corpus.txt"
  CORPUS=$WORK/corpus.txt
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
TOKEN="demo-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
# start_server NAME STORE_ARGS...: one `ternflow serve` on a free port; sets URL.
start_server() {
  local name=$1; shift
  local port
  port=$(free_port)
  "$BIN" serve --addr "127.0.0.1:$port" --model "$MODEL" --insecure-dev-token "$TOKEN" \
    --cors-allow-localhost --max-attempts "$MAX_ATTEMPTS" "$@" >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  URL="http://127.0.0.1:$port"
  for _ in $(seq 100); do curl -fsS "$URL/healthz" >/dev/null 2>&1 && return 0; sleep 0.1; done
  cat "$WORK/$name.log" >&2
  echo "demo: server $name did not start" >&2
  exit 1
}

SERVER_ARGS=()
if [ -z "$REDIS" ]; then
  start_server A --data-dir "$WORK/data"
  SERVER_ARGS+=(--server "$URL")
  echo "==> ternflow serve on $URL (embedded SQLite store in $WORK/data)"
else
  # A prefix of its own, so the demo never touches other data on that Redis.
  PREFIX="tf-demo-$(date +%s)-$RANDOM"
  start_server A --store "$REDIS" --redis-prefix "$PREFIX"
  SERVER_ARGS+=(--server "$URL")
  A=$URL
  start_server B --store "$REDIS" --redis-prefix "$PREFIX"
  SERVER_ARGS+=(--server "$URL")
  echo "==> two ternflow serve processes on $REDIS (prefix $PREFIX): A $A, B $URL"
fi
echo "==> open the dashboard: ${SERVER_ARGS[1]}/dashboard#token=$TOKEN"

node scripts/demo-browser.mjs "${SERVER_ARGS[@]}" --token "$TOKEN" --bin "$BIN" \
  --corpus "$CORPUS" --workers "$WORKERS" --out "$OUT" --max-attempts "$MAX_ATTEMPTS"

echo "==> server stats (A)"
"$BIN" stats --server "${SERVER_ARGS[1]}" --token "$TOKEN"
echo "demo: ok"
