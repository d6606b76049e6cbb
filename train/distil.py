#!/usr/bin/env python3
"""Broad-corpus distillation of the Ternlight student (issue 13), resumable, CPU or GPU (JAX).

  python3 train/distil.py --init models/ternlight-int4.bin --lr 1e-3 --tok 0 --time-budget 50 [--resume]

Data: $TERN_WORK/pool.txt with the teacher labels that train/label.py --pool has finished
(labels/pool_NNNN.npy; a shard still being written is not used), the teacher's last-layer token states
where they were kept (labels/pool_NNNN_tok.npy), and the per-domain dev set dev.tsv (+ dev_teacher.npy)
for the curve.  The per-domain test sets are never read here.

Extra set (--extra STEM, issue 30: --extra realq_train): $TERN_WORK/STEM.txt, its domains
STEM_domains.txt and the complete label shards labels/STEM_NNNN.npy (train/label.py --shards; the texts
of the first missing or short shard and after it are left out).  --extra-weight gives each extra domain
its share of the extra draws (web=60,questions=25,dup=15: Ternlight's mix), whatever its count.
--extra-share is the fraction of the training drawn from it, blended with the pool so that the pool's
domains keep being trained:
  --extra-mix step   (default) each step draws its whole batch from the extra set with probability
                     --extra-share, else from the pool; batches stay length-bucketed (short queries are
                     not padded to the pool's lengths) and the relation term sees query-query pairs, the
                     structure Ternlight's protocol ranks;
  --extra-mix batch  every batch holds round(share * batch) extra texts beside the pool's, padded
                     together to the longest.
Without --extra the run is the pool-only run, draw for draw.  The protocol's 100 queries are a test set:
nothing here reads them; --save-best keeps <run>/student_best.npz at the best dev mean.

Init (--init): a packed TERN v1 file (the shipped model: its ternary codes become latent weights
codes / (w_scale * mean|codes|), which re-quantise to the same codes and the same w_scale, so the
first forward is the file's forward), a float checkpoint (.npz from train.py / distil.py), or
'teacher' (MiniLM layers 0-1, as train.py does).

Loss = (1 - cos(student, teacher))                              final vector
     + --rel * mean over in-batch pairs (cos_s - cos_t)^2       pair structure (what Spearman measures)
     + --spread * relu(mean cos_s - mean cos_t)
     + --tok * mean over real tokens (1 - cos(student token state, teacher token state))
       for the texts whose teacher token states were kept (projected student states before pooling).
Quantised forward throughout (ternary weights, int8 activations, STE) with --emb-format fake-quant of
the embedding rows (default int4, the file format), AdamW, linear warm-up then cosine to 5 % of --lr,
time-aware: progress = max(step/steps, train_time/budget), where a step counts at most 5x the median of the
last 50 steps (a process stopped with SIGSTOP while a benchmark runs, or a JIT compile, is not training).
--near F (issue 30, "near and far pairs"): a share F of each batch is the teacher-space nearest neighbours
of the batch's first texts (searched among --near-cand draws of the same source and length bucket), the
rest stays random: the relation term then ranks near pairs too, not only far ones.
--ema D: the weights evaluated, selected (--save-best) and saved are an exponential moving average of the
trained ones (decay D per step), checkpointed beside them (<run>/ema_last.npz).
Checkpoint every --ckpt-every steps to
$TERN_WORK/<run>/ckpt_last.npz (params, Adam state, step, RNG, train time); --resume continues.
Log: <run>/train.log, curve: <run>/curve.tsv (per-domain dev Spearman).  Output: <run>/student_final.npz
(pack with train/pack.py --params).

Device-agnostic: on a CUDA machine with jax[cuda] installed the same command runs on the GPU (XLA picks
the backend); nothing here assumes a CPU.
"""
import argparse
import glob
import json
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=2")
from functools import partial

import numpy as np
import jax
import jax.numpy as jnp
import optax

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import model as M  # noqa: E402
import train as TR  # noqa: E402  (tokenizer, padding, buckets, checkpoints, npz params)

WORK = os.environ.get("TERN_WORK", os.path.join(HERE, "work"))
BUCKETS = TR.BUCKETS


def log(run_dir, msg):
    line = time.strftime("%H:%M:%S ") + msg
    print(line, flush=True)
    with open(os.path.join(run_dir, "train.log"), "a") as f:
        f.write(line + "\n")


