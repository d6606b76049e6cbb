#!/usr/bin/env bash
# The lying-workers chaos run (docs/security.md, "Measured: the lying workers' run"), end to end:
#  1. the throughput of honest browser workers with verification off and on, alternated
#     (off, on, off, on; --ab-jobs jobs each), and the ratio of the medians;
#  2. the liars' run: --jobs jobs (default 100 000), honest browser workers and four kinds of
#     liars (scripts/liars.mjs), which asserts no poisoned result or cache entry is left and no
#     honest identity is flagged.
# Usage: scripts/liars.sh [--jobs N] [--ab-jobs M] [--honest H]
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=100000 AB=20000 HONEST=2
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) JOBS=$2; shift 2 ;;
    --ab-jobs) AB=$2; shift 2 ;;
    --honest) HONEST=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ "${TERNFLOW_SKIP_BUILD:-0}" != 1 ]; then
  scripts/setup.sh
  cargo build --release --locked -q -p ternflow-cli
  scripts/build-pkg.sh models/ternlight-int4.bin
fi
BIN=$(realpath "${CARGO_TARGET_DIR:-target}")/release/ternflow
run() { node scripts/liars.mjs --bin "$BIN" --model models/ternlight-int4.bin --honest "$HONEST" "$@"; }
echo "==> honest workers only, verification off / on, alternated ($AB jobs each)"
rates=()
for mode in off on off on; do
  flag=(); [ "$mode" = off ] && flag=(--no-verify)
  out=$(run --jobs "$AB" --liars 0 "${flag[@]}")
  rate=$(echo "$out" | sed -nE 's/.* jobs in [0-9.]+ s: ([0-9]+) jobs\/s.*/\1/p')
  echo "verification $mode: $rate jobs/s"
  rates+=("$mode:$rate")
done
python3 - "${rates[@]}" <<'PY'
import sys, statistics
r = {"off": [], "on": []}
for a in sys.argv[1:]:
    m, v = a.split(":"); r[m].append(float(v))
off, on = statistics.median(r["off"]), statistics.median(r["on"])
print(f"median off {off:.0f} jobs/s, on {on:.0f} jobs/s: on = {100 * on / off:.1f} % of off")
PY
echo "==> the liars' run ($JOBS jobs)"
run --jobs "$JOBS" --liars 1
