#!/usr/bin/env python3
"""Per-domain held-out evaluation + Ternlight's public quality protocol, for packed TERN v1 files.

  python3 train/eval_domains.py --models models/ternlight-int4.bin [more.bin ...]

Student vectors come from ternflow-engine (`ternflow embed --model FILE`, $TERNFLOW or
target/release/ternflow or /work/main/target/release/ternflow) when one exists, else from the numpy
reference tools/tern_ref.py (announced).  Printed per model:
  * per domain (test_<domain>.txt in $TERN_WORK, from train/sample_sets.py: held out by source
    document, never trained on, never used for model selection): Spearman of student vs teacher
    cosines over all pairs of the set;
  * old-test: the old dictionary corpus's test split (train/corpus.py, $OLD_WORK/test.txt): all pairs
    of its first 1 500 sentences, as in train/evaluate.py;
  * ternlight-protocol: Ternlight's eval/quality description: its 100 held-out MS MARCO queries,
    1 000 distinct unordered pairs (i != j) drawn with mulberry32(42) (i = floor(r*N), j = floor(r*N)),
    Spearman (average ranks) of student vs teacher pair cosines; teacher cosines from the vectors
    published with the queries.  The query file is not in git ($TERNLIGHT_QUERIES, default
    $TERN_WORK/../ternlight_eval/spearman_smoke_1k.json).  One draw of 1 000 pairs of 100 texts is
    noisy: after the table, each model's 95 % range over 1 000 other such draws is printed;
  * protocol-all: the same 100 queries, all 4 950 pairs (not Ternlight's figure: the same texts
    measured without the draw's noise);
  * long@256, long@windows: 556 held-out paragraphs of 150-962 tokens (train/long_texts.py build +
    teacher), the engine embedding each whole, against the teacher with its 256-token limit and over
    the same windows and pooling (not counted in min(domains)).
Teacher vectors: <set>_teacher.npy from train/label.py --files.  Results -> $TERN_WORK/eval_domains.json.
"""
import os
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import argparse
import glob
import json
import subprocess
import sys
import time

import numpy as np
from scipy.stats import rankdata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
WORK = os.environ.get("TERN_WORK", os.path.join(HERE, "work"))
OLD = os.environ.get("OLD_WORK", os.path.join(WORK, "..", "old"))
TQ = os.environ.get("TERNLIGHT_QUERIES", os.path.join(WORK, "..", "ternlight_eval", "spearman_smoke_1k.json"))
sys.path.insert(0, os.path.join(ROOT, "tools"))


def find_engine():
    for p in [os.environ.get("TERNFLOW", ""), os.path.join(ROOT, "target", "release", "ternflow"),
              "/work/main/target/release/ternflow"]:
        if p and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def embed(engine, model, texts, vocab):
    if engine:
        p = subprocess.run(["nice", "-n", "19", engine, "embed", "--model", model],
                           input="".join(t + "\n" for t in texts), capture_output=True, text=True, check=True)
        rows = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
        if len(rows) != len(texts):
            raise RuntimeError(f"engine returned {len(rows)} vectors for {len(texts)} lines")
        e = np.asarray(rows, np.float64)
    else:
        import tern_ref
        e = tern_ref.embed(tern_ref.load(model), tern_ref.Tokenizer(vocab), texts)
    return e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)


def spearman(a, b):
    return float(np.corrcoef(rankdata(a), rankdata(b))[0, 1])


def mulberry32(seed):
    s = seed & 0xFFFFFFFF

    def rnd():
        nonlocal s
        s = (s + 0x6D2B79F5) & 0xFFFFFFFF
        t = s
        t = ((t ^ (t >> 15)) * (t | 1)) & 0xFFFFFFFF
        t ^= (t + (((t ^ (t >> 7)) * (t | 61)) & 0xFFFFFFFF)) & 0xFFFFFFFF
        return ((t ^ (t >> 14)) & 0xFFFFFFFF) / 4294967296.0
    return rnd


