#!/usr/bin/env bash
# Runs every check and test layer of ternflow; exits non-zero on any failure.
# Ends with one summary line: `N passed, N failed` (tests counted one by one, lint steps as one each).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

T0=$SECONDS
scripts/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }
echo "setup took $((SECONDS - T0)) s"

export CARGO_TERM_COLOR=never
export WASM_BINDGEN_TEST_TIMEOUT=${WASM_BINDGEN_TEST_TIMEOUT:-180}
LOGDIR=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$LOGDIR"
}
trap cleanup EXIT

# Free space where the build writes: a step that fails with ENOSPC shows up in its `<==` line.
disk_free() { df -h --output=avail "${CARGO_TARGET_DIR:-$ROOT/target}" 2>/dev/null | tail -1 | tr -d ' '; }
mkdir -p "${CARGO_TARGET_DIR:-$ROOT/target}"
echo "disk free before the build: $(disk_free)"

passed=0
failed=0
failed_steps=()

# run NAME CMD...: runs a step, counts the tests its runners report (or the step itself).
run() {
  local name=$1; shift
  local log="$LOGDIR/$name.log"
  printf '\n==> %s: %s\n' "$name" "$*"
  local t0=$SECONDS
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local p f
  # cargo / wasm-bindgen-test: "test result: ok. N passed; M failed"; node --test: "# pass N", "# fail M".
  p=$( (grep -Eo 'test result: [A-Za-z]+\. [0-9]+ passed; [0-9]+ failed' "$log" | awk '{print $4}';
        grep -Eo '^# pass [0-9]+' "$log" | awk '{print $3}') | awk '{s+=$1} END {print s+0}')
  f=$( (grep -Eo 'test result: [A-Za-z]+\. [0-9]+ passed; [0-9]+ failed' "$log" | awk '{print $6}';
        grep -Eo '^# fail [0-9]+' "$log" | awk '{print $3}') | awk '{s+=$1} END {print s+0}')
  if [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
    # A lint step, or a runner that never got to report: the step counts as one.
    if [ "$rc" -eq 0 ]; then p=1; else f=1; fi
  elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1 # the runner failed after its tests passed (a build or harness error)
  fi
  passed=$((passed + p)); failed=$((failed + f))
  [ "$rc" -eq 0 ] || failed_steps+=("$name")
  printf '<== %s: exit %s, %s passed, %s failed, %s s (disk free: %s)\n' "$name" "$rc" "$p" "$f" "$((SECONDS - t0))" "$(disk_free)"
}

run fmt cargo fmt --all --check
run clippy-native cargo clippy --workspace --all-targets --locked -- -D warnings
run clippy-wasm cargo clippy --target wasm32-unknown-unknown -p ternflow -p ternflow-core -p ternflow-engine --all-targets --locked -- -D warnings
run clippy-wasi cargo clippy --target wasm32-wasip2 -p ternflow-wasi --all-targets --locked -- -D warnings
run clippy-wasi-backend cargo clippy --target wasm32-wasip2 -p ternflow-wasi --no-default-features --features p2 --all-targets --locked -- -D warnings
run clippy-wasi-p3 cargo clippy --target wasm32-wasip2 -p ternflow-wasi --no-default-features --features engine,p3 --all-targets --locked -- -D warnings
run cargo-test cargo test --workspace --locked
# The WASI components under a real Wasmtime against a real `ternflow serve` (crates/cli/tests/wasi.rs;
# ignored in the plain cargo test above because they need the wasm32-wasip2 build and Wasmtime).
wasi_components() {
  scripts/build-wasi.sh || return 1
  TERNFLOW_WASI_DIR="$(cd "${CARGO_TARGET_DIR:-target}/wasi" && pwd)" \
    cargo test --locked -p ternflow-cli --test wasi -- --ignored --test-threads=1
}
run wasi wasi_components
# The wasm outside a browser (no Web Worker, no IndexedDB: like an edge isolate), in Node, over
# the npm package's build in pkg/ (the one wasm build folder: the npm-package step reuses it).
node_edge() {
  scripts/build-pkg.sh && node --test tests/node/
}
run edge-node node_edge

# Browser tests run against a real server on a real Redis, both started here on free ports.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_services() {
  cargo build --locked -q -p ternflow-cli || return 1
  local rport sport token
  rport=$(free_port); sport=$(free_port); token="test-admin-$RANDOM$RANDOM"
  # An HS256 key for the signed-token tests (the browser test mints its own tokens with it).
  local jwt_secret
  jwt_secret=$(head -c 32 /dev/urandom | base64)
  mkdir -p "$LOGDIR/redis"
  (cd "$LOGDIR/redis" && exec redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly yes \
     --dir "$LOGDIR/redis" >"$LOGDIR/redis.log" 2>&1) &
  PIDS+=($!)
  for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
  TERNFLOW_JWT_KEYS="test:hs256:$jwt_secret" "${CARGO_TARGET_DIR:-target}/debug/ternflow" serve --addr "127.0.0.1:$sport" --store "redis://127.0.0.1:$rport/0" \
    --model crates/engine/tests/data/ref_tiny_ternary.tern --insecure-dev-token "$token" \
    --cors-allow-localhost --lease-ms 1500 --max-attempts 3 >"$LOGDIR/server.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$sport/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
  curl -fsS "http://127.0.0.1:$sport/healthz" >/dev/null || { cat "$LOGDIR/server.log"; return 1; }
  export TERNFLOW_TEST_SERVER="http://127.0.0.1:$sport" TERNFLOW_TEST_TOKEN="$token" \
    TERNFLOW_TEST_JWT_SECRET="$jwt_secret" TERNFLOW_TEST_REDIS="redis://127.0.0.1:$rport/0"
}
# The npm package as its users meet it: packed, installed unchanged, built by Vite / webpack /
# esbuild and run in headless Chromium, consumed by Node (ESM, CJS) and strict tsc, and the edge
# Worker in real workerd (its remote-cache test uses the server started above).
npm_package() {
  local t0=$SECONDS
  scripts/build-pkg.sh && tests/bundlers/prepare.sh &&
    node --test --test-concurrency=1 tests/bundlers/
  local rc=$?
  echo "npm-package step took $((SECONDS - t0)) s"
  return $rc
}
# The same browser tests in the two other engines a visitor's browser may run: Gecko (Debian's
# Firefox ESR through geckodriver) and WebKit (WebKitGTK's WebDriver, under Xvfb; wasm-pack's
# --safari starts a `safaridriver` from the PATH, here a link to WebKitWebDriver).
browser_firefox() {
  GECKODRIVER=$(command -v geckodriver) || { echo "geckodriver missing: run scripts/setup.sh"; return 1; }
  GECKODRIVER=$GECKODRIVER TERNFLOW_TEST_ENGINE=firefox wasm-pack --log-level warn test --headless --firefox --mode no-install
}
browser_webkit() {
  local bin
  bin=$(mktemp -d)
  ln -s "$(command -v WebKitWebDriver)" "$bin/safaridriver" || return 1
  PATH="$bin:$PATH" TERNFLOW_TEST_ENGINE=webkit xvfb-run -a wasm-pack --log-level warn test --headless --safari --mode no-install
  local rc=$?
  rm -rf "$bin"
  return $rc
}
if start_services; then
  run browser env TERNFLOW_TEST_ENGINE=chromium wasm-pack --log-level warn test --headless --chrome --mode no-install
  run browser-firefox browser_firefox
  run browser-webkit browser_webkit
  # The served contract is the server's: Schemathesis (every check, each role, fixed seed)
  # against a real `ternflow serve` (its own, fresh; scripts/contract.sh says how).
  run contract scripts/contract.sh "${CARGO_TARGET_DIR:-target}/debug/ternflow" .venv-schemathesis/bin/st
