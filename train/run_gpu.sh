#!/usr/bin/env bash
# Issue 30 on a lent GPU machine: one distillation run of the realq recipe (train/run_realq.sh's data
# and mix) from the student in the bundle, sized to fit one device call.
#   here:  python3 train/gpu.py bundle .gpu --init STUDENT.bin      (.gpu/ is in .gitignore)
#   there: bash train/run_gpu.sh .gpu "$OUT" [SECONDS]               (device run, carry .gpu)
# Labels every text with the bundle's int8 teacher, then trains for what is left of SECONDS (default
# 540, the whole script's wall time) after the labelling, a margin kept for the compiles, the evals
# and the packing; leaves in OUT: ternlight-int4.bin (packed from the best dev mean), curve.tsv,
# train.log, best.json, label.log.  The recipe is realq's (NEAR, EMA, CORR as in run_realq.sh), at
# BATCH (512) and LR (5e-4), cosine-annealed over the run.
# MAX=N labels and trains on N texts of each set, spread over it (a smoke run, CPU or GPU; on a CPU
# add TPB=4096, the tokens in one labelling batch, or the 13 fixed-shape batches take minutes).
main() {
set -euo pipefail
cd "$(dirname "$0")/.."
local B OUT TOTAL T0 left min status=0
B="$(realpath "$1")"
OUT="$(realpath "$2")"
TOTAL="${3:-540}"
T0=$(date +%s)
export TERN_WORK="${TERN_WORK:-/tmp/ternflow-gpu-work}" TEACHER_DIR="$B" PYTHONUNBUFFERED=1
export XLA_FLAGS="${XLA_FLAGS-}" XLA_PYTHON_CLIENT_MEM_FRACTION=.85
mkdir -p "$TERN_WORK" "$OUT"
python3 train/gpu.py label "$B" "$TERN_WORK" ${MAX:+--max-texts "$MAX"} ${TPB:+--tokens-per-batch "$TPB"} 2>&1 | tee "$OUT/label.log"
# what is left, less the margin (PACK_S: loading, compiles, evals, packing), is the training budget
left=$(( TOTAL - ($(date +%s) - T0) - ${MARGIN_S:-150} ))
min=$(python3 -c "print(max(0.5, $left / 60))")
echo "$(date -u '+%T') labelled in $(( $(date +%s) - T0 )) s; training for $min min" | tee -a "$OUT/label.log"
# the run stops in time for the packing even when compiles or evals took longer than planned
left=$(( TOTAL - ($(date +%s) - T0) - ${PACK_S:-45} ))
timeout "$(( left > 60 ? left : 60 ))" python3 train/distil.py --init "$B/init.bin" --run gpu1 \
  --extra realq_train --extra-weight "${EXTRA_WEIGHT:-web=50,questions=20,dup=30}" --extra-share "${EXTRA_SHARE:-0.35}" \
  --extra-mix step --domain-weight faq=6,queries=1.3,webq=1.5,ents=1.5 \
  --batch "${BATCH:-512}" --lr "${LR:-5e-4}" --warmup-frac 0.02 --time-budget "$min" \
  --near "${NEAR:-1}" --ema "${EMA:-0.999}" --corr "${CORR:-1}" --seed "${SEED:-0}" \
  --ckpt-every 1000000 --eval-every "${EVAL_EVERY:-500}" --save-best || status=$?
local R="$TERN_WORK/gpu1"
cp "$R/curve.tsv" "$R/train.log" "$OUT/" || true
cp "$R/best.json" "$OUT/" || true
if [ -f "$R/student_best.npz" ]; then
  python3 train/pack.py --params "$R/student_best.npz" --formats int4 --outdir "$OUT" --val "$TERN_WORK/dev.tsv" --check 100
fi
echo "$(date -u '+%T') run_gpu.sh: $(( $(date +%s) - T0 )) s, distil.py exit $status"
return "$status"
}
main "$@"
