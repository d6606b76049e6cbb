#!/usr/bin/env python3
"""Evaluate packed Ternlight files against the teacher on the held-out test split.

  python3 train/evaluate.py [--models models/ternlight-int4.bin ...] [--pairs-n 1500]

Student vectors come from the packed file run through ternflow-engine (`target/release/ternflow embed
--model FILE`, UTF-8 lines on stdin, one JSON array per line on stdout).  If that binary does not
exist yet, it falls back to the numpy reference tools/tern_ref.py and says so loudly.
Printed per file:
  * Spearman and Pearson between student and teacher cosines over all pairs of the first
    --pairs-n test sentences (1500 -> 1 124 250 pairs);
  * recall@10: overlap of the student's and the teacher's 10 nearest neighbours (self excluded)
    over all test sentences;
  * min / mean cosine between the packed file's vectors and the training code's quantised forward
    (train/model.py with the same embedding quantisation) when train/work/student_final.npz exists;
  * when both the engine and the reference are available: their min cosine (parity).
Results are also written to train/work/eval_results.json.
"""
import os
# one BLAS thread: small per-sentence matmuls on a busy 2-core box slow down 10x with threading
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
WORK = os.path.join(HERE, "work")
ENGINE = os.path.join(ROOT, "target", "release", "ternflow")
sys.path.insert(0, os.path.join(ROOT, "tools"))


def engine_embed(model, texts):
    p = subprocess.run([ENGINE, "embed", "--model", model], input="".join(t + "\n" for t in texts),
                       capture_output=True, text=True, check=True)
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    if len(rows) != len(texts):
        raise RuntimeError(f"engine returned {len(rows)} vectors for {len(texts)} lines")
    return np.asarray(rows, np.float64)


def ref_embed(model, texts, vocab):
    import tern_ref
    m = tern_ref.load(model)
    tok = tern_ref.Tokenizer(vocab)
    return tern_ref.embed(m, tok, texts)


def spearman(a, b):
    ra = np.empty(len(a)); ra[np.argsort(a, kind="stable")] = np.arange(len(a))
    rb = np.empty(len(b)); rb[np.argsort(b, kind="stable")] = np.arange(len(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def unit(x):
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def recall_at_k(s, t, k=10):
    S, T = s @ s.T, t @ t.T
    np.fill_diagonal(S, -np.inf)
    np.fill_diagonal(T, -np.inf)
    ns = np.argpartition(-S, k, axis=1)[:, :k]
    nt = np.argpartition(-T, k, axis=1)[:, :k]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(ns, nt)]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--split", default="test")
    ap.add_argument("--pairs-n", type=int, default=1500)
    ap.add_argument("--vocab", default=os.path.join(ROOT, "models", "vocab.txt"))
    ap.add_argument("--params", default=os.path.join(WORK, "student_final.npz"))
    ap.add_argument("--no-train-check", action="store_true")
    args = ap.parse_args()
    if args.models is None:
        args.models = [p for p in [os.path.join(ROOT, "models", "ternlight-int4.bin"),
                                   os.path.join(ROOT, "models", "ternlight-ternary.bin"),
                                   os.path.join(ROOT, "models", "ternlight-int8.bin"),
                                   os.path.join(WORK, "ternlight-int8.bin")] if os.path.exists(p)]
    texts = [l.rstrip("\n") for l in open(os.path.join(WORK, args.split + ".txt"), encoding="utf-8")]
    teacher = unit(np.load(os.path.join(WORK, args.split + "_teacher.npy")).astype(np.float64))
    assert len(texts) == len(teacher)
    have_engine = os.path.exists(ENGINE) and os.access(ENGINE, os.X_OK)
    if not have_engine:
        print("=" * 78 + "\n!! NOTE: target/release/ternflow not found: student vectors come from the numpy\n"
              "!! reference tools/tern_ref.py, NOT from ternflow-engine.  Re-run once\n"
              "!! `cargo build --release -p ternflow-cli` has produced the binary.\n" + "=" * 78, flush=True)
    n = min(args.pairs_n, len(texts))
    iu = np.triu_indices(n, 1)
    t_cos = (teacher[:n] @ teacher[:n].T)[iu]
    results = {"split": args.split, "sentences": len(texts), "pairs": int(len(t_cos)),
               "backend": "ternflow-engine" if have_engine else "tools/tern_ref.py", "models": {}}
    print(f"{args.split}: {len(texts)} held-out sentences, {len(t_cos)} pairs (all pairs of the first {n}), "
          f"backend: {results['backend']}", flush=True)
    params = None
    if not args.no_train_check and os.path.exists(args.params):
        sys.path.insert(0, HERE)
        from train import params_from_npz
        params = params_from_npz(args.params)
    for model in args.models:
        t0 = time.time()
        if have_engine:
            s = engine_embed(model, texts)
        else:
            s = ref_embed(model, texts, args.vocab)
        dt = time.time() - t0
        s = unit(s)
        s_cos = (s[:n] @ s[:n].T)[iu]
        r = dict(size=os.path.getsize(model),
                 spearman=spearman(s_cos, t_cos), pearson=float(np.corrcoef(s_cos, t_cos)[0, 1]),
                 recall_at_10=recall_at_k(s, teacher, 10),
                 mean_cos_to_teacher=float((s * teacher).sum(1).mean()), embed_seconds=dt)
        line = (f"{os.path.relpath(model, ROOT)} ({r['size']} bytes): spearman {r['spearman']:.4f} "
                f"pearson {r['pearson']:.4f} recall@10 {r['recall_at_10']:.4f} "
                f"mean cos(student, teacher) {r['mean_cos_to_teacher']:.4f}")
        if have_engine:
            ref = unit(ref_embed(model, texts, args.vocab))
            c = (ref * s).sum(1)
            r["engine_vs_ref_min_cos"] = float(c.min())
            line += f" | engine vs tern_ref min cos {c.min():.6f}"
        if params is not None:
            from train import embed_student
            import tern_ref
            tok = tern_ref.Tokenizer(args.vocab)
            fmt = tern_ref.load(model)["format"]
            tr = unit(embed_student(params, tok.encode_batch(texts), quant=True,
                                    emb_format=None if fmt == "fp32" else fmt))
            c = (tr * s).sum(1)
            r["packed_vs_training_min_cos"] = float(c.min())
            r["packed_vs_training_mean_cos"] = float(c.mean())
            line += f" | packed vs training quantised forward: min cos {c.min():.6f} mean {c.mean():.6f}"
        print(line, flush=True)
        results["models"][os.path.relpath(model, ROOT)] = r
    with open(os.path.join(WORK, "eval_results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
