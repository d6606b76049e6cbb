#!/usr/bin/env python3
"""Leakage test for train/queries_real.py's files (issue 30).

  TERN_WORK=/work/cache/model/work python3 train/test_leakage.py

Asserts, on the files in $TERN_WORK:
  1. none of Ternlight's protocol queries ($TERNLIGHT_QUERIES, default
     $TERN_WORK/../ternlight_eval/spearman_smoke_1k.json) is in the training or dev texts (realq_train.txt,
     {web,questions,dup}_{train,dev}.tsv, dev_{web,questions,dup}.tsv) or the test sets, neither by the
     normalised key (queries_real.key) nor as a near-duplicate with token Jaccard >= 0.8; the same for
     realqaug_train.txt (train/augment.py's variants) when it exists;
  2. teacher cosine < 0.95 to every protocol query for every text whose teacher label exists
     (labels/realq_train_NNNN.npy and labels/realqaug_train_NNNN.npy shards finished so far,
     dev_*_teacher.npy, test_*_teacher.npy);
     prints how many texts this covered;
  3. no dev or test text (by key) is in the training texts, and dev and test are disjoint;
  4. the finished label shards are float16 [n, 384], unit-norm rows, one row per text.
Exit status 0 when all hold.
"""
import glob
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from queries_real import COS_DROP, DOMAINS, JACCARD_DROP, TQ, WORK, key  # noqa: E402

SHARD = 10000


def lines(p):
    return [l.rstrip("\n") for l in open(p, encoding="utf-8")]


def tsv_texts(p, col):
    return [l.split("\t")[col] for l in lines(p)]


def main():
    W = WORK
    if not os.path.exists(TQ):
        sys.exit(f"FAIL: missing {TQ} (Ternlight's protocol queries)")
    items = json.load(open(TQ))
    pk = [key(it["text"]) for it in items]
    ptok = [set(k.split()) for k in pk]
    ref = np.array([it["teacher_emb"] for it in items], np.float32)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)

    # The training texts: the real queries, and their labelled variants when made.
    stems = {"realq_train": lines(os.path.join(W, "realq_train.txt"))}
    if os.path.exists(os.path.join(W, "realqaug_train.txt")):
        stems["realqaug_train"] = lines(os.path.join(W, "realqaug_train.txt"))
    sets = {f"{stem}.txt": texts for stem, texts in stems.items()}
    for d in DOMAINS:
        for sp in ("train", "dev", "test"):
            sets[f"{d}_{sp}.tsv"] = tsv_texts(os.path.join(W, f"{d}_{sp}.tsv"), 2)
        sets[f"dev_{d}.tsv"] = tsv_texts(os.path.join(W, f"dev_{d}.tsv"), 1)
        sets[f"test_{d}.txt"] = lines(os.path.join(W, f"test_{d}.txt"))
    ok = True

    # 1. exact key and token-Jaccard near-duplicates
    pset = set(pk)
    for name, texts in sets.items():
        exact = near = 0
        for t in texts:
            k = key(t)
            if k in pset:
                exact += 1
                continue
            toks = set(k.split())
            if any(len(toks & p) / len(toks | p) >= JACCARD_DROP for p in ptok if toks & p):
                near += 1
        print(f"{name:24s} {len(texts):7d} texts: {exact} protocol queries, {near} Jaccard>={JACCARD_DROP} near-duplicates")
        ok &= exact == 0 and near == 0

    # 2. teacher cosine on whatever is labelled
    covered, worst = 0, (-1.0, "", "")
    shards = [(p, stem) for stem in stems
              for p in sorted(glob.glob(os.path.join(W, "labels", f"{stem}_[0-9][0-9][0-9][0-9].npy")))]
    for p, stem in shards:
        s = int(p[-8:-4])
        y = np.load(p).astype(np.float32)
        chunk = stems[stem][s * SHARD:(s + 1) * SHARD]
        # 4. shard sanity
        if y.dtype != np.float32 or np.load(p, mmap_mode="r").dtype != np.float16 or y.shape != (len(chunk), 384):
            print(f"FAIL: {p}: dtype {np.load(p, mmap_mode='r').dtype} shape {y.shape} for {len(chunk)} texts")
            ok = False
            continue
        n = np.linalg.norm(y, axis=1)
        if abs(n - 1).max() > 2e-3:
            print(f"FAIL: {p}: row norms {n.min():.4f}..{n.max():.4f}")
            ok = False
        sims = (y / n[:, None]) @ ref.T
        covered += len(y)
        i, j = np.unravel_index(sims.argmax(), sims.shape)
        if sims[i, j] > worst[0]:
            worst = (float(sims[i, j]), chunk[i], items[j]["text"])
    for d in DOMAINS:
        for name in (f"dev_{d}.tsv", f"test_{d}.txt"):
            p = os.path.join(W, os.path.splitext(name)[0] + "_teacher.npy")
            if not os.path.exists(p):
                continue
            y = np.load(p).astype(np.float32)
            texts = sets[name]
            assert len(y) == len(texts), f"{p}: {len(y)} rows for {len(texts)} texts"
            sims = (y / np.linalg.norm(y, axis=1, keepdims=True)) @ ref.T
            covered += len(y)
            i, j = np.unravel_index(sims.argmax(), sims.shape)
            if sims[i, j] > worst[0]:
                worst = (float(sims[i, j]), texts[i], items[j]["text"])
    total = sum((len(t) + SHARD - 1) // SHARD for t in stems.values())
    print(f"teacher cosine checked for {covered} texts ({len(shards)} of {total} "
          f"{' + '.join(stems)} shards + labelled dev/test sets); max cosine to a protocol query {worst[0]:.4f} "
          f"({worst[1]!r} ~ {worst[2]!r})")
    ok &= worst[0] < COS_DROP

    # 3. split disjointness
    tk = {key(t) for texts in stems.values() for t in texts}
    for d in DOMAINS:
        dv = {key(t) for t in sets[f"{d}_dev.tsv"]}
        te = {key(t) for t in sets[f"{d}_test.tsv"]}
        a, b, c = len(dv & tk), len(te & tk), len(dv & te)
        print(f"{d}: dev∩train {a}, test∩train {b}, dev∩test {c}")
        ok &= a == b == c == 0
    print("OK: no leakage" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
