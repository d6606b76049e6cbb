#!/usr/bin/env bash
# Real web queries and questions (issue 30), data part: corpus + teacher labels, resumable.
#   TERN_WORK=/work/cache/model/work bash train/run_real.sh
# Every step skips what is done; label shards appear only when complete (rerun to resume).
# Heavy steps niced, 2 threads.  Needs run_broad.sh's steps 0-1 (python deps, teacher, teacher.onnx):
# this script runs them itself when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export TERN_WORK="${TERN_WORK:-$PWD/train/work}"
W="$TERN_WORK"
mkdir -p "$W/logs"
export OMP_NUM_THREADS=2 LABEL_THREADS=2
export XLA_FLAGS="${XLA_FLAGS:---xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=2}"
PY="nice -n 19 python3"
WHEELS="${WHEELS:-$W/../wheels}"
PYSERINI="$WHEELS/pyserini-0.19.2-py3-none-any.whl"
PYSERINI_SHA=43b883942bf4001dd1664b868bcf80b85940440f6f91161ccae8f6692cbda677

# 0-1. python deps and the teacher (as run_broad.sh)
python3 -c "import numpy, safetensors, tokenizers, onnx, onnxruntime" 2>/dev/null || pip install -r train/requirements.txt
. train/fetch_teacher.sh
[ -f "$W/teacher.onnx" ] || $PY train/teacher_onnx.py --out "$W/teacher.onnx"

# 2. the Anserini topic files ship inside the pyserini wheel (no Java needed)
if [ ! -f "$PYSERINI" ]; then
  pip download pyserini==0.19.2 --no-deps -d "$WHEELS"
  echo "$PYSERINI_SHA  $PYSERINI" | sha256sum -c -
fi
TQ="${TERNLIGHT_QUERIES:-$W/../ternlight_eval/spearman_smoke_1k.json}"
[ -f "$TQ" ] || { echo "missing $TQ: Ternlight's protocol queries (eval/quality/corpus/spearman_smoke_1k.json of the public Ternlight repository) are needed for the leakage check"; exit 1; }

# 3. corpus: web / questions / dup, leakage-filtered (never rebuilt once realq_train.txt exists, so
#    that finished label shards stay aligned with it)
[ -f "$W/realq_train.txt" ] || PYSERINI_WHEEL="$PYSERINI" $PY train/queries_real.py --work "$W"

# 4. teacher labels: the held-out sets, then the training file in shards of 10 000
for f in "$W"/test_web.txt "$W"/test_questions.txt "$W"/test_dup.txt "$W"/dev_web.tsv "$W"/dev_questions.tsv "$W"/dev_dup.tsv; do
  [ -f "${f%.*}_teacher.npy" ] || $PY train/label.py --files "$f"
done
$PY train/label.py --shards "$W/realq_train.txt"
python3 train/test_leakage.py
