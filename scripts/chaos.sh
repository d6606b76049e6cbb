#!/usr/bin/env bash
# The chaos run: 10 000 jobs, 4 browser Web Workers, two `ternflow serve` on one Redis (AOF,
# appendfsync always); a worker terminated every few seconds and restarted, Redis killed (-9)
# and restarted once, one server stopped for 5 s and restarted. Asserts every job done or
# dead-lettered with a reason and none lost, no cache write with an older fence accepted across
# the Redis restart, every done vector equal bit for bit to a fresh embed of its text; prints
# duplicates processed, recovery times and throughput over time, and saves a PNG plot of it.
# Ends with `chaos: ok`.
#
# Usage: scripts/chaos.sh [--jobs N] [--workers W] [--short] [--cluster] [--out DIR]
#   --short   the form scripts/test.sh runs: a compressed fault schedule (pass --jobs too)
#   --cluster on a Redis Cluster (3 masters + 3 replicas): the Redis fault is the queue's master
#             killed (-9), its replica taking over, the old master rejoining as a replica
set -euo pipefail
cd "$(dirname "$0")/.."
ARGS=("$@")
if [ "${TERNFLOW_SKIP_BUILD:-0}" != 1 ]; then
  scripts/setup.sh
  echo "==> native binary"
  cargo build --release --locked -q -p ternflow-cli
  echo "==> npm package (pkg/)"
  scripts/build-pkg.sh models/ternlight-int4.bin
fi
BIN=$(realpath "${CARGO_TARGET_DIR:-target}")/release/ternflow
exec node scripts/chaos.mjs --bin "$BIN" --model models/ternlight-int4.bin "${ARGS[@]}"
