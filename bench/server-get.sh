#!/usr/bin/env bash
# Cache GET through a real `ternflow serve` with wrk (16 connections, 5 s, a 384-d vector),
# printing requests/s. The entry is written as a worker would: take the lock, PUT with its fence.
#   bench/server-get.sh [BIN] [STORE]     e.g. bench/server-get.sh target/release/ternflow redis://127.0.0.1:16399/
# Needs wrk (apt-get install wrk), curl and python3. Loopback only.
set -euo pipefail
BIN=${1:-target/release/ternflow}
STORE=${2:-embedded}
PORT=${PORT:-18788}
DATA=$(mktemp -d)
TERNFLOW_TOKENS=bench:admin RUST_LOG=warn "$BIN" serve --addr "127.0.0.1:$PORT" --store "$STORE" \
  --data-dir "$DATA" >/dev/null 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; rm -rf "$DATA"' EXIT
for _ in $(seq 100); do curl -fs "localhost:$PORT/healthz" >/dev/null && break; sleep 0.1; done
KEY=0123456789abcdef:bench
AUTH='authorization: Bearer bench'
VEC=$(python3 -c "import base64,struct;print(base64.b64encode(struct.pack('<384f',*[0.1]*384)).decode())")
FENCE=$(curl -fsS -X POST "localhost:$PORT/v1/locks/$KEY" -H "$AUTH" |
  python3 -c "import json,sys;print(json.load(sys.stdin)['fence'])")
curl -fsS -X PUT "localhost:$PORT/v1/cache/$KEY" -H "$AUTH" -H 'content-type: application/json' \
  -d "{\"model_id\":\"0123456789abcdef\",\"vector\":\"$VEC\",\"fence\":$FENCE}" >/dev/null
wrk -t2 -c16 -d5s -H "Authorization: Bearer bench" "http://127.0.0.1:$PORT/v1/cache/$KEY" |
  awk '/Requests\/sec/ {print "cache GET through the server ('"$STORE"'): " $2 " req/s"}'
