#!/usr/bin/env bash
# The tenants figure (bench/tenants.mjs): N tenants (default 10 000), each enqueue → claim → ack →
# status with tokens of its own, on one `ternflow serve` limited to 1 024 open files, as a
# deployment with the common default `ulimit -n` would be. The server is not built here: build
# target/release/ternflow first (or pass --bin). Arguments go to bench/tenants.mjs, e.g.
# Usage: bench/tenants.sh [--tenants N] [--concurrency C] [--store embedded|redis://127.0.0.1:6379/0]
#          [--settle S] [--serve-arg X]... [--bin BIN] [--model FILE] [--keep]
#   bench/tenants.sh --store redis://127.0.0.1:6379/0 --serve-arg --max-open-tenants --serve-arg 128
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n 1024
exec node bench/tenants.mjs "$@"
