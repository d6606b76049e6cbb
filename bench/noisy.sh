#!/usr/bin/env bash
# The noisy-neighbour figure (bench/noisy.mjs): tenant `quiet`'s steady load alone (phase A), then
# the same load while tenant `noisy` floods the server at its limits (phase B: long polls, SSE
# streams, backend embeds, metrics under many names, idle sockets); prints both side by side and
# GOAL MET / GOAL NOT MET (quiet p99 claim → ack and jobs/s within 10 % of phase A's). Under
# `ulimit -n 1024` (TF_ULIMIT_N to change it), as a deployment with the common default would be.
# The server is not built here: build target/release/ternflow first (or pass --bin).
# Arguments go to bench/noisy.mjs, e.g.
# Usage: bench/noisy.sh [--store embedded|redis://127.0.0.1:6379/0] [--rate R] [--workers W]
#          [--secs S] [--claims N] [--streams N] [--embeds N] [--idle N] [--serve-arg X]... [--strict]
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n "${TF_ULIMIT_N:-1024}"
exec node bench/noisy.mjs "$@"
