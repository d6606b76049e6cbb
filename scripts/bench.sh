#!/usr/bin/env bash
# One benchmark report, every figure measured side by side in one run on this machine, written to
# docs/benchmarks.md (and printed):
#   - the worker pipeline in headless Chromium at 0 %, 50 % and 100 % cache hits against the bare
#     engine in the same run, and local hit latency (bench/worker.mjs);
#   - the server queue (no-op jobs enqueue → claim → ack) against BullMQ on the same Redis, and
#     the cache GET against raw redis-benchmark on that Redis (ternflow bench-server);
#   - the queue on the embedded store (SQLite);
#   - 10 000 tenants on one server under `ulimit -n 1024`, and a quiet tenant next to a flooding
#     one, on SQLite and on Redis (bench/tenants.sh, bench/noisy.sh);
#   - the engine natively and in node, against the reference Ternlight engine (built from the clone
#     in TERNLIGHT_DIR and measured in the same process, bench/reference.sh; else its published figures);
#   - the npm package's sizes.
# Usage: scripts/bench.sh [--out docs/benchmarks.md] [--n 600] [--share-n 2400]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=docs/benchmarks.md
N=600
SHARE_N=2400
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --n) N=$2; shift 2 ;;
    --share-n) SHARE_N=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
scripts/setup.sh >/dev/null
cargo build --release --locked -q -p ternflow-cli
scripts/build-pkg.sh >/tmp/ternflow-bench-pkg.log 2>&1 || { cat /tmp/ternflow-bench-pkg.log; exit 1; }
scripts/build-pkg.sh >/dev/null
BULL=target/bullbench
[ -d "$BULL/node_modules/bullmq" ] ||
  npm install --prefix "$BULL" --no-audit --no-fund --loglevel=error bullmq@6 ioredis@5 >/dev/null
BIN=target/release/ternflow
TMP=$(mktemp -d)
RPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" >/dev/null 2>&1 &
RPID=$!
trap 'kill $RPID 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 50); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

