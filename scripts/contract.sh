#!/usr/bin/env bash
# Contract test: does the server do what crates/server/openapi.json says? Starts `ternflow serve`
# on a free port (fresh data dir, one token per role, the shipped model), runs Schemathesis with
# every check against it once per role (fixed seed, bounded examples), prints per role the test
# cases generated and the failures by check, and exits non-zero when any role has a failure (or
# an error).
#
#   scripts/contract.sh [TERNFLOW_BINARY] [SCHEMATHESIS_ST]
#
# Defaults: target/debug/ternflow and .venv-schemathesis/bin/st (paths relative to the repo root;
# `python3 -m venv .venv-schemathesis && .venv-schemathesis/bin/pip install schemathesis`).
# Settings: scripts/contract.toml (why each one is there). Environment: CONTRACT_EXAMPLES
# (default 30), CONTRACT_SEED (default 1), CONTRACT_ROLES (default "admin producer worker").
set -uo pipefail
cd "$(dirname "$0")/.."

ROOT=$PWD
BIN=$(realpath -m "${1:-target/debug/ternflow}")
ST=$(realpath -m "${2:-.venv-schemathesis/bin/st}")
EXAMPLES=${CONTRACT_EXAMPLES:-30}
SEED=${CONTRACT_SEED:-1}
ROLES=${CONTRACT_ROLES:-admin producer worker}
MODEL=models/ternlight-int4.bin
SPEC=crates/server/openapi.json
CONFIG=scripts/contract.toml

for f in "$BIN" "$ST"; do
  if [ ! -x "$f" ]; then
    echo "contract: $f is not an executable (usage: $0 [ternflow binary] [schemathesis st])" >&2
    exit 2
  fi
done
if [ ! -f "$MODEL" ]; then
  echo "contract: $MODEL is missing" >&2
  exit 2
fi
# A Python to pick a port and read the reports: the one on PATH, else Schemathesis's own.
PY=$(command -v python3 || true)
if [ -z "$PY" ]; then PY=$(dirname "$ST")/python; fi

WORK=$(mktemp -d)
SERVER=
declare -A PID
cleanup() {
  local p
  for p in "${PID[@]}"; do kill "$p" 2>/dev/null; done
  if [ -n "$SERVER" ]; then
    kill "$SERVER" 2>/dev/null
    wait "$SERVER" 2>/dev/null
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
BASE=http://127.0.0.1:$PORT
declare -A TOKEN=([admin]=contract-admin [producer]=contract-producer [worker]=contract-worker)

TERNFLOW_TOKENS="${TOKEN[admin]}:admin,${TOKEN[producer]}:producer,${TOKEN[worker]}:worker" \
  "$BIN" serve --addr "127.0.0.1:$PORT" --data-dir "$WORK/data" --model "$MODEL" \
  >"$WORK/server.log" 2>&1 &
SERVER=$!

# http METHOD PATH [BODY]: a request with the admin token; prints the status code.
http() {
  "$PY" - "$BASE" "${TOKEN[admin]}" "$@" <<'PY'
import sys, urllib.error, urllib.request
base, token, method, path = sys.argv[1:5]
body = sys.argv[5].encode() if len(sys.argv) > 5 else None
req = urllib.request.Request(base + path, data=body, method=method,
                             headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=5) as r:
        print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception:
    print(0)
PY
}

ready=
for _ in $(seq 100); do
  if ! kill -0 "$SERVER" 2>/dev/null; then break; fi
  if [ "$(http GET /readyz)" = 200 ]; then ready=1; break; fi
  sleep 0.2
done
if [ -z "$ready" ]; then
  echo "contract: the server did not become ready; its log:" >&2
  tail -20 "$WORK/server.log" >&2
  exit 1
fi

# Ready work for the claims: a claim that finds none long-polls up to `wait_ms` (30 s at most),
# which is what it should do but no way to spend a test run. 20 000 jobs outlast every claim the
# runs make (about 3 000 for each of the admin and the worker).
for b in $(seq 0 19); do
  body=$("$PY" -c "import json, sys; print(json.dumps({'jobs': [{'text': f'contract seed {sys.argv[1]} {i}'} for i in range(1000)]}))" "$b")
  if [ "$(http POST /v1/jobs "$body")" != 200 ]; then
    echo "contract: seeding jobs failed" >&2
    exit 1
  fi
done

# The roles run side by side (each Schemathesis is one busy Python process), each with its own
# seed-determined cases; what one role's run changes (jobs, locks) is state any client may see.
for role in $ROLES; do
  if [ -z "${TOKEN[$role]:-}" ]; then
    echo "contract: unknown role $role" >&2
    exit 2
  fi
  echo "==> $role: $ST run $SPEC --checks all --max-examples $EXAMPLES --seed $SEED"
  # Run from the scratch directory: Hypothesis writes its .hypothesis/ folder where it runs.
  (cd "$WORK" && exec "$ST" --config-file "$ROOT/$CONFIG" run "$ROOT/$SPEC" --url "$BASE" --checks all \
    -H "Authorization: Bearer ${TOKEN[$role]}" --max-examples "$EXAMPLES" --workers 1 \
    --seed "$SEED" --no-color --report json --report-json-path "$WORK/$role.json" \
    >"$WORK/$role.txt" 2>&1) &
  PID[$role]=$!
done

status=0
summary=()
for role in $ROLES; do
  wait "${PID[$role]}"
  rc=$?
  line=$("$PY" - "$WORK/$role.json" "$role" "$rc" <<'PY'
import json, sys
path, role, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    r = json.load(open(path))
except Exception as e:
    print(f"{role}: no report ({e}); st exited {rc}")
    sys.exit(1)
failures = sum(f.get("count", 1) for f in r["failures"])
errors = len(r["errors"])
by_check = ", ".join(f'{f["code"]} {f["title"]}: {f.get("count", 1)}' for f in r["failures"]) or "none"
print(f'{role}: {r["test_cases"]["generated"]} test cases generated, {failures} failures ({by_check}), '
      f'{errors} errors, seed {r["seed"]}, {r["running_time"]:.0f} s')
sys.exit(1 if failures or errors or rc else 0)
PY
)
  bad=$?
  summary+=("$line")
  if [ $bad -ne 0 ]; then
    status=1
    # What failed, as Schemathesis tells it (with `curl` lines to reproduce).
    echo "--- $role: failures and errors"
    sed -n '/^=* \(FAILURES\|ERRORS\) =*$/,/^=* WARNINGS =*$/p' "$WORK/$role.txt" | head -200
  fi
done

echo
echo "contract summary:"
printf '  %s\n' "${summary[@]}"
if [ $status -ne 0 ]; then
  echo "contract: FAILED"
else
  echo "contract: ok"
fi
exit $status
