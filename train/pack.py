#!/usr/bin/env python3
"""Pack a trained student (train/work/student_final.npz) into TERN v1 files.

  python3 train/pack.py [--params train/work/student_final.npz] [--formats int4 ternary int8]
                        [--outdir models] [--check 300]

Writes <outdir>/ternlight-<fmt>.bin per format, written here independently of tools/tern_ref.py (the
reader used to check it), then verifies each file: tools/tern_ref.py loads it (SHA-256 trailer,
sizes) and embeds --check validation sentences; the min cosine against the training code's
quantised forward (train/model.py, same embedding fake-quant) is printed (target >= 0.999).

Quantisation (identical to train/model.py, computed with the same JAX functions so the codes are
bit-identical to what training used):
  ternary matrices: w_scale = 1 / mean|W| (f32), codes = clamp(round(W * w_scale), -1, 1)
  biases: BIAS_SCALE * b_raw (f32) - the integer-domain bias of y = (acc + bias) / (w_scale * s)
  embeddings, per row, value = code * scale: int8 scale = max|row|/127, int4 scale = max|row|/7,
  ternary scale = mean|row|; fp32 as is.
"""
import os
# one BLAS thread: small per-sentence matmuls on a busy 2-core box slow down 10x with threading
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import argparse
import hashlib
import os
import struct
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=2")
import numpy as np
import jax
import jax.numpy as jnp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import model as M  # noqa: E402

FMT_CODE = {"fp32": 0, "int8": 1, "ternary": 2, "int4": 3}


def tern_bytes(codes):
    c = np.asarray(codes).reshape(-1).astype(np.int64)
    two = np.zeros(len(c), np.uint8)
    two[c == 1] = 1
    two[c == -1] = 2
    two = np.concatenate([two, np.zeros((-len(two)) % 4, np.uint8)]).reshape(-1, 4)
    return (two[:, 0] | two[:, 1] << 2 | two[:, 2] << 4 | two[:, 3] << 6).astype(np.uint8).tobytes()


def int4_bytes(codes):
    c = (np.asarray(codes).reshape(-1).astype(np.int64) & 0xF).astype(np.uint8)
    c = np.concatenate([c, np.zeros(len(c) % 2, np.uint8)]).reshape(-1, 2)
    return (c[:, 0] | (c[:, 1] << 4)).astype(np.uint8).tobytes()


def f32b(a):
    return np.asarray(a, dtype="<f4").tobytes()


def emb_quant(E, fmt):
    E = jnp.asarray(E, jnp.float32)
    if fmt == "int8":
        sc = jnp.maximum(jnp.abs(E).max(-1, keepdims=True), 1e-12) / 127.0
        codes = jnp.clip(M.rround(E / sc), -127, 127)
    elif fmt == "int4":
        sc = jnp.maximum(jnp.abs(E).max(-1, keepdims=True), 1e-12) / 7.0
        codes = jnp.clip(M.rround(E / sc), -8, 7)
    elif fmt == "ternary":
        sc = jnp.maximum(jnp.abs(E).mean(-1, keepdims=True), 1e-12)
        codes = jnp.clip(M.rround(E / sc), -1, 1)
    else:
        raise ValueError(fmt)
    return np.asarray(codes).astype(np.int8), np.asarray(sc[:, 0], np.float32)


def pack(params, fmt, path, heads=6, max_len=128):
    E = np.asarray(params["emb"], np.float32)
    V, D = E.shape
    Ls = params["layers"]
    F = Ls[0]["w1"].shape[0]
    O = params["proj"].shape[0]
    hdr = struct.pack("<4sHBBIHBBHHH10s", b"TERN", 1, FMT_CODE[fmt], 0, V, D, len(Ls), heads, F, O, max_len,
                      b"\0" * 10)
    assert len(hdr) == 32
    parts = [hdr]
    if fmt == "fp32":
        parts.append(f32b(E))
    else:
        codes, sc = emb_quant(E, fmt)
        parts.append(codes.astype(np.int8).tobytes() if fmt == "int8" else
                     (int4_bytes(codes) if fmt == "int4" else tern_bytes(codes)))
        parts.append(f32b(sc))

    def mat(W):
        codes, ws = M.ternarize(jnp.asarray(W))
        return tern_bytes(np.asarray(codes)) + f32b([np.float32(ws)])

    def bias(b):
        return f32b(np.float32(M.BIAS_SCALE) * np.asarray(b, np.float32))

    for L in Ls:
        parts += [f32b(L["ln1_w"]), f32b(L["ln1_b"]), mat(L["wq"]), mat(L["wk"]), mat(L["wv"]),
                  mat(L["wo"]), bias(L["bo"]), f32b(L["ln2_w"]), f32b(L["ln2_b"]),
                  mat(L["w1"]), bias(L["b1"]), mat(L["w2"]), bias(L["b2"])]
    parts += [f32b(params["lnf_w"]), f32b(params["lnf_b"]), f32b(params["proj"]), f32b(params["proj_b"])]
    body = b"".join(parts)
    data = body + hashlib.sha256(body).digest()
    with open(path, "wb") as f:
        f.write(data)
    return data


def check(params, path, fmt, n, vocab, val_path):
    import tern_ref
    from train import embed_student
    m = tern_ref.load(path)
    tok = tern_ref.Tokenizer(vocab)
    texts = [l.rstrip("\n") for l in open(val_path, encoding="utf-8")]
    if val_path.endswith(".tsv"):                             # domain \t text (train/sample_sets.py)
        texts = [t.split("\t", 1)[1] for t in texts]
    texts = texts[::max(1, len(texts) // n)][:n]
    texts += ["", "[PAD] [UNK] [CLS]", "x " * 300]          # edge cases: empty, special strings, truncation
    ids = tok.encode_batch(texts)
    ref = np.stack([tern_ref.embed_ids(m, i) for i in ids])
    tr = embed_student(params, ids, quant=True, emb_format=None if fmt == "fp32" else fmt)
    cos = (ref * tr).sum(1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(tr, axis=1)
    return float(cos.min()), float(cos.mean()), len(texts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", default=os.path.join(HERE, "work", "student_final.npz"))
    ap.add_argument("--formats", nargs="*", default=["int4", "ternary", "int8"])
    ap.add_argument("--outdir", default=os.path.join(HERE, "..", "models"))
    ap.add_argument("--name", default="ternlight")
    ap.add_argument("--check", type=int, default=300)
    ap.add_argument("--vocab", default=os.path.join(HERE, "..", "models", "vocab.txt"))
    ap.add_argument("--val", default=os.path.join(HERE, "work", "val.txt"),
                    help="sentences for the check (.txt, or .tsv of domain<TAB>text)")
    args = ap.parse_args()
    from train import params_from_npz
    params = params_from_npz(args.params)
    for fmt in args.formats:
        path = os.path.join(args.outdir, f"{args.name}-{fmt}.bin")
        data = pack(params, fmt, path)
        h = hashlib.sha256(data).hexdigest()
        print(f"{path}: {len(data)} bytes sha256 {h} (model id {h[:16]})", flush=True)
        if args.check:
            mn, mean, n = check(params, path, fmt, args.check, args.vocab, args.val)
            print(f"  packed file (tools/tern_ref.py) vs training quantised forward on {n} sentences: "
                  f"min cos {mn:.6f} mean {mean:.6f} {'OK' if mn >= 0.999 else 'BELOW 0.999'}", flush=True)


if __name__ == "__main__":
    main()
