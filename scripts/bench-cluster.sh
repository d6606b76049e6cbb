#!/usr/bin/env bash
# Redis Cluster scaling, one run side by side (docs/benchmarks.md, docs/redis-cluster.md):
# `ternflow bench-queue` (enqueue → claim → ack, no HTTP) over many tenants against
#   - one Redis (redis://),
#   - a cluster of 1 master, and of 3 masters (no replicas, WAIT 0), one bench process and two
#     at once (two "servers"),
#   - 3 masters + 3 replicas with WAIT 0 and WAIT 1 (the cost of a confirmed write).
# Every server is Debian's redis-server on loopback, AOF off (the figures are the queue's, not
# the disk's). Usage: scripts/bench-cluster.sh [JOBS] (default 60000).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${1:-60000}
BIN=target/release/ternflow
[ -x "$BIN" ] || cargo build --release -p ternflow-cli --quiet
TMP=$(mktemp -d)
# Servers started in a $(…) subshell too: their pids go to a file, killed on exit.
cleanup() { xargs -r kill -9 < "$TMP/pids" 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
touch "$TMP/pids"
# Ports BASE..BASE+35 and their cluster bus ports (+10000) stay below Linux's ephemeral range
# (32768 up), where an outgoing connection could hold one: 20000 + up to 2400 + 10035 < 32768.
BASE=$((20000 + RANDOM % 2400))

node() { # node PORT [cluster]: a redis-server on PORT
  local dir=$TMP/$1; mkdir -p "$dir"
  if redis-cli -p "$1" ping >/dev/null 2>&1; then echo "port $1 is already taken by a Redis" >&2; exit 1; fi
  local extra=()
  [ "${2:-}" = cluster ] && extra=(--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000)
  redis-server --port "$1" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no "${extra[@]}" >/dev/null 2>&1 &
  echo $! >> "$TMP/pids"
  for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.05; done
  echo "redis-server on $1 did not start" >&2; exit 1
}

cluster() { # cluster FIRST_PORT MASTERS REPLICAS: prints its redis-cluster:// URL
  local first=$1; shift
  local n=$(($1 * (1 + $2))) addrs=() i
  for i in $(seq 0 $((n - 1))); do node $((first + i)) cluster; addrs+=("127.0.0.1:$((first + i))"); done
  if [ "$1" = 1 ]; then
    # redis-cli --cluster create needs 3 masters: one master takes every slot by hand.
    redis-cli -p "${addrs[0]##*:}" cluster addslotsrange 0 16383 >/dev/null
  else
    redis-cli --cluster create "${addrs[@]}" --cluster-replicas "$2" --cluster-yes >/dev/null
  fi
  # Every node agrees the cluster is whole (the slot map has reached all of them).
  for _ in $(seq 300); do
    [ "$(for a in "${addrs[@]}"; do redis-cli -p "${a##*:}" cluster info; done | grep -c cluster_state:ok)" = "$n" ] && break
    sleep 0.1
  done
  sleep 1
  # Replicas linked before measuring.
  for _ in $(seq 200); do
    [ "$(for a in "${addrs[@]}"; do redis-cli -p "${a##*:}" info replication; done | grep -c master_link_status:up)" -ge "$(($1 * $2))" ] && break
    sleep 0.1
  done
  local IFS=,
  echo "redis-cluster://${addrs[*]}"
}

q() { "$BIN" bench-queue --jobs "${QJOBS:-$JOBS}" "$@" | sed 's/^bench-queue: //'; }

echo "# bench-cluster: $JOBS jobs, $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg), $(redis-server --version | awk '{print $3}')"
node "$BASE"
echo "one Redis:           $(q --store "redis://127.0.0.1:$BASE/")"
ONE=$(cluster $((BASE + 10)) 1 0)
echo "cluster, 1 master:   $(q --store "$ONE" --wait-replicas 0)"
THREE=$(cluster $((BASE + 20)) 3 0)
echo "cluster, 3 masters:  $(q --store "$THREE" --wait-replicas 0)"
echo "two processes at once on each ($((JOBS / 2)) jobs each):"
export QJOBS=$((JOBS / 2))
q --store "$ONE" --wait-replicas 0 --run a1 > "$TMP/a1" & a=$!
q --store "$ONE" --wait-replicas 0 --run b1 > "$TMP/b1"; wait $a
echo "  1 master:  $(cat "$TMP/a1")"; echo "             $(cat "$TMP/b1")"
q --store "$THREE" --wait-replicas 0 --run a3 > "$TMP/a3" & a=$!
q --store "$THREE" --wait-replicas 0 --run b3 > "$TMP/b3"; wait $a
echo "  3 masters: $(cat "$TMP/a3")"; echo "             $(cat "$TMP/b3")"
unset QJOBS
REPL=$(cluster $((BASE + 30)) 3 1)
echo "3 masters + 3 replicas, WAIT 0: $(q --store "$REPL" --wait-replicas 0)"
echo "3 masters + 3 replicas, WAIT 1: $(q --store "$REPL" --wait-replicas 1)"