def params_from_tern(path):
    """Latent float parameters whose quantised forward is exactly the packed file's forward."""
    import tern_ref
    m = tern_ref.load(path)
    layers = []
    for L in m["layers"]:
        def lat(codes, ws):
            frac = max(float(np.abs(codes).mean()), 1e-8)
            return (codes / (ws * frac)).astype(np.float32)
        layers.append(dict(
            ln1_w=L["ln1_w"], ln1_b=L["ln1_b"], wq=lat(L["wq"], L["sq"]), wk=lat(L["wk"], L["sk"]),
            wv=lat(L["wv"], L["sv"]), wo=lat(L["wo"], L["so"]), bo=L["bo"] / M.BIAS_SCALE,
            ln2_w=L["ln2_w"], ln2_b=L["ln2_b"], w1=lat(L["w1"], L["s1"]), b1=L["b1"] / M.BIAS_SCALE,
            w2=lat(L["w2"], L["s2"]), b2=L["b2"] / M.BIAS_SCALE))
    p = dict(emb=m["emb"], layers=layers, lnf_w=m["lnf_w"], lnf_b=m["lnf_b"], proj=m["proj"], proj_b=m["proj_b"])
    return jax.tree_util.tree_map(lambda a: jnp.asarray(np.asarray(a, np.float32)), p)


def position_init(how, n=128):
    """--pos: [n, d] position embeddings for the student's residual stream. `teacher`: the
    teacher's, each minus their mean over the first 32 positions (which stage 1 folded into the
    table), through its embedding LayerNorm taken as linear (divided by the median spread of the
    table's pre-norm rows, times its weight)."""
    from safetensors.numpy import load_file
    tw = load_file(os.path.join(TR.TEACHER_DIR, "model.safetensors"))
    g = lambda k: np.asarray(tw[k], np.float64)  # noqa: E731
    pos = g("embeddings.position_embeddings.weight")
    if how == "zero":
        return np.zeros((n, pos.shape[1]), np.float32)
    pre = g("embeddings.word_embeddings.weight") + g("embeddings.token_type_embeddings.weight")[0] \
        + pos[:32].mean(0)
    spread = np.median(pre.std(1))
    d = pos[:n] - pos[:32].mean(0)
    d = d - d.mean(1, keepdims=True)
    return (d / spread * g("embeddings.LayerNorm.weight")).astype(np.float32)


def load_pool(tok, max_n=0):
    texts = [l.rstrip("\n") for l in open(os.path.join(WORK, "pool.txt"), encoding="utf-8")]
    doms = [l.rstrip("\n") for l in open(os.path.join(WORK, "pool_domains.txt"))]
    ys, tok_states = [], {}
    n = 0
    for s in range(10 ** 6):
        p = os.path.join(WORK, "labels", f"pool_{s:04d}.npy")
        if not os.path.exists(p):
            break
        y = np.load(p)
        tp = p[:-4] + "_tok.npy"
        if os.path.exists(tp):
            off = np.load(p[:-4] + "_off.npy")
            tok_states[s] = (n, off, np.load(tp, mmap_mode="r"))
        ys.append(y)
        n += len(y)
        if max_n and n >= max_n:
            break
    y = np.concatenate(ys).astype(np.float32)
    texts, doms = texts[:len(y)], doms[:len(y)]
    ids = [e.ids for e in tok.encode_batch(texts)]
    return texts, doms, ids, y, tok_states


def load_extra(tok, stem):
    """STEM.txt + STEM_domains.txt + the complete shards labels/STEM_NNNN.npy (in order, up to the first
    missing or short one)."""
    texts = [l.rstrip("\n") for l in open(os.path.join(WORK, stem + ".txt"), encoding="utf-8")]
    doms = [l.rstrip("\n") for l in open(os.path.join(WORK, stem + "_domains.txt"))]
    if len(doms) != len(texts):
        sys.exit(f"{stem}_domains.txt has {len(doms)} lines for {len(texts)} texts")
    ys, n, SH = [], 0, 10000
    n_sh = (len(texts) + SH - 1) // SH
    for s in range(n_sh):
        p = os.path.join(WORK, "labels", f"{stem}_{s:04d}.npy")
        if not os.path.exists(p):
            break
        y = np.load(p)
        want = min(SH, len(texts) - s * SH)
        if y.shape != (want, 384):
            print(f"{p}: shape {y.shape}, expected ({want}, 384): stopping at this shard", flush=True)
            break
        ys.append(y)
        n += len(y)
    if not ys:
        sys.exit(f"no complete label shard labels/{stem}_0000.npy: run train/label.py --shards {stem}.txt")
    y = np.concatenate(ys).astype(np.float32)
    texts, doms = texts[:n], doms[:n]
    ids = [e.ids for e in tok.encode_batch(texts)]
    return texts, doms, ids, y, (len(ys), n_sh)


