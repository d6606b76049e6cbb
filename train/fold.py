#!/usr/bin/env python3
"""A closed-form correction of the student's last layer (stage 17): a linear map W fitted by ridge
least squares from the student's vectors to the teacher's on training texts, folded into the fp32
projection, so the packed file keeps its format, size and speed.

The engine computes z = pool @ proj^T + proj_b and returns z / |z|. W has no bias, so e @ W (e the
student's normalised vector) points the same way as z @ W, and W folds exactly:
proj' = W^T proj, proj_b' = proj_b W (checked: the folded forward's dev figures are the map's).

Fitted on training texts only: PER (6 000) drawn from each pool domain and each real-query domain
(MULT=dup=3 draws three times as many of a domain), with the teacher's labels from
$TERN_WORK/labels. Scored on the dev sets for each ridge strength in LAMBDAS; the best by dev mean
is folded and saved for pack.py.

  TERN_WORK=... TEACHER_DIR=... PER=6000 MULT=dup=3 python3 train/fold.py MODEL.bin|PARAMS.npz OUT.npz
"""
import os
import sys

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import jax.numpy as jnp  # noqa: E402

import distil as D  # noqa: E402
import train as TR  # noqa: E402


def shards(work, stem):
    out, s = [], 0
    while os.path.exists(p := f"{work}/labels/{stem}_{s:04d}.npy"):
        out.append(np.load(p, mmap_mode="r"))
        s += 1
    return np.concatenate(out)


def draw(rng, texts, doms, y, per, mult):
    """`per` (× the domain's multiplier) texts of each domain, with their teacher vectors."""
    tx, ys = [], []
    doms = np.asarray(doms[:len(y)])
    for d in sorted(set(doms)):
        idx = np.where(doms == d)[0]
        idx = rng.choice(idx, min(per * mult.get(d, 1), len(idx)), replace=False)
        tx += [texts[i] for i in idx]
        ys.append(np.asarray(y[idx], np.float32))
    return tx, ys


def scores(e, y, dom, names):
    sp = TR.domain_spearman(e, y, dom, names)
    return np.mean(list(sp.values())), " ".join(f"{k} {v:.4f}" for k, v in sp.items())


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    work = os.environ.get("TERN_WORK", TR.WORK)
    per = int(os.environ.get("PER", "6000"))
    mult = {k: int(v) for k, v in (kv.split("=") for kv in os.environ.get("MULT", "").split(",") if kv)}
    lambdas = [float(x) for x in os.environ.get("LAMBDAS", "0.3,1,3").split(",")]
    tok = TR.get_tokenizer()
    dom, ids, y, names = TR.load_dev(work, tok)
    params = TR.params_from_npz(src) if src.endswith(".npz") else D.params_from_tern(src)
    rng = np.random.default_rng(0)
    read = lambda f: [l.rstrip("\n") for l in open(f"{work}/{f}", encoding="utf-8")]  # noqa: E731
    t1, y1 = draw(rng, read("pool.txt"), read("pool_domains.txt"), shards(work, "pool"), per, mult)
    t2, y2 = draw(rng, read("realq_train.txt"), read("realq_train_domains.txt"),
                  shards(work, "realq_train"), per, mult)
    X = TR.embed_student(params, [e.ids for e in tok.encode_batch(t1 + t2)])
    Y = np.concatenate(y1 + y2)
    print(f"fit on {len(X)} training texts (student-teacher cos {(X * Y).sum(1).mean():.4f})", flush=True)
    e = TR.embed_student(params, ids)
    m, line = scores(e, y, dom, names)
    print(f"as is: dev mean {m:.4f} | {line}", flush=True)
    best = None
    for lam in lambdas:
        W = np.linalg.solve(X.T @ X + lam * np.eye(X.shape[1], dtype=np.float32), X.T @ Y)
        f = e @ W
        f /= np.linalg.norm(f, axis=1, keepdims=True)
        m, line = scores(f, y, dom, names)
        print(f"ridge {lam}: dev mean {m:.4f} | {line}", flush=True)
        if best is None or m > best[0]:
            best = (m, lam, W)
    _, lam, W = best
    p = dict(params)
    p["proj"] = jnp.asarray(W.T @ np.asarray(params["proj"]))
    p["proj_b"] = jnp.asarray(np.asarray(params["proj_b"]) @ W)
    m, line = scores(TR.embed_student(p, ids), y, dom, names)
    print(f"folded (ridge {lam}): dev mean {m:.4f} | {line}", flush=True)
    TR.params_to_npz(out, p)
    print(f"saved {out}")


if __name__ == "__main__":
    main()
