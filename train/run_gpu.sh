#!/usr/bin/env bash
# Issue 30 on a lent GPU machine: one distillation run of the realq recipe (train/run_realq.sh's data
# and mix) from the student in the bundle, sized to a few minutes of an H200.
#   here:  python3 train/gpu.py bundle .gpu --init STUDENT.bin      (.gpu/ is in .gitignore)
#   there: bash train/run_gpu.sh .gpu "$OUT" [TRAIN_MIN]             (device run, carry .gpu)
# Labels every text with the bundle's int8 teacher, trains TRAIN_MIN minutes (default 5) at batch 512,
# and leaves in OUT: ternlight-int4.bin (packed from the best dev mean), curve.tsv, train.log, best.json.
# MAX=N labels and trains on N texts of each set, spread over it (a smoke run, CPU or GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
B="$(realpath "$1")"
OUT="$(realpath "$2")"
MIN="${3:-5}"
export TERN_WORK="${TERN_WORK:-/tmp/ternflow-gpu-work}" TEACHER_DIR="$B" PYTHONUNBUFFERED=1
export XLA_FLAGS="${XLA_FLAGS-}" XLA_PYTHON_CLIENT_MEM_FRACTION=.85
mkdir -p "$TERN_WORK" "$OUT"
python3 train/gpu.py label "$B" "$TERN_WORK" ${MAX:+--max-texts "$MAX"}
status=0
# the run stops in time for the packing even when compiles or evals took longer than planned
timeout "${DISTIL_TIMEOUT:-$(python3 -c "print(int(60 * $MIN + 150))")}" python3 train/distil.py --init "$B/init.bin" --run gpu1 \
  --extra realq_train --extra-weight web=60,questions=25,dup=15 --extra-share 0.5 --extra-mix step \
  --domain-weight faq=6,queries=1.3,webq=1.5,ents=1.5 \
  --batch "${BATCH:-512}" --lr "${LR:-6e-4}" --warmup-frac 0.01 --time-budget "$MIN" \
  --ckpt-every 1000000 --eval-every "${EVAL_EVERY:-1000}" --save-best || status=$?
R="$TERN_WORK/gpu1"
cp "$R/curve.tsv" "$R/train.log" "$OUT/" || true
cp "$R/best.json" "$OUT/" || true
if [ -f "$R/student_best.npz" ]; then
  python3 train/pack.py --params "$R/student_best.npz" --formats int4 --outdir "$OUT" --val "$TERN_WORK/dev.tsv" --check 100
fi
exit "$status"
