#!/usr/bin/env bash
# Issue 30, training part: distil the shipped model on real queries (realq_train: web / questions / dup,
# Ternlight's 60/25/15 mix) blended half and half with the broad pool.  Starts the run, or resumes it
# from its last checkpoint (every 100 steps); rerun at will after the process was stopped or killed.
#   TERN_WORK=/work/cache/model/work bash train/run_realq.sh            # in the foreground
#   TERN_WORK=/work/cache/model/work DETACH=1 bash train/run_realq.sh   # detached (setsid nohup), returns at once
# Run directory $TERN_WORK/$RUN (default realq1): train.log, curve.tsv (per-domain dev Spearman),
# ckpt_last.npz, best.json + student_best.npz (best dev mean), student_final.npz at the end; this
# script's own output goes to run.log there.  BUDGET: minutes of training-step time (the run's schedule;
# keep it when resuming).  EXTRA_SHARE (default 0.5) and LR (default 3e-4): keep them when resuming too.
# realq2 (2026-12-04, from stage 9, more pool to win back docs/man; shipped as stage 10 — resumed
# at step 1 900 with the budget cut from 180 to 105 so the schedule ended within the session):
#   RUN=realq2 BUDGET=105 EXTRA_SHARE=0.35 LR=2e-4 TERN_WORK=… DETACH=1 bash train/run_realq.sh
# realq4 (2026-12-04 evening, issue 30's "near and far pairs"): realq3's recipe from stage 10 with a quarter of
# every batch the teacher-space nearest neighbours of another quarter (distil.py --near 0.5):
# (shipped as stage 11; started with BUDGET=80, resumed at step 2 100 with 65 so it ended in the session):
#   RUN=realq4 BUDGET=65 EXTRA_SHARE=0.35 LR=2e-4 NEAR=0.5 TERN_WORK=… DETACH=1 bash train/run_realq.sh
# realq5 (2026-12-05, shipped as stage 12): realq4's recipe from stage 11, the weights' moving average
# evaluated, selected and saved (distil.py --ema 0.999):
#   RUN=realq5 BUDGET=55 EXTRA_SHARE=0.35 LR=2e-4 NEAR=0.5 EMA=0.999 TERN_WORK=… DETACH=1 bash train/run_realq.sh
# realq6 (2026-12-05, from stage 12): half of every batch near pairs, a new data order (SEED; a run
# from the next stage with the same seed replays the batches its predecessor saw, in the same order):
#   RUN=realq6 BUDGET=90 EXTRA_SHARE=0.35 LR=2e-4 NEAR=1 EMA=0.999 SEED=6 TERN_WORK=… DETACH=1 bash train/run_realq.sh
# (resumed at step 2 100 with BUDGET=78, so it ended within the session)
# realq7c (2026-12-05, from stage 13, shipped as stage 14): the batch's pair-cosine correlation as a
# loss term (distil.py --corr); realq7b is the same run without it (the ablation's baseline):
#   RUN=realq7c BUDGET=25 EXTRA_SHARE=0.35 LR=2e-4 NEAR=1 EMA=0.999 CORR=1 SEED=7 TERN_WORK=… DETACH=1 bash train/run_realq.sh
# realq8 (2026-12-05, from stage 14): the correlation term three times as heavy:
#   RUN=realq8 BUDGET=30 EXTRA_SHARE=0.35 LR=2e-4 NEAR=1 EMA=0.999 CORR=3 SEED=8 TERN_WORK=… DETACH=1 bash train/run_realq.sh
# realq9 (2026-12-05, from stage 14): half the learning rate (not shipped either; model card):
#   RUN=realq9 BUDGET=15 EXTRA_SHARE=0.35 LR=1e-4 NEAR=1 EMA=0.999 CORR=1 SEED=9 TERN_WORK=… DETACH=1 bash train/run_realq.sh
# realq10 (2026-12-05, from stage 14): the real queries and 265 k variants of them the teacher labelled
# (train/augment.py: cut, thinned, word-swapped and joined queries; EXTRA names the training set):
#   RUN=realq10 BUDGET=25 EXTRA=realqaug_train EXTRA_SHARE=0.35 LR=2e-4 NEAR=1 EMA=0.999 CORR=1 SEED=10 TERN_WORK=… DETACH=1 bash train/run_realq.sh
# realq11 (2026-12-05 evening, from stage 14; spans sessions: rerun the same command to resume):
# every run since stage 12 used 1e-4 to 2e-4 for <= 90 minutes and sat at one plateau; this one
# tries a long schedule at 5e-4 (stages 2-8 ran at 5e-4 to 1e-3):
#   RUN=realq11 BUDGET=180 EXTRA_SHARE=0.35 LR=5e-4 NEAR=1 EMA=0.999 CORR=1 SEED=11 TERN_WORK=… DETACH=1 bash train/run_realq.sh
# (resumed on 2026-12-05 at step 2 120 with BUDGET=140, the schedule shortened to end sooner; to
# resume again, rerun with BUDGET=140)
# realq12 (2026-12-05, from realq11's best, packed: a file, as --init takes): the low rate that
# climbs after realq11's excursion, with the dup share of the real queries doubled (dup fell there):
#   RUN=realq12 INIT=$TERN_WORK/realq11/ternlight-int4.bin BUDGET=60 EXTRA_SHARE=0.35 EXTRA_WEIGHT=web=50,questions=20,dup=30 LR=1e-4 NEAR=1 EMA=0.999 CORR=1 SEED=12 TERN_WORK=… DETACH=1 bash train/run_realq.sh
# (INIT: the starting model, default the shipped one; EXTRA_WEIGHT: the real queries' domain shares)
# realq12 shipped as stage 15. realq13 (same day, from stage 15, not shipped: +0.0004, within noise):
#   RUN=realq13 INIT=$TERN_WORK/realq12/ternlight-int4.bin BUDGET=40 EXTRA_SHARE=0.35 EXTRA_WEIGHT=web=50,questions=20,dup=30 LR=1e-4 NEAR=1 EMA=0.999 CORR=1 SEED=13 TERN_WORK=… DETACH=1 bash train/run_realq.sh
# realq14 (2026-12-05, from stage 15; spans sessions, rerun the same command to resume): realq11's
# excursion again, dup-weighted, to be followed by realq12's low-rate run from its best:
#   RUN=realq14 BUDGET=140 EXTRA_SHARE=0.35 EXTRA_WEIGHT=web=50,questions=20,dup=30 LR=5e-4 NEAR=1 EMA=0.999 CORR=1 SEED=14 TERN_WORK=… DETACH=1 bash train/run_realq.sh
# realq15 (from realq14's end) shipped as stage 16 from its step 1 400 (flat from step 1 000 to 1 940).
# realq16 (2026-12-05 evening, from stage 16): the cycle's high-rate half once more; stopped at step
# 7 880 (60 of 140 train-minutes) when its session ended, and lost with that machine's $TERN_WORK:
#   RUN=realq16 INIT=$TERN_WORK/stage16.bin BUDGET=140 EXTRA_SHARE=0.35 EXTRA_WEIGHT=web=50,questions=20,dup=30 LR=5e-4 NEAR=1 EMA=0.999 CORR=1 SEED=16 TERN_WORK=… DETACH=1 bash train/run_realq.sh
# realq17 + realq18 (2026-12-05 night, from stage 16): the cycle compressed into one session (a new
# machine starts without $TERN_WORK, so a run that spans sessions is lost): 45 train-minutes at 5e-4,
# then 20 at 1e-4 from its end (packed to a file first, as --init takes):
#   RUN=realq17 INIT=$TERN_WORK/stage16.bin BUDGET=45 EXTRA_SHARE=0.35 EXTRA_WEIGHT=web=50,questions=20,dup=30 LR=5e-4 NEAR=1 EMA=0.999 CORR=1 SEED=17 TERN_WORK=… DETACH=1 bash train/run_realq.sh
#   RUN=realq18 INIT=$TERN_WORK/realq17/ternlight-int4.bin BUDGET=20 EXTRA_SHARE=0.35 EXTRA_WEIGHT=web=50,questions=20,dup=30 LR=1e-4 NEAR=1 EMA=0.999 CORR=1 SEED=18 TERN_WORK=… DETACH=1 bash train/run_realq.sh
# realq19 (2026-12-06, from stage 17): the low rate from the folded model; level (0.87181 -> 0.87177
# over 700 steps), stopped:
#   RUN=realq19 INIT=models/ternlight-int4.bin BUDGET=80 EXTRA_SHARE=0.35 EXTRA_WEIGHT=web=50,questions=20,dup=30 LR=1e-4 NEAR=1 EMA=0.999 CORR=1 SEED=19 TERN_WORK=… DETACH=1 bash train/run_realq.sh
# dupspec and webspec (same day, diagnostics, not for shipping): a run given over to one domain,
# stopped at step 1 200 and packed from ema_last.npz (model card, "After stage 17"):
#   RUN=dupspec INIT=models/ternlight-int4.bin BUDGET=30 EXTRA_SHARE=0.6 EXTRA_WEIGHT=web=0,questions=0,dup=100 LR=2e-4 NEAR=1 EMA=0.999 CORR=1 SEED=21 TERN_WORK=… DETACH=1 bash train/run_realq.sh
#   RUN=webspec INIT=models/ternlight-int4.bin BUDGET=30 EXTRA_SHARE=0.8 EXTRA_WEIGHT=web=100,questions=0,dup=0 LR=2e-4 NEAR=1 EMA=0.999 CORR=1 SEED=22 TERN_WORK=… DETACH=1 bash train/run_realq.sh
# The call line below is `main "$@"; exit`: bash reads a whole line before running it, so nothing
# after it is read and the file may be edited while a run is under way (a function alone is not
# enough: after main returns bash reads on from where the call line ended).
# Needs run_real.sh's and run_broad.sh's data; labels what is missing first
# (pool shards, realq shards: both resumable, a no-op when complete).  One process, nice 19, 2 threads.
# realq15 (2026-12-05, from realq14's end: its student_final.npz packed to $TERN_WORK/realq14/ternlight-int4.bin
# with train/pack.py, since the excursion's best by dev may be its first evaluation, stage 15 itself):
#   RUN=realq15 INIT=$TERN_WORK/realq14/ternlight-int4.bin BUDGET=60 EXTRA_SHARE=0.35 EXTRA_WEIGHT=web=50,questions=20,dup=30 LR=1e-4 NEAR=1 EMA=0.999 CORR=1 SEED=15 TERN_WORK=… DETACH=1 bash train/run_realq.sh
# (The body is one function called on the last line: bash reads a running script as it goes, and
# a function is read whole before it runs, so editing this file while a run is under way is safe.)
main() {
set -euo pipefail
cd "$(dirname "$0")/.."
export TERN_WORK="${TERN_WORK:-$PWD/train/work}"
W="$TERN_WORK"
RUN="${RUN:-realq1}"
BUDGET="${BUDGET:-180}"
mkdir -p "$W/$RUN"
if [ "${DETACH:-0}" = 1 ]; then
  DETACH=0 RUN="$RUN" BUDGET="$BUDGET" INIT="${INIT:-}" EXTRA_WEIGHT="${EXTRA_WEIGHT:-}" EXTRA_SHARE="${EXTRA_SHARE:-0.5}" LR="${LR:-3e-4}" NEAR="${NEAR:-}" EMA="${EMA:-}" REL="${REL:-}" CORR="${CORR:-}" SEED="${SEED:-0}" EXTRA="${EXTRA:-realq_train}" DETACHED=1 setsid nohup bash "$0" >> "$W/$RUN/run.log" 2>&1 < /dev/null &
  echo "started in the background (pid $!); log: $W/$RUN/train.log, script output: $W/$RUN/run.log"
  exit 0
fi
# Detached, the run is its own session and so its own scheduler autogroup, where `nice` alone does
# nothing against other sessions' processes (cargo, benchmarks): lower the whole group instead.
[ "${DETACHED:-0}" = 1 ] && { echo 19 > /proc/self/autogroup; } 2>/dev/null || true
exec 9> "$W/$RUN/.lock"
flock -n 9 || { echo "$W/$RUN is already being trained by another process"; exit 1; }
echo "$(date -u '+%F %T') run_realq.sh: RUN=$RUN BUDGET=$BUDGET pid $$"
export OMP_NUM_THREADS=2 LABEL_THREADS=2
export XLA_FLAGS="${XLA_FLAGS:---xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=2}"
PY="nice -n 19 python3"
. train/fetch_teacher.sh

# 1. teacher labels still missing (shards appear only when complete; finished ones are skipped)
$PY train/label.py --pool --token-shards 10
EXTRA="${EXTRA:-realq_train}"
$PY train/label.py --shards "$W/$EXTRA.txt"
# the dev curve covers web / questions / dup (appended once; a no-op afterwards)
for d in web questions dup; do $PY train/pool.py append-dev $d; done

# 2. distillation from the shipped model; --resume starts fresh when the run has no checkpoint yet
$PY train/distil.py --init "${INIT:-models/ternlight-int4.bin}" --run "$RUN" --resume \
  --extra "$EXTRA" --extra-weight "${EXTRA_WEIGHT:-web=60,questions=25,dup=15}" --extra-share "${EXTRA_SHARE:-0.5}" --extra-mix step \
  --domain-weight faq=6,queries=1.3,webq=1.5,ents=1.5 \
  --lr "${LR:-3e-4}" --warmup-frac 0.01 --time-budget "$BUDGET" --ckpt-every 100 --eval-every 200 --save-best \
  --seed "${SEED:-0}" ${NEAR:+--near "$NEAR"} ${EMA:+--ema "$EMA"} ${REL:+--rel "$REL"} ${CORR:+--corr "$CORR"}
echo "$(date -u '+%F %T') run_realq.sh: done"
}
main "$@"; exit
