#!/usr/bin/env bash
# The issue's engine figure: our engine against the reference Ternlight engine, in node, on the
# same model file (bench/reference.mjs alternates blocks of embeds of the two in one process).
# Usage: bench/reference.sh TERNLIGHT_CHECKOUT [MODEL]   (default model: models/ternlight-int4.bin)
# TERNLIGHT_CHECKOUT is a clone (or a bare mirror) of the public Ternlight repository (its engine/ crate). The
# reference compiles its model in (engine/assets/model.bin), so it is built here, in a copy, with
# MODEL put there and its wasm-bindgen moved to ours (only the JS glue depends on that version;
# the installed wasm-bindgen CLI must match it, and nothing here downloads one).
set -euo pipefail
cd "$(dirname "$0")/.."
REF=${1:?usage: bench/reference.sh TERNLIGHT_CHECKOUT [MODEL]}
MODEL=$(realpath "${2:-models/ternlight-int4.bin}")
WB=$(grep -A1 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"/\1/p')
OUT=${REF_BUILD_DIR:-target/reference}
mkdir -p "$OUT/src"
rm -rf "$OUT/src/engine"
if [ -d "$REF/engine" ]; then
  cp "$REF/Cargo.toml" "$REF/Cargo.lock" "$OUT/src/" && cp -r "$REF/engine" "$OUT/src/engine"
else
  # a bare clone (a mirror): its HEAD's files, one by one
  for f in Cargo.toml Cargo.lock $(git --git-dir "$REF" ls-tree -r --name-only HEAD engine); do
    mkdir -p "$OUT/src/$(dirname "$f")" && git --git-dir "$REF" show "HEAD:$f" >"$OUT/src/$f"
  done
fi
cp "$MODEL" "$OUT/src/engine/assets/model.bin"
# The reference is one build per embedding format (a cargo feature): read it from the header.
fmt=$(python3 -c 'import sys; b=open(sys.argv[1],"rb").read(64); print({0:"fp32",1:"int8",2:"ternary",3:"int4"}[b[6]])' "$MODEL")
(cd "$OUT/src" && cargo update -q -p wasm-bindgen --precise "$WB" -p js-sys)
(cd "$OUT/src/engine" && CARGO_TARGET_DIR="$PWD/../../target" cargo build -q --release \
  --target wasm32-unknown-unknown --features "emb_$fmt")
wasm-bindgen --target nodejs --out-dir "$OUT/pkg" "$OUT/target/wasm32-unknown-unknown/release/tern_engine.wasm"
# CommonJS glue: without a package.json of its own, node takes the type from the repository's
# ("module") when the build directory is inside it (the default).
echo '{ "type": "commonjs" }' > "$OUT/pkg/package.json"
# ours as users get it: the npm package's wasm (wasm-opt -O3), unless REF_OURS_BUILT=1
[ "${REF_OURS_BUILT:-0}" = 1 ] || scripts/build-pkg.sh >/dev/null
echo "# $(date -u +%FT%TZ) $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg); model $(basename "$MODEL") ($fmt embeddings)"
node bench/reference.mjs --ref "$OUT/pkg" --model "$MODEL" --pkg pkg
