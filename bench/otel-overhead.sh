#!/usr/bin/env bash
# The cost of exporting every request's span by OTLP, on `ternflow bench-server` (memory store,
# release build; STORE=embedded for SQLite): PAIRS interleaved runs without and with `--otlp-endpoint` to bench/otlp-sink.py
# (OTLP/HTTP protobuf), the median "enqueue → claim → ack overall" jobs/s of each and their ratio.
#
#   bench/otel-overhead.sh [PAIRS=5] [JOBS=20000]      (needs target/release/ternflow)
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-5}
jobs=${2:-20000}
bin=target/release/ternflow
[ -x "$bin" ] || { echo "build it first: cargo build --release -p ternflow-cli" >&2; exit 2; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 bench/otlp-sink.py "$port" >/tmp/otlp-sink.$$ &
sink=$!
trap 'kill $sink 2>/dev/null || true' EXIT
sleep 0.5
overall() { "$bin" bench-server --store "${STORE:-memory}" --jobs "$jobs" --secs 2 "$@" \
  | awk '/enqueue → claim → ack overall/ { for (i = 1; i <= NF; i++) if ($(i+1) == "jobs/s") print $i }'; }
off=() on=()
for i in $(seq "$pairs"); do
  a=$(overall); b=$(overall --otlp-endpoint "http://127.0.0.1:$port")
  echo "pair $i: no export $a jobs/s, export $b jobs/s"
  off+=("$a") on+=("$b")
done
kill -TERM $sink; wait $sink || true
read -r reqs bytes </tmp/otlp-sink.$$; rm -f /tmp/otlp-sink.$$
python3 - "$reqs" "$bytes" "${off[*]}" "${on[*]}" <<'PY'
import statistics, sys
reqs, nbytes, off, on = sys.argv[1:]
off = [float(x) for x in off.split()]; on = [float(x) for x in on.split()]
a, b = statistics.median(off), statistics.median(on)
print(f"median without export {a:.0f} jobs/s, with export {b:.0f} jobs/s: ratio {b / a:.3f} "
      f"({(1 - b / a) * 100:.1f} % fewer); the sink got {reqs} requests, {int(nbytes) / 1e6:.1f} MB")
PY
