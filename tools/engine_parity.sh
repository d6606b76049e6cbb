#!/usr/bin/env bash
# Parity of the Rust engine with the independent numpy reference (tools/tern_ref.py).
# For each embedding format: generate a model with tern_ref.py (Ternlight base shape unless
# overridden), embed the same sentences with `ternflow embed` and `tern_ref.py embed` (float64), print
# the min / mean cosine, and fail when any min is below 0.9999.
#
# Usage: tools/engine_parity.sh [SENTENCES_FILE]
#   env: D=384 LAYERS=2 HEADS=6 FFN=1536 OUT=384 SEED=1 FORMATS="fp32 int8 ternary int4"
set -euo pipefail
cd "$(dirname "$0")/.."
SENTENCES=${1:-crates/engine/tests/data/parity_sentences.txt}
D=${D:-384} LAYERS=${LAYERS:-2} HEADS=${HEADS:-6} FFN=${FFN:-1536} OUT=${OUT:-384} SEED=${SEED:-1}
FORMATS=${FORMATS:-"fp32 int8 ternary int4"}
THRESHOLD=0.9999
cargo build --release -q -p ternflow-cli
BIN=target/release/ternflow
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "sentences: $(wc -l < "$SENTENCES") from $SENTENCES; shape d$D x$LAYERS layers, $HEADS heads, ffn $FFN, out $OUT"
fail=0
for fmt in $FORMATS; do
  python3 tools/tern_ref.py gen --format "$fmt" --vocab 30522 --d "$D" --layers "$LAYERS" \
    --heads "$HEADS" --ffn "$FFN" --out "$OUT" --seed "$SEED" "$WORK/$fmt.tern" 2>/dev/null
  "$BIN" embed --model "$WORK/$fmt.tern" --vocab models/vocab.txt < "$SENTENCES" > "$WORK/$fmt.rust.jsonl"
  python3 tools/tern_ref.py embed "$WORK/$fmt.tern" --vocab models/vocab.txt < "$SENTENCES" \
    > "$WORK/$fmt.ref.jsonl"
  if ! python3 - "$fmt" "$WORK/$fmt.rust.jsonl" "$WORK/$fmt.ref.jsonl" "$THRESHOLD" <<'PY'
import json, sys
import numpy as np
fmt, a, b, thr = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
A = np.array([json.loads(l) for l in open(a)], np.float64)
B = np.array([json.loads(l) for l in open(b)], np.float64)
assert A.shape == B.shape, (A.shape, B.shape)
cos = (A * B).sum(1) / (np.linalg.norm(A, axis=1) * np.linalg.norm(B, axis=1))
i = int(cos.argmin())
print(f"{fmt:8s} n={len(cos)} min cosine {cos.min():.7f} (line {i + 1}) mean {cos.mean():.7f} "
      f"max |diff| {np.abs(A - B).max():.2e}")
sys.exit(0 if cos.min() >= thr else 1)
PY
  then fail=1; fi
done
if [ "$fail" -ne 0 ]; then echo "FAIL: min cosine below $THRESHOLD"; exit 1; fi
echo "OK: every format >= $THRESHOLD"
