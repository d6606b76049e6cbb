#!/usr/bin/env bash
# Runs every check and test layer of ternflow; exits non-zero on any failure.
# Ends with one summary line: `N passed, N failed` (tests counted one by one, lint steps as one each).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

scripts/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }

export CARGO_TERM_COLOR=never
export WASM_BINDGEN_TEST_TIMEOUT=${WASM_BINDGEN_TEST_TIMEOUT:-180}
LOGDIR=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$LOGDIR"
}
trap cleanup EXIT

passed=0
failed=0
failed_steps=()

# run NAME CMD...: runs a step, counts the tests its runners report (or the step itself).
run() {
  local name=$1; shift
  local log="$LOGDIR/$name.log"
  printf '\n==> %s: %s\n' "$name" "$*"
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local p f
  p=$(grep -Eo 'test result: [A-Za-z]+\. [0-9]+ passed; [0-9]+ failed' "$log" | awk '{s+=$4} END {print s+0}')
  f=$(grep -Eo 'test result: [A-Za-z]+\. [0-9]+ passed; [0-9]+ failed' "$log" | awk '{s+=$6} END {print s+0}')
  if [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
    # A lint step, or a runner that never got to report: the step counts as one.
    if [ "$rc" -eq 0 ]; then p=1; else f=1; fi
  elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1 # the runner failed after its tests passed (a build or harness error)
  fi
  passed=$((passed + p)); failed=$((failed + f))
  [ "$rc" -eq 0 ] || failed_steps+=("$name")
  printf '<== %s: exit %s, %s passed, %s failed\n' "$name" "$rc" "$p" "$f"
}

run fmt cargo fmt --all --check
run clippy-native cargo clippy --workspace --all-targets --locked -- -D warnings
run clippy-wasm cargo clippy --target wasm32-unknown-unknown -p ternflow -p ternflow-core -p ternflow-engine --all-targets --locked -- -D warnings
run cargo-test cargo test --workspace --locked
run browser wasm-pack --log-level warn test --headless --chrome --mode no-install

echo
[ ${#failed_steps[@]} -eq 0 ] || echo "failed steps: ${failed_steps[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