load() { cut -d' ' -f1-3 /proc/loadavg; }
section() { printf '\n## %s\n\n```\n' "$1"; }
endsec() { printf '```\n'; }
med() { printf '%s\n' "$@" | sort -n | sed -n "$(( ($# + 1) / 2 ))p"; }
{
  echo "# Benchmarks"
  echo
  echo "Printed by \`scripts/bench.sh\` on $(date -u +%FT%TZ): $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(free -g | awk '/Mem:/{print $2}') GiB, load average $(load) at the start."
  echo "Every ratio below compares figures measured in this run, one after the other on the same machine."
  echo "This file is the script's output; rerun it rather than editing it."

  section "Worker pipeline in headless Chromium (node bench/worker.mjs)"
  echo "# one worker: --n $N --share-n $SHARE_N --repeat 5; one per core: --n $N --share-n $((SHARE_N * $(nproc))) --repeat 5"
  # Five bare/queue pairs for the one-worker share (a run of three moves by ±10 points here), on
  # SHARE_N jobs: at ~650 embeds/s a phase of 600 lasted under a second, and its fill (start() to
  # the first result, ~90 ms: latency, not throughput) weighed ~8 % of it; 2 400 last ~4 s, as
  # 600 did when the engine ran 268/s.  The fill and the share after it are printed too.
  node bench/worker.mjs --n "$N" --share-n "$SHARE_N" --repeat 5 2>/dev/null
  # One worker per core: each engine on its worker's thread (with an engine worker each, the
  # extra threads only add switching when every core already runs an engine: docs/worker.md).
  # SHARE_N jobs per worker and five pairs, as above: 600 jobs over two workers lasted ~0.6 s,
  # a fifth of it the fill.
  per_core=$((SHARE_N * $(nproc)))
  node bench/worker.mjs --n "$N" --share-n "$per_core" --repeat 5 --workers "$(nproc)" --config '{"engineWorker":false}' 2>/dev/null \
    | grep -E "^(chromium|bare|end-to-end queue \(|  of which|CPU|server verification)"
  echo "(the same, an engine worker each:)"
  node bench/worker.mjs --n "$N" --share-n "$per_core" --repeat 5 --workers "$(nproc)" 2>/dev/null | grep -E "^(chromium|end-to-end queue \(|  of which)"
  endsec

  section "Server queue and cache on Redis vs BullMQ and redis-benchmark (same Redis)"
  echo "# load average $(load)"
  $BIN bench-server --store "redis://127.0.0.1:$RPORT/0" --jobs 20000 --workers 8 --secs 5 2>&1 | grep -v WARNING
  redis-cli -p "$RPORT" flushall >/dev/null
  echo "# BullMQ 6, same Redis: NODE_PATH=$BULL/node_modules node crates/server/bench/bullmq.mjs $RPORT 20000 8"
  NODE_PATH="$BULL/node_modules" node crates/server/bench/bullmq.mjs "$RPORT" 20000 8
  # Five interleaved pairs on a flushed Redis and the ratio of their medians; the arguments, if
  # any, are the command both queues' client processes run under (taskset).
  queue_pairs() {
    local label=$1; shift
    local tf=() bq=()
    for _ in 1 2 3 4 5; do
      redis-cli -p "$RPORT" flushall >/dev/null
      tf+=("$("$@" "$BIN" bench-server --store "redis://127.0.0.1:$RPORT/0" --jobs 20000 --workers 8 --secs 1 2>&1 | awk '/overall/{print $(NF-1)}')")
      redis-cli -p "$RPORT" flushall >/dev/null
      bq+=("$(NODE_PATH="$BULL/node_modules" "$@" node crates/server/bench/bullmq.mjs "$RPORT" 20000 8 | awk '/overall/{print $(NF-1)}')")
    done
    echo "$label x5, enqueue → claim → ack overall: ternflow ${tf[*]} jobs/s, BullMQ ${bq[*]} jobs/s; medians $(med "${tf[@]}") vs $(med "${bq[@]}") = $(awk -v a="$(med "${tf[@]}")" -v b="$(med "${bq[@]}")" 'BEGIN{printf "%.2f", a/b}')x"
    redis-cli -p "$RPORT" flushall >/dev/null
  }
  # One pair of runs is at the mercy of this machine's noise: five more, interleaved, and the
  # ratio of the medians (three moved it from 2.4x to 3.3x between two runs on 2026-12-05).
  queue_pairs interleaved env
  # The same five pairs with Redis on CPU 0 and the queue's client process (ternflow's
  # bench-server, BullMQ's node) on CPU 1, the same for both. Unpinned, ternflow's figure is
  # bimodal (35 k or 46 k jobs/s between identical runs on 2026-12-05: Redis is the bound, ~17 µs
  # of its CPU per job, and loses a share of its core whenever the scheduler puts one of the
  # client's threads beside it); BullMQ's single node thread moves less.
  if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
    taskset -a -pc 0 "$RPID" >/dev/null
    queue_pairs "pinned (Redis CPU 0, client CPU 1)" taskset -c 1
    taskset -a -pc "0-$(($(nproc) - 1))" "$RPID" >/dev/null
  fi
  endsec

  section "Server queue on the embedded store (SQLite) and in memory"
  echo "# load average $(load)"
  $BIN bench-server --store embedded --jobs 20000 --workers 8 --secs 3 2>&1 | grep -v WARNING
  # The embedded store's figure moves with this VM's disk (WAL checkpoints): five more runs.
  sq=()
  for _ in 1 2 3 4 5; do
    sq+=("$($BIN bench-server --store embedded --jobs 20000 --workers 8 --secs 1 2>&1 | awk '/overall/{print $(NF-1)}')")
  done
  echo "embedded store x5, enqueue → claim → ack overall: ${sq[*]} jobs/s; median $(med "${sq[@]}")"
  $BIN bench-server --store memory --jobs 20000 --workers 8 --secs 3 2>&1 | grep -v WARNING
  endsec

  section "Tenants: 10 000 on one server under ulimit -n 1024 (bench/tenants.sh)"
  for store in embedded "redis://127.0.0.1:$RPORT/0"; do
    bench/tenants.sh --tenants 10000 --store "$store" --settle 5 2>&1
    redis-cli -p "$RPORT" flushall >/dev/null
  done
  endsec

  section "Noisy neighbour: a quiet tenant's load alone and next to a flooding tenant (bench/noisy.sh --rounds 3)"
  for store in embedded "redis://127.0.0.1:$RPORT/0"; do
    bench/noisy.sh --store "$store" --rounds 3 2>&1 || true
    redis-cli -p "$RPORT" flushall >/dev/null
  done
  endsec

  section "Engine (default model), natively and in node"
  echo "# load average $(load)"
  $BIN bench --model models/ternlight-int4.bin --iters 300
  node bench/engine.mjs --model models/ternlight-int4.bin --iters 300
  if [ -n "${TERNLIGHT_DIR:-}" ]; then
    # the reference engine built from a Ternlight clone on the same file, in alternating blocks
    REF_OURS_BUILT=1 bench/reference.sh "$TERNLIGHT_DIR" models/ternlight-int4.bin
  else
    echo "# the reference Ternlight engine's published figures (docs/engine.md): 147-180 short embeds/s in wasm, 61-66 ms per 128-id input"
    echo "# (TERNLIGHT_DIR=<a Ternlight clone> measures it here instead: bench/reference.sh)"
  fi
  endsec

  section "npm package (scripts/build-pkg.sh)"
  grep -E "^(build-pkg: wasm-opt|package:)" /tmp/ternflow-bench-pkg.log
  endsec
  echo
  echo "Load average at the end: $(load)."
} | tee "$OUT"
