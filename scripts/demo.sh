#!/usr/bin/env bash
# The main job: build the wasm package and the native `ternflow` binary, then start the server and
# show that both halves run. (Grows into the full queue → worker → cache demo as the worker lands.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

echo "==> wasm package (pkg/)"
wasm-pack --log-level warn build --release --target web --mode no-install --out-dir pkg
ls -l pkg/*.wasm

echo "==> native binary"
cargo build --release --locked -p ternflow-cli
BIN=target/release/ternflow
"$BIN" --version

if "$BIN" serve --help >/dev/null 2>&1; then
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  DATA=$(mktemp -d)
  "$BIN" serve --addr "127.0.0.1:$PORT" --data-dir "$DATA" --insecure-dev-token dev &
  SERVER=$!
  trap 'kill $SERVER 2>/dev/null; rm -rf "$DATA"' EXIT
  for _ in $(seq 50); do curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
  echo "==> server on 127.0.0.1:$PORT"
  curl -fsS "http://127.0.0.1:$PORT/healthz"; echo
fi
echo "demo: ok"
