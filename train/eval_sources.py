#!/usr/bin/env python3
"""Where a held-out domain's Spearman is lost: per source and per pair of sources.

  TERN_WORK=… python3 train/eval_sources.py [--model models/ternlight-int4.bin] [--domains dup web]

For each domain with a test_<domain>.txt and sources_test_<domain>.txt in $TERN_WORK (the query
domains of train/realq.py), prints for every source (and every pair of sources with >= --min texts
each): the student's and the teacher's mean pair cosine, their difference, the teacher's spread,
and the Spearman of student vs teacher cosines over those pairs; then the whole set's Spearman (the
figure train/eval_domains.py reports).  A mixed set scores below each of its parts when the student
shifts one source's cosines against the others' (an offset the per-source figures cannot see), and
pairs across unrelated sources (teacher cosines near 0 with a small spread) rank worst.
"""
import argparse
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eval_domains as E  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(E.ROOT, "models", "ternlight-int4.bin"))
    ap.add_argument("--domains", nargs="*", default=["dup", "questions", "web"])
    ap.add_argument("--min", type=int, default=20, help="sources with fewer test texts are left out")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    engine = E.find_engine()
    for dom in args.domains:
        tp = os.path.join(E.WORK, f"test_{dom}.txt")
        sp = os.path.join(E.WORK, f"sources_test_{dom}.txt")
        if not (os.path.exists(tp) and os.path.exists(sp)):
            print(f"{dom}: no {tp} or {sp}; skipped")
            continue
        texts = [l.rstrip("\n") for l in open(tp, encoding="utf-8")]
        src = np.array([l.strip() for l in open(sp, encoding="utf-8")])
        y = E.unit(np.load(tp[:-4] + "_teacher.npy"))
        x = E.embed(engine, args.model, texts, None)
        S, T = x @ x.T, y @ y.T
        srcs = [s for s in sorted(set(src)) if (src == s).sum() >= args.min]
        print(f"{dom}: {len(texts)} texts; sources with >= {args.min}: "
              + ", ".join(f"{s} {(src == s).sum()}" for s in srcs))
        print(f"  {'pairs of':40s} {'student':>8s} {'teacher':>8s} {'diff':>7s} {'sd(t)':>6s} {'spearman':>8s}")
        for i, a in enumerate(srcs):
            for b in srcs[i:]:
                ia, ib = np.where(src == a)[0], np.where(src == b)[0]
                m = np.ones((len(ia), len(ib)), bool)
                if a == b:
                    m = np.triu(m, 1)
                s, t = S[np.ix_(ia, ib)][m], T[np.ix_(ia, ib)][m]
                name = a if a == b else f"{a} x {b}"
                print(f"  {name[:40]:40s} {s.mean():+8.3f} {t.mean():+8.3f} {s.mean() - t.mean():+7.3f} "
                      f"{t.std():6.3f} {E.spearman(s, t):8.4f}")
        iu = np.triu_indices(len(texts), 1)
        print(f"  {'all pairs of the set':40s} {S[iu].mean():+8.3f} {T[iu].mean():+8.3f} "
              f"{S[iu].mean() - T[iu].mean():+7.3f} {T[iu].std():6.3f} {E.spearman(S[iu], T[iu]):8.4f}")


if __name__ == "__main__":
    main()