def protocol_pairs(n, n_pairs=1000, seed=42):
    rnd = mulberry32(seed)
    target = min(n_pairs, n * (n - 1) // 2)
    seen, pairs = set(), []
    while len(pairs) < target:
        i, j = int(rnd() * n), int(rnd() * n)
        if i == j:
            continue
        k = (min(i, j), max(i, j))
        if k in seen:
            continue
        seen.add(k)
        pairs.append((i, j))
    return np.array(pairs)


def unit(x):
    x = np.asarray(x, np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def draw_range(s, y, draws=1000, n_pairs=1000, seed=0):
    """The 2.5th and 97.5th percentiles of the protocol's Spearman over `draws` other random draws
    of `n_pairs` distinct pairs of the same texts: how far one draw's figure is from another's."""
    rng = np.random.default_rng(seed)
    n, out = len(s), []
    for _ in range(draws):
        i, j = rng.integers(0, n, 4 * n_pairs), rng.integers(0, n, 4 * n_pairs)
        a, b = np.minimum(i, j), np.maximum(i, j)
        keep = a != b
        _, first = np.unique(a[keep] * n + b[keep], return_index=True)
        first = np.sort(first)[:n_pairs]
        a, b = a[keep][first], b[keep][first]
        out.append(spearman((s[a] * s[b]).sum(1), (y[a] * y[b]).sum(1)))
    return [float(v) for v in np.percentile(out, [2.5, 97.5])]


def load_sets(names):
    sets = {}
    for p in sorted(glob.glob(os.path.join(WORK, "test_*.txt"))):
        d = os.path.basename(p)[5:-4]
        if names and d not in names:
            continue
        t = [l.rstrip("\n") for l in open(p, encoding="utf-8")]
        y = unit(np.load(p[:-4] + "_teacher.npy"))
        iu = np.triu_indices(len(t), 1)
        sets[d] = (t, y, iu)
    old = os.path.join(OLD, "test.txt")
    if (not names or "old-test" in names) and os.path.exists(old):
        t = [l.rstrip("\n") for l in open(old, encoding="utf-8")]
        y = unit(np.load(os.path.join(OLD, "test_teacher.npy")))
        sets["old-test"] = (t, y, np.triu_indices(min(1500, len(t)), 1))
    if (not names or "ternlight-protocol" in names) and os.path.exists(TQ):
        items = json.load(open(TQ))
        t = [it["text"] for it in items]
        y = unit([it["teacher_emb"] for it in items])
        pr = protocol_pairs(len(t))
        sets["ternlight-protocol"] = (t, y, (pr[:, 0], pr[:, 1]))
        if not names or "protocol-all" in names:
            sets["protocol-all"] = (t, y, np.triu_indices(len(t), 1))
    long_tsv = os.path.join(WORK, "long_test.tsv")
    for name, ref in (("long@256", "long_test_t256.npy"), ("long@windows", "long_test_twin.npy")):
        if (not names or name in names) and os.path.exists(os.path.join(WORK, ref)):
            t = [l.rstrip("\n").split("\t", 1)[1] for l in open(long_tsv, encoding="utf-8")]
            y = unit(np.load(os.path.join(WORK, ref)))
            sets[name] = (t, y, np.triu_indices(len(t), 1))
    return sets


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--sets", nargs="*", default=[], help="restrict to these set names")
    ap.add_argument("--vocab", default=os.path.join(ROOT, "models", "vocab.txt"))
    ap.add_argument("--out", default=os.path.join(WORK, "eval_domains.json"))
    args = ap.parse_args()
    engine = find_engine()
    print(f"backend: {engine or 'tools/tern_ref.py (numpy reference: no ternflow release binary found)'}")
    sets = load_sets(set(args.sets))
    res = {"backend": engine or "tools/tern_ref.py", "sets": {k: len(v[0]) for k, v in sets.items()},
           "pairs": {k: int(len(v[2][0])) for k, v in sets.items()}, "models": {}}
    names = list(sets)
    print("model".ljust(34) + "".join(n[:10].rjust(11) for n in names) + "   min(domains)")
    for model in args.models:
        r = {}
        t0 = time.time()
        for name, (texts, y, (i, j)) in sets.items():
            s = embed(engine, model, texts, args.vocab)
            r[name] = spearman((s[i] * s[j]).sum(1), (y[i] * y[j]).sum(1))
            if name == "ternlight-protocol":
                r["protocol_draws_95"] = draw_range(s, y)
        dom = [v for k, v in r.items()
               if k not in ("old-test", "ternlight-protocol", "protocol-all", "protocol_draws_95",
                            "long@256", "long@windows")]
        r["min_domain"] = min(dom) if dom else float("nan")
        r["seconds"] = time.time() - t0
        res["models"][os.path.relpath(os.path.abspath(model), ROOT)] = r
        print(os.path.relpath(os.path.abspath(model), ROOT)[:33].ljust(34)
              + "".join(f"{r[n]:11.4f}" for n in names) + f"   {r['min_domain']:.4f}", flush=True)
    print("pairs per set: " + ", ".join(f"{k} {v}" for k, v in res["pairs"].items()))
    for model, r in res["models"].items():
        if "protocol_draws_95" in r:
            lo, hi = r["protocol_draws_95"]
            print(f"{model}: ternlight-protocol over 1 000 other draws of 1 000 pairs, 95 %: "
                  f"[{lo:.4f}, {hi:.4f}]")
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