class Sampler:
    """Length-bucketed draws from a set of text indices with per-text weights (None: uniform)."""

    def __init__(self, ids, index, w=None):
        bk = TR.make_buckets([ids[k] for k in index])
        self.buckets = {b: np.asarray(index)[v] for b, v in bk.items()}
        self.bkeys = list(self.buckets)
        self.weighted = w is not None
        ww = w if w is not None else np.ones(len(ids), np.float64)
        self.bcum = {b: np.cumsum(ww[self.buckets[b]]) for b in self.bkeys}
        self.bprob = np.array([self.bcum[b][-1] for b in self.bkeys], np.float64)
        self.bprob /= self.bprob.sum()
        self.all = np.asarray(index)
        self.cum_all = np.cumsum(ww[self.all])

    def bucket(self, rng):
        return self.bkeys[rng.choice(len(self.bkeys), p=self.bprob)]

    def draw(self, rng, b, n):
        if not self.weighted:
            return self.buckets[b][rng.randint(0, len(self.buckets[b]), n)]
        c = self.bcum[b]
        return self.buckets[b][np.minimum(np.searchsorted(c, rng.random_sample(n) * c[-1], side="right"), len(c) - 1)]

    def draw_any(self, rng, n):
        """n texts from all buckets by weight (for --extra-mix batch)."""
        c = self.cum_all
        return self.all[np.minimum(np.searchsorted(c, rng.random_sample(n) * c[-1], side="right"), len(c) - 1)]