else
  echo "could not start redis + ternflow serve for the browser tests"
  failed=$((failed + 1)); failed_steps+=("browser-services")
fi
# The Grafana dashboard is what its generator writes (its queries are checked in cargo-test:
# crates/cli/tests/alerts.rs).
run dashboard .venv-grafanalib/bin/python deploy/grafana/dashboard.py --check
run npm-package npm_package
# What a visitor's browser meets (tests/e2e/polite.test.mjs): the npm package's worker in
# headless Chromium on a `ternflow serve` of its own (the debug binary): a hidden tab claims
# nothing; `start({ budget: 0.25 })` keeps the engine to a quarter of the time; a tab closed
# mid-run has every lease it held claimable again within 1 s (tests/e2e/leaving.test.mjs), in
# Chromium, Firefox ESR and WebKitGTK (tests/e2e/engines.mjs: selenium-webdriver for the two);
# no long task and no slow click on the page during a 3 000-job run (tests/e2e/smooth.test.mjs).
visitor() {
  local bin="${CARGO_TARGET_DIR:-target}/debug/ternflow"
  TERNFLOW_BIN="$bin" node --test --test-concurrency=1 tests/e2e/polite.test.mjs tests/e2e/leaving.test.mjs \
    tests/e2e/smooth.test.mjs || return 1
  TERNFLOW_BIN="$bin" TERNFLOW_E2E_ENGINE=firefox node --test tests/e2e/leaving.test.mjs || return 1
  TERNFLOW_BIN="$bin" TERNFLOW_E2E_ENGINE=webkit xvfb-run -a node --test tests/e2e/leaving.test.mjs
}
run visitor visitor
# The README's main command, short: scripts/demo.sh itself on the corpus's first 300 sentences,
# two Web Workers in headless Chromium, once on the embedded store and once on the Redis above
# (two servers, a key prefix of its own), with the debug binary and the pkg/ built above. Fails
# unless each run exits 0 and ends `demo: ok`.
demo_short() {
  local bin="${CARGO_TARGET_DIR:-target}/debug/ternflow" out store rc=0
  out=$(mktemp -d)
  for store in sqlite redis; do
    local extra=()
    if [ "$store" = redis ]; then
      [ -n "${TERNFLOW_TEST_REDIS:-}" ] || { echo "demo-short: no Redis (the browser-test services did not start)"; return 1; }
      extra=(--redis "$TERNFLOW_TEST_REDIS")
    fi
    echo "--- scripts/demo.sh --sentences 300 --workers 2 ${extra[*]}"
    timeout 600 scripts/demo.sh --bin "$bin" --sentences 300 --workers 2 --out "$out/$store" "${extra[@]}" 2>&1 |
      tee "$out/$store.log"
    local code=${PIPESTATUS[0]}
    if [ "$code" -ne 0 ] || [ "$(tail -n 1 "$out/$store.log")" != "demo: ok" ]; then
      echo "demo-short ($store): exit $code, last line: $(tail -n 1 "$out/$store.log")"
      rc=1
    fi
  done
  rm -rf "$out"
  return $rc
}
run demo-short demo_short
# The chaos run's short form (scripts/chaos.sh is the full one): 1 000 jobs, 2 browser workers,
# two servers on a Redis with AOF; workers terminated and restarted, Redis kill -9 + restart, a
# server stopped and restarted; nothing lost, fences hold, every vector equal to a fresh embed.
# Uses the debug binary built above and the pkg/ of the npm-package step. A stalled run fails
# after 15 min (`timeout`) instead of holding the whole command to CI's limit.
chaos_short() {
  timeout 900 node scripts/chaos.mjs --bin "${CARGO_TARGET_DIR:-target}/debug/ternflow" \
    --model models/ternlight-int4.bin --short --jobs 1000 --workers 2
}
run chaos-short chaos_short
# The same on a Redis Cluster (3 masters + 3 replicas): the fault is the queue's master killed
# (-9); its replica takes over, the old master rejoins as a replica; every confirmed job done.
chaos_short_cluster() {
  timeout 900 node scripts/chaos.mjs --bin "${CARGO_TARGET_DIR:-target}/debug/ternflow" \
    --model models/ternlight-int4.bin --short --cluster --jobs 1000 --workers 2
}
run chaos-short-cluster chaos_short_cluster

echo
[ ${#failed_steps[@]} -eq 0 ] || echo "failed steps: ${failed_steps[*]}"
echo "test command: $((SECONDS - T0)) s in all (setup included)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
