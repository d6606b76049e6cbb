#!/usr/bin/env python3
"""How much of each held-out domain's figure a model blind to word order can reach at all.

The student has no position embeddings and pools by the mean: its vector of a text is the same
for every order of the text's words (WordPiece splits each word alone, so the ids are the same
multiset). The teacher reads order. This script makes the teacher order-blind too: each test text's
words are shuffled K times (seeded), the teacher embeds every shuffle, and the normalised mean of
the K vectors stands for the text. Printed per domain: the teacher's mean cosine between a text and
one of its shuffles; the Spearman of that order-blind teacher's pair cosines against the real
teacher's (all pairs of the test set, as train/eval_domains.py scores a model; `protocol-all`:
Ternlight's 100 queries, all pairs), with one shuffle and
with K; and, for each model given, its own figure (engine, as eval_domains.py) and its share of the
order-blind reference. The reference is not a bound (the best order-blind function may do better
than the teacher's mean over orders) but it shows what word order alone is worth in each domain.

  TERN_WORK=... TEACHER_DIR=... python3 train/order_blind.py [--k 8] [--domains dup web ...]
      [--models models/ternlight-int4.bin]
"""
import argparse
import os
import random
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import eval_domains as E  # noqa: E402
import label as L  # noqa: E402


def shuffled(texts, seed):
    rng, out = random.Random(seed), []
    for t in texts:
        w = t.split()
        rng.shuffle(w)
        out.append(" ".join(w))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--domains", nargs="*", default=[])
    ap.add_argument("--models", nargs="*", default=[os.path.join(E.ROOT, "models", "ternlight-int4.bin")])
    args = ap.parse_args()
    tok, teacher = L.tokenizer(), L.OrtTeacher(L.onnx_path())
    engine = E.find_engine()
    vocab = os.path.join(E.ROOT, "models", "vocab.txt")
    want = set(args.domains) | ({"ternlight-protocol"} if "protocol-all" in args.domains else set())
    sets = E.load_sets(want)
    names = [d for d in sets if d not in ("old-test", "ternlight-protocol", "long@256", "long@windows")]
    head = f"{'domain':12s} {'cos(t, shuffled)':>17s} {'1 shuffle':>10s} {f'{args.k} shuffles':>11s}"
    print(head + "".join(f" {os.path.basename(m)[:18]:>19s} {'share':>6s}" for m in args.models))
    for d in names:
        texts, y, (i, j) = sets[d]
        ty = (y[i] * y[j]).sum(1)
        vs = []
        for k in range(args.k):
            e = L.embed_ort(teacher, [x.ids for x in tok.encode_batch(shuffled(texts, 1_000 + k))])
            vs.append(E.unit(e))
        one = (vs[0][i] * vs[0][j]).sum(1)
        avg = E.unit(sum(vs))
        ref = E.spearman((avg[i] * avg[j]).sum(1), ty)
        line = (f"{d:12s} {np.mean([(y * v).sum(1).mean() for v in vs]):17.3f} "
                f"{E.spearman(one, ty):10.4f} {ref:11.4f}")
        for m in args.models:
            s = E.embed(engine, m, texts, vocab)
            sp = E.spearman((s[i] * s[j]).sum(1), ty)
            line += f" {sp:19.4f} {sp / ref:6.3f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