def parse_kv(spec):
    return dict((k, float(v)) for k, v in (kv.split("=") for kv in spec.split(",") if kv))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", default=os.path.join(HERE, "..", "models", "ternlight-int4.bin"))
    ap.add_argument("--run", default="run_broad", help="run directory name under $TERN_WORK")
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--time-budget", type=float, default=70, help="minutes of training-step time")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--warmup-frac", type=float, default=0.03)
    ap.add_argument("--rel", type=float, default=8.0)
    ap.add_argument("--spread", type=float, default=0.1)
    ap.add_argument("--corr", type=float, default=0.0,
                    help="weight of 1 - Pearson correlation between the student's and the teacher's "
                         "off-diagonal pair cosines in each batch (issue 30: a relation term blind to a "
                         "batch-wide offset or scale, so the low-similarity pairs' ranking weighs as much "
                         "as the near pairs')")
    ap.add_argument("--tok", type=float, default=0.0,
                    help="weight of the token-state term (0.5 lost to 0 in the stage-2 pilots)")
    ap.add_argument("--emb-format", default="int4")
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--max-train", type=int, default=0)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--stop-after-min", type=float, default=0,
                    help="checkpoint and exit after this many minutes of training (a pilot of the same "
                         "schedule; continue it with --resume)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--domain-weight", default="",
                    help="sampling multipliers per pool domain, e.g. faq=8,queries=1.5 (default: uniform over texts)")
    ap.add_argument("--extra", default="",
                    help="a second training set STEM: $TERN_WORK/STEM.txt, STEM_domains.txt, labels/STEM_NNNN.npy "
                         "(issue 30: realq_train)")
    ap.add_argument("--extra-share", type=float, default=0.5,
                    help="fraction of the training drawn from --extra (of the steps, or of each batch)")
    ap.add_argument("--extra-mix", choices=("step", "batch"), default="step",
                    help="step: whole batches from one source, chosen per step; batch: both sources in every batch")
    ap.add_argument("--extra-weight", default="",
                    help="share of each --extra domain among its draws, e.g. web=60,questions=25,dup=15 "
                         "(normalised; every domain of the set must be named; default: uniform over texts)")
    ap.add_argument("--near", type=float, default=0.0,
                    help="share of each batch drawn as teacher-space nearest neighbours of the batch's first "
                         "texts (near pairs beside the random, far ones): 0.5 = 32 anchors of a batch of 128 "
                         "each bring their nearest of --near-cand candidates from the same source and length "
                         "bucket (issue 30: the relation term then sees the fine ranking the protocol measures)")
    ap.add_argument("--near-cand", type=int, default=4096,
                    help="candidates searched per step for --near (teacher vectors, one matrix product)")
    ap.add_argument("--ema", type=float, default=0.0,
                    help="keep an exponential moving average of the weights with this decay per step (e.g. "
                         "0.999, a horizon of ~1 000 steps) and evaluate, select and save it instead of the "
                         "raw weights (<run>/ema_last.npz beside each checkpoint)")
    ap.add_argument("--pos", choices=("teacher", "zero"), default=None,
                    help="diagnostic (not packable: TERN v1 has no positions): add fp32 position "
                         "embeddings for 128 positions, from the teacher's (through its embedding "
                         "LayerNorm, linearised) or zeros, and train them with the rest")
    ap.add_argument("--pos-lr-mult", type=float, default=1.0,
                    help="--pos: the position embeddings' learning rate, times --lr")
    ap.add_argument("--save-best", action="store_true",
                    help="keep <run>/student_best.npz at the best dev mean (dev.tsv only)")
    args = ap.parse_args()
    run_dir = os.path.join(WORK, args.run)
    os.makedirs(run_dir, exist_ok=True)
    t_start = time.time()
    tok = TR.get_tokenizer()
    texts, doms, ids, y, tok_states = load_pool(tok, args.max_train)
    n_pool = len(ids)
    has_tok = np.zeros(len(ids), bool)
    for s, (start, off, _) in tok_states.items():
        has_tok[start:start + len(off) - 1] = True
    # per-text sampling weight: 1, or the --domain-weight multiplier of its domain
    dw = parse_kv(args.domain_weight)
    all_pool_doms = set(l.rstrip("\n") for l in open(os.path.join(WORK, "pool_domains.txt")))
    unknown = set(dw) - all_pool_doms
    if unknown:
        sys.exit(f"--domain-weight names domains not in the pool: {sorted(unknown)}")
    w = np.array([dw.get(d, 1.0) for d in doms], np.float64)
    pool = Sampler(ids, np.arange(n_pool), w if dw else None)
    bkeys, buckets = pool.bkeys, pool.buckets
    extra = None
    if args.extra:
        _, xdoms, xids, xy, (got, n_sh) = load_extra(tok, args.extra)
        ids, y, doms = ids + xids, np.concatenate([y, xy]), doms + xdoms
        has_tok = np.concatenate([has_tok, np.zeros(len(xids), bool)])
        xd = np.array(xdoms)
        counts = {d: int((xd == d).sum()) for d in sorted(set(xdoms))}
        xw = parse_kv(args.extra_weight)
        if xw:
            if set(xw) != set(counts):
                sys.exit(f"--extra-weight names {sorted(xw)}; {args.extra} has domains {sorted(counts)}: name each once")
            tot = sum(xw.values())
            wx = np.array([xw[d] / tot / counts[d] for d in xdoms], np.float64)
        else:
            wx = np.ones(len(xdoms), np.float64)
        wfull = np.zeros(len(ids), np.float64)
        wfull[n_pool:] = wx
        extra = Sampler(ids, np.arange(n_pool, len(ids)), wfull)
        share = {d: float(wx[xd == d].sum() / wx.sum()) for d in counts}
        n_x = int(round(args.extra_share * args.batch))
        log(run_dir, f"extra {args.extra}: {len(xids)} labelled texts ({got}/{n_sh} shards), domains "
                     + ", ".join(f"{d} {counts[d]} (drawn {100 * share[d]:.1f} %)" for d in counts)
                     + f"; buckets {dict(zip(extra.bkeys, [len(extra.buckets[b]) for b in extra.bkeys]))}; "
                     + (f"{100 * args.extra_share:.0f} % of the steps draw a whole batch from it" if args.extra_mix == "step"
                        else f"{n_x} of each batch of {args.batch} from it"))
        if args.extra_mix == "batch" and not 0 < n_x < args.batch:
            sys.exit("--extra-mix batch needs 0 < round(--extra-share * --batch) < --batch")
    dev_dom, dev_ids, dev_y, dom_names = TR.load_dev(WORK, tok)
    log(run_dir, f"train {n_pool} labelled pool texts ({int(has_tok.sum())} with teacher token states), "
                 f"buckets {dict(zip(bkeys, [len(buckets[b]) for b in bkeys]))}; dev {len(dev_ids)} "
                 f"({', '.join(dom_names)}); backend {jax.default_backend()}")

    if args.init == "teacher":
        from safetensors.numpy import load_file
        tw = load_file(os.path.join(TR.TEACHER_DIR, "model.safetensors"))
        ca, cm = TR.pad(ids[:64], max(len(x) for x in ids[:64]))
        params = M.init_from_teacher(tw, ca, cm)
    elif args.init.endswith(".npz"):
        params = TR.params_from_npz(args.init)
    else:
        params = params_from_tern(args.init)
        if not (args.resume and os.path.exists(os.path.join(run_dir, "ckpt_last.npz"))):
            # the init must reproduce the file: numpy reference forward vs the training forward
            import tern_ref
            m = tern_ref.load(args.init)
            sub = dev_ids[::max(1, len(dev_ids) // 200)]
            ref = np.stack([tern_ref.embed_ids(m, x) for x in sub])
            ref /= np.linalg.norm(ref, axis=1, keepdims=True)
            tr = TR.embed_student(params, sub, quant=True, emb_format=m["format"])
            c = (ref * tr).sum(1)
            log(run_dir, f"init from {args.init}: training forward vs tools/tern_ref.py on {len(sub)} dev texts: "
                         f"min cos {c.min():.6f} mean {c.mean():.6f}")
            if c.min() < 0.999:
                sys.exit("init does not reproduce the packed file's forward")

    if args.pos and "pos" not in params:
        params["pos"] = jnp.asarray(position_init(args.pos))

    def lr_at(p):
        if p < args.warmup_frac:
            return args.lr * p / args.warmup_frac
        q = min(1.0, (p - args.warmup_frac) / (1 - args.warmup_frac))
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * q)))

    def wd_mask(p):
        return jax.tree_util.tree_map_with_path(
            lambda path, x: x.ndim == 2 and not any(k in jax.tree_util.keystr(path) for k in ("emb", "pos")), p)

    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.scale_by_adam(b1=0.9, b2=0.98, eps=1e-8),
                     optax.add_decayed_weights(args.wd, mask=wd_mask))
    opt_state = tx.init(params)
    step, train_time = 0, 0.0
    ema = None  # the moving average (--ema): the checkpoint's, else the weights it starts from
    rng = np.random.RandomState(args.seed)
    ck = os.path.join(run_dir, "ckpt_last.npz")
    curve = os.path.join(run_dir, "curve.tsv")
    if args.resume and os.path.exists(ck):
        params, opt_state, step, rs = TR.load_ckpt(ck, params, opt_state)
        rng.set_state((rs[0], np.array(rs[1], np.uint32), rs[2], rs[3], rs[4]))
        train_time = float(rs[5])
        log(run_dir, f"resumed from {ck} at step {step} ({train_time / 60:.1f} min of training)")
        if args.ema and os.path.exists(os.path.join(run_dir, "ema_last.npz")):
            ema = TR.params_from_npz(os.path.join(run_dir, "ema_last.npz"))
        aj = os.path.join(run_dir, "args.json")
        if os.path.exists(aj):
            old_args = json.load(open(aj))
            diff = {k: (old_args.get(k), v) for k, v in vars(args).items() if old_args.get(k) != v and k != "resume"}
            if diff:
                log(run_dir, f"arguments differ from the run's args.json (old, now): {diff}")
    else:
        with open(curve, "w") as f:
            f.write("step\ttrain_min\tdev_mean_spearman\t" + "\t".join(dom_names) + "\tdev_cos\ttrain_loss\n")
        with open(os.path.join(run_dir, "args.json"), "w") as f:
            json.dump(vars(args), f, indent=1)
    if ema is None:
        ema = params

    def loss_fn(params, ids_b, mask, tgt, tok_t, tok_m, emb_format):
        e, ts = M.forward(params, ids_b, mask, quant=True, emb_format=emb_format, return_tokens=True)
        l_cos = (1.0 - (e * tgt).sum(1)).mean()
        B = e.shape[0]
        off = 1.0 - jnp.eye(B)
        Ss, St = e @ e.T, tgt @ tgt.T
        l_rel = (((Ss - St) ** 2) * off).sum() / off.sum()
        ms, mt = (Ss * off).sum() / off.sum(), (St * off).sum() / off.sum()
        l_spread = jax.nn.relu(ms - mt)
        xs, ys = (Ss - ms) * off, (St - mt) * off
        l_corr = 1.0 - (xs * ys).sum() / jnp.sqrt((xs * xs).sum() * (ys * ys).sum() + 1e-12)
        tn = ts / jnp.maximum(jnp.linalg.norm(ts, axis=-1, keepdims=True), 1e-6)
        tt = tok_t / jnp.maximum(jnp.linalg.norm(tok_t, axis=-1, keepdims=True), 1e-6)
        l_tok = ((1.0 - (tn * tt).sum(-1)) * tok_m).sum() / jnp.maximum(tok_m.sum(), 1.0)
        loss = l_cos + args.rel * l_rel + args.spread * l_spread + args.tok * l_tok + args.corr * l_corr
        return loss, (l_cos, l_rel, l_tok)

    @partial(jax.jit, static_argnames=("emb_format",))
    def train_step(params, opt_state, ids_b, mask, tgt, tok_t, tok_m, lr, emb_format):
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, ids_b, mask, tgt, tok_t, tok_m, emb_format)
        updates, opt_state = tx.update(grads, opt_state, params)
        updates = jax.tree_util.tree_map(lambda u: -lr * u, updates)
        if "pos" in updates:
            updates["pos"] = updates["pos"] * args.pos_lr_mult
        return optax.apply_updates(params, updates), opt_state, loss, aux

    def progress(s, tt):
        p = s / args.steps
        if args.time_budget:
            p = max(p, tt / (60.0 * args.time_budget))
        return min(p, 1.0)

    best_json = os.path.join(run_dir, "best.json")
    best = json.load(open(best_json)) if (args.save_best and args.resume and os.path.exists(best_json)) else None

    def evaluate(s, train_loss):
        nonlocal best
        e = TR.embed_student(ema if args.ema else params, dev_ids, quant=True, emb_format=args.emb_format)
        sp = TR.domain_spearman(e, dev_y, dev_dom, dom_names)
        c = float((e * dev_y).sum(1).mean())
        mean = float(np.mean(list(sp.values())))
        log(run_dir, f"step {s} dev mean spearman {mean:.4f} | " + " ".join(f"{d} {v:.4f}" for d, v in sp.items())
            + f" | dev cos {c:.4f} | train loss {train_loss:.4f} | {train_time / 60:.1f} train-min")
        with open(curve, "a") as f:
            f.write(f"{s}\t{train_time / 60:.2f}\t{mean:.5f}\t" + "\t".join(f"{sp[d]:.5f}" for d in dom_names)
                    + f"\t{c:.5f}\t{train_loss:.5f}\n")
        if args.save_best and (best is None or mean > best["dev_mean"]) and s > 0:
            TR.params_to_npz(os.path.join(run_dir, "student_best.npz"), ema if args.ema else params)
            best = {"step": s, "train_min": round(train_time / 60, 2), "dev_mean": mean,
                    "dev": {d: round(float(v), 5) for d, v in sp.items()}}
            with open(best_json + ".tmp", "w") as f:
                json.dump(best, f, indent=1)
            os.replace(best_json + ".tmp", best_json)
            log(run_dir, f"student_best.npz <- step {s} (dev mean {mean:.4f})")

    def ckpt():
        st = rng.get_state()
        if args.ema:  # first: a checkpoint never names a step the average has not reached
            TR.params_to_npz(os.path.join(run_dir, "ema_last.npz"), ema)
        TR.save_ckpt(ck, params, opt_state, step, [st[0], st[1].tolist(), st[2], st[3], st[4], train_time])

    def token_targets(idx, L):
        if not args.tok or not has_tok[idx].any():
            # no token term: a (1, 1, .) zero target broadcasts to a zero loss, and the batch does not
            # build and send B x L x 384 zeros (100 MB at 512 x 128; the step's cost on a GPU)
            return np.zeros((1, 1, 384), np.float32), np.zeros((1, 1), np.float32)
        tt = np.zeros((len(idx), L, 384), np.float32)
        tm = np.zeros((len(idx), L), np.float32)
        for r, k in enumerate(idx):
            if not has_tok[k]:
                continue
            sh = k // 10000
            start, off, arr = tok_states[sh]
            a, b = off[k - start], off[k - start + 1]
            n = min(b - a, L)
            tt[r, :n] = arr[a:a + n]
            tm[r, :n] = 1.0
        return tt, tm

    @jax.jit
    def ema_update(ema, params):
        return jax.tree_util.tree_map(lambda e, p: args.ema * e + (1.0 - args.ema) * p, ema, params)

    def with_neighbours(sampler, b, idx):
        """The batch with its last round(near/2 * B) texts replaced by the teacher-space nearest
        neighbours of its first ones, searched among --near-cand draws of the same sampler and bucket."""
        k = int(round(len(idx) * args.near / 2))
        if k == 0:
            return idx
        anchors = idx[:k]
        cand = sampler.draw(rng, b, args.near_cand)
        sim = y[cand] @ y[anchors].T
        sim[cand[:, None] == anchors[None, :]] = -2.0
        return np.concatenate([idx[:len(idx) - k], cand[np.argmax(sim, 0)]])

    if args.near and args.extra_mix != "step":
        sys.exit("--near needs --extra-mix step (a batch from one source and bucket)")
    if args.near and not 0 < args.near <= 1:
        sys.exit("--near is a share of the batch, in (0, 1]")
    if step == 0:
        evaluate(0, float("nan"))
    losses, t0, n_extra, recent = [], time.time(), 0, []
    while progress(step, train_time) < 1.0:
        ts = time.time()
        lr = lr_at(progress(step, train_time))
        drew_extra = extra is not None and args.extra_mix == "step" and rng.random_sample() < args.extra_share
        if drew_extra:
            b = extra.bucket(rng)
            idx = extra.draw(rng, b, args.batch)
            n_extra += 1
        else:
            b = pool.bucket(rng)
            if extra is not None and args.extra_mix == "batch":
                idx = np.concatenate([pool.draw(rng, b, args.batch - n_x), extra.draw_any(rng, n_x)])
                b = TR.bucket_of(max(len(ids[k]) for k in idx))
            else:
                idx = pool.draw(rng, b, args.batch)
        if args.near:
            idx = with_neighbours(extra if drew_extra else pool, b, idx)
        a, m = TR.pad([ids[k] for k in idx], b)
        tt, tm = token_targets(idx, b)
        params, opt_state, loss, aux = train_step(params, opt_state, jnp.asarray(a), jnp.asarray(m),
                                                  jnp.asarray(y[idx]), jnp.asarray(tt), jnp.asarray(tm),
                                                  jnp.float32(lr), args.emb_format)
        if args.ema:
            ema = ema_update(ema, params)
        step += 1
        losses.append(float(loss))
        dt = time.time() - ts
        recent.append(dt)
        if len(recent) > 50:
            recent.pop(0)
        train_time += min(dt, 5 * float(np.median(recent))) if len(recent) >= 10 else dt
        if step % 20 == 0:
            log(run_dir, f"step {step} progress {progress(step, train_time):.3f} loss {np.mean(losses[-20:]):.4f} "
                         f"(cos {float(aux[0]):.4f} rel {float(aux[1]):.5f} tok {float(aux[2]):.4f}) lr {lr:.2e} "
                         f"{(time.time() - t0) / 20:.2f}s/step"
                         + (f" extra steps {n_extra}/20" if extra is not None and args.extra_mix == "step" else ""))
            n_extra = 0
            t0 = time.time()
        done = progress(step, train_time) >= 1.0
        if step % args.ckpt_every == 0 or done:
            ckpt()
        if step % args.eval_every == 0 or done:
            evaluate(step, float(np.mean(losses[-args.eval_every:])))
            t0 = time.time()
        if args.stop_after_min and train_time >= 60 * args.stop_after_min and not done:
            ckpt()
            evaluate(step, float(np.mean(losses[-args.eval_every:])))
            log(run_dir, f"--stop-after-min {args.stop_after_min} reached at step {step}; checkpoint saved, "
                         f"continue with --resume")
            return
    out = os.path.join(run_dir, "student_final.npz")
    TR.params_to_npz(out, ema if args.ema else params)
    log(run_dir, f"saved {out} at step {step}; {train_time / 60:.1f} min of training, "
                 f"{(time.time() - t_start) / 60:.1f} min wall")


if __name__ == "__main__":
    main()
