#!/usr/bin/env python3
"""Refit the student's last layer, the fp32 projection, on frozen features (stage 18).

The engine computes z = pool @ proj^T + proj_b and returns z / |z|; everything before `pool` (the
mean of the final layer's token states) is ternary and int4 and stays as it is.  train/fold.py
corrected the projection with a ridge map on the normalised output; this script refits proj and
proj_b themselves with the training loss (1 - cosine to the teacher, the batch's pair-cosine
squared error and correlation: distil.py's terms) by Adam on the pooled features of training texts,
computed once.  A step costs a matrix product instead of a forward pass through the model, so a
full fit over hundreds of thousands of texts takes minutes on two cores.

Training texts only: PER (20 000) drawn from each pool domain and each real-query domain (MULT=dup=3
draws three times as many of a domain), with the teacher's labels from $TERN_WORK/labels (fold.py's
draw).  The dev sets pick the step (as distil.py's --save-best does); the test sets are not read.
BYDOM=1 draws each batch from one domain (the dev and test figures rank pairs within a domain);
0 mixes them.  REL, CORR: the loss weights (distil.py's --rel 8, --corr 1 by default).

  TERN_WORK=... TEACHER_DIR=... python3 train/head.py MODEL.bin|PARAMS.npz OUT.npz
"""
import os
import sys
import time

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

import distil as D  # noqa: E402
import fold as F  # noqa: E402
import train as TR  # noqa: E402


def env(name, default, kind=float):
    return kind(os.environ.get(name, default))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    work = os.environ.get("TERN_WORK", TR.WORK)
    per = env("PER", "20000", int)
    mult = {k: int(v) for k, v in (kv.split("=") for kv in os.environ.get("MULT", "").split(",") if kv)}
    steps, batch, lr = env("STEPS", "4000", int), env("BATCH", "512", int), env("LR", "1e-4")
    rel, corr, by_dom = env("REL", "8"), env("CORR", "1"), env("BYDOM", "1", int)
    every = env("EVAL_EVERY", "250", int)
    t0 = time.time()
    tok = TR.get_tokenizer()
    dom, ids, y, names = TR.load_dev(work, tok)
    params = TR.params_from_npz(src) if src.endswith(".npz") else D.params_from_tern(src)
    rng = np.random.default_rng(0)
    read = lambda f: [l.rstrip("\n") for l in open(f"{work}/{f}", encoding="utf-8")]  # noqa: E731
    t1, y1 = F.draw(rng, read("pool.txt"), read("pool_domains.txt"), F.shards(work, "pool"), per, mult)
    t2, y2 = F.draw(rng, read("realq_train.txt"), read("realq_train_domains.txt"),
                    F.shards(work, "realq_train"), per, mult)
    group = np.concatenate([np.full(len(v), i) for i, v in enumerate(y1 + y2)])
    X = TR.embed_student(params, [e.ids for e in tok.encode_batch(t1 + t2)], pooled=True)
    Y = np.concatenate(y1 + y2)
    Xd = TR.embed_student(params, ids, pooled=True)
    print(f"features of {len(X)} training texts in {len(y1 + y2)} domain draws and {len(Xd)} dev "
          f"texts: {time.time() - t0:.0f} s", flush=True)

    def dev_score(h):
        z = Xd @ np.asarray(h["proj"]).T + np.asarray(h["proj_b"])
        z /= np.linalg.norm(z, axis=1, keepdims=True)
        return F.scores(z, y, dom, names)

    head = {"proj": jnp.asarray(params["proj"]), "proj_b": jnp.asarray(params["proj_b"])}
    m0, line = dev_score(head)
    print(f"as is: dev mean {m0:.4f} | {line}", flush=True)
    best = (m0, 0, head)

    def loss_fn(h, x, t):
        z = x @ h["proj"].T + h["proj_b"]
        e = z / jnp.maximum(jnp.linalg.norm(z, axis=-1, keepdims=True), 1e-12)
        l_cos = (1.0 - (e * t).sum(1)).mean()
        off = 1.0 - jnp.eye(e.shape[0])
        Ss, St = e @ e.T, t @ t.T
        l_rel = (((Ss - St) ** 2) * off).sum() / off.sum()
        ms, mt = (Ss * off).sum() / off.sum(), (St * off).sum() / off.sum()
        xs, ys = (Ss - ms) * off, (St - mt) * off
        l_corr = 1.0 - (xs * ys).sum() / jnp.sqrt((xs * xs).sum() * (ys * ys).sum() + 1e-12)
        return l_cos + rel * l_rel + corr * l_corr

    opt = optax.adam(optax.cosine_decay_schedule(lr, steps))
    state = opt.init(head)

    @jax.jit
    def step(h, s, x, t):
        loss, g = jax.value_and_grad(loss_fn)(h, x, t)
        u, s = opt.update(g, s, h)
        return optax.apply_updates(h, u), s, loss

    members = [np.where(group == g)[0] for g in range(group.max() + 1)]
    sizes = np.array([len(m) for m in members], np.float64)
    total = 0.0
    for i in range(1, steps + 1):
        if by_dom:
            g = rng.choice(len(members), p=sizes / sizes.sum())
            idx = rng.choice(members[g], batch, replace=len(members[g]) < batch)
        else:
            idx = rng.choice(len(X), batch, replace=False)
        head, state, loss = step(head, state, jnp.asarray(X[idx]), jnp.asarray(Y[idx]))
        total += float(loss)
        if i % every == 0 or i == steps:
            m, line = dev_score(head)
            print(f"step {i} loss {total / every:.4f} dev mean {m:.4f} | {line}", flush=True)
            total = 0.0
            if m > best[0]:
                best = (m, i, head)
    m, i, head = best
    print(f"best: step {i}, dev mean {m:.4f} (as is {m0:.4f}); {time.time() - t0:.0f} s", flush=True)
    p = dict(params)
    p["proj"], p["proj_b"] = head["proj"], head["proj_b"]
    m, line = F.scores(TR.embed_student(p, ids), y, dom, names)
    print(f"refitted, through the whole forward: dev mean {m:.4f} | {line}", flush=True)
    TR.params_to_npz(out, p)
    print(f"saved {out}")


if __name__ == "__main__":
    main()
