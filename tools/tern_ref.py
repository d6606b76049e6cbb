#!/usr/bin/env python3
"""tern_ref — independent numpy reference for TERN v1 (Ternlight) model files.

Usage.  As a CLI:  `python3 tools/tern_ref.py embed MODEL.bin --vocab models/vocab.txt < lines.txt >
vectors.jsonl` writes one JSON array of floats per input line (L2-normalised, output_dim long; a line
past one pass is embedded whole, as pooled windows: `embed_text`);
`python3 tools/tern_ref.py tokenize --vocab models/vocab.txt < lines.txt` prints the token ids;
`python3 tools/tern_ref.py info MODEL.bin` prints the header, sizes and hashes (model id = first 16
hex digits of the file's SHA-256); `python3 tools/tern_ref.py gen --format int4 --vocab 30522 --d 64
--layers 2 --heads 4 --ffn 128 --out 64 --seed 1 OUT.bin` writes a random but valid file (formats
fp32, int8, ternary, int4) for parity tests.  As a module: `m = tern_ref.load(path)` (verifies the
SHA-256 trailer, dequantises the embedding table), `tern_ref.embed_ids(m, ids)` runs the forward on
one token-id list, `tern_ref.Tokenizer(vocab_path).encode(text)` gives the ids, `tern_ref.embed(m,
tok, texts)` does both.  Needs numpy and, for tokenising, the `tokenizers` package.  It is written
straight from docs/model-format.md and imports nothing from train/; it computes in float64 by default
(`--dtype float32` to mimic an f32 engine).  The conventions that this file fixes, and that
docs/model-format.md repeats: per-row embedding scales are multipliers (value = code * scale);
ternary code 00=0, 01=+1, 10=-1 with element 4k+s in bits 2s..2s+1 of byte k; int4 low nibble =
even element, two's complement; BitLinear y = (acc + bias) / (w_scale * s) with
s = 128 / max(max|LN(x)|, 1e-5), q = clamp(round_half_away_from_zero(LN(x) * s), -128, 127).
"""
import os
# one BLAS thread: small per-sentence matmuls on a busy 2-core box slow down 10x with threading
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import argparse
import hashlib
import json
import math
import struct
import sys

import numpy as np

MAGIC = b"TERN"
HEADER = struct.Struct("<4sHBBIHBBHHH10s")  # 32 bytes
assert HEADER.size == 32
EMB_FORMATS = {0: "fp32", 1: "int8", 2: "ternary", 3: "int4"}
EMB_CODES = {v: k for k, v in EMB_FORMATS.items()}
LN_EPS = 1e-5
CLS, SEP = 101, 102
MAX_LEN = 128


# ------------------------------------------------------------------------------------ packing
def unpack_ternary(buf, n):
    """2-bit codes -> int8 array of n values in {-1,0,1}.  00=0, 01=+1, 10=-1, 11 reserved."""
    b = np.frombuffer(buf, np.uint8)
    codes = np.stack([(b >> (2 * s)) & 3 for s in range(4)], axis=1).reshape(-1)[:n]
    if np.any(codes == 3):
        raise ValueError("reserved ternary code 11")
    lut = np.array([0, 1, -1, 0], np.int8)
    return lut[codes]


def pack_ternary(vals):
    v = np.asarray(vals).reshape(-1).astype(np.int64)
    assert np.all(np.abs(v) <= 1)
    codes = np.where(v == 1, 1, np.where(v == -1, 2, 0)).astype(np.uint8)
    pad = (-len(codes)) % 4
    codes = np.concatenate([codes, np.zeros(pad, np.uint8)]).reshape(-1, 4)
    return (codes[:, 0] | (codes[:, 1] << 2) | (codes[:, 2] << 4) | (codes[:, 3] << 6)).astype(np.uint8).tobytes()


def unpack_int4(buf, n):
    b = np.frombuffer(buf, np.uint8)
    lo = (b & 15).astype(np.int8)
    hi = (b >> 4).astype(np.int8)
    v = np.stack([lo, hi], axis=1).reshape(-1)[:n]
    return np.where(v >= 8, v - 16, v).astype(np.int8)


def pack_int4(vals):
    v = np.asarray(vals).reshape(-1).astype(np.int64)
    assert np.all((v >= -8) & (v <= 7))
    u = (v & 15).astype(np.uint8)
    if len(u) % 2:
        u = np.concatenate([u, np.zeros(1, np.uint8)])
    u = u.reshape(-1, 2)
    return (u[:, 0] | (u[:, 1] << 4)).astype(np.uint8).tobytes()


class Reader:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, n):
        if self.pos + n > len(self.data):
            raise ValueError("truncated file")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def f32(self, n):
        return np.frombuffer(self.take(4 * n), "<f4").astype(np.float64)

    def ternary(self, rows, cols):
        """Returns the codes as a float64 matrix (values -1, 0, +1) ready for exact matmuls."""
        n = rows * cols
        return unpack_ternary(self.take((n + 3) // 4), n).reshape(rows, cols).astype(np.float64)


# ------------------------------------------------------------------------------------ loading
def load(path_or_bytes):
    """Parse a TERN v1 file.  Returns a dict with the header and float64/int8 arrays."""
    data = path_or_bytes if isinstance(path_or_bytes, (bytes, bytearray)) else open(path_or_bytes, "rb").read()
    if len(data) < 64:
        raise ValueError("file too short")
    body, trailer = data[:-32], data[-32:]
    if hashlib.sha256(body).digest() != trailer:
        raise ValueError("SHA-256 trailer mismatch")
    (magic, ver, embf, wf, V, D, NL, NH, F, O, T, _res) = HEADER.unpack(data[:32])
    if magic != MAGIC or ver != 1 or wf != 0 or embf not in EMB_FORMATS:
        raise ValueError(f"bad header: magic={magic!r} version={ver} emb={embf} weights={wf}")
    if D % NH:
        raise ValueError("d_model not divisible by n_heads")
    r = Reader(body)
    r.pos = 32
    fmt = EMB_FORMATS[embf]
    if fmt == "fp32":
        emb = r.f32(V * D).reshape(V, D)
    else:
        if fmt == "int8":
            codes = np.frombuffer(r.take(V * D), np.int8).reshape(V, D)
        elif fmt == "ternary":
            codes = unpack_ternary(r.take((V * D + 3) // 4), V * D).reshape(V, D)
        else:
            codes = unpack_int4(r.take((V * D + 1) // 2), V * D).reshape(V, D)
        scales = r.f32(V)
        emb = codes.astype(np.float64) * scales[:, None]        # value = code * scale
    layers = []
    for _ in range(NL):
        L = {}
        L["ln1_w"], L["ln1_b"] = r.f32(D), r.f32(D)
        for k in ("q", "k", "v"):
            L["w" + k] = r.ternary(D, D)
            L["s" + k] = float(r.f32(1)[0])
        L["wo"] = r.ternary(D, D)
        L["so"] = float(r.f32(1)[0])
        L["bo"] = r.f32(D)
        L["ln2_w"], L["ln2_b"] = r.f32(D), r.f32(D)
        L["w1"] = r.ternary(F, D)
        L["s1"] = float(r.f32(1)[0])
        L["b1"] = r.f32(F)
        L["w2"] = r.ternary(D, F)
        L["s2"] = float(r.f32(1)[0])
        L["b2"] = r.f32(D)
        layers.append(L)
    lnf_w, lnf_b = r.f32(D), r.f32(D)
    proj = r.f32(O * D).reshape(O, D)
    proj_b = r.f32(O)
    if r.pos != len(body):
        raise ValueError(f"{len(body) - r.pos} trailing bytes before the trailer")
    return dict(format=fmt, vocab=V, d=D, layers=layers, n_heads=NH, ffn=F, out=O, max_len=T,
                emb=emb, lnf_w=lnf_w, lnf_b=lnf_b, proj=proj, proj_b=proj_b,
                sha256=hashlib.sha256(data).hexdigest(), size=len(data))


# ------------------------------------------------------------------------------------ forward
def round_half_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def ln_noparam(x):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + LN_EPS)


def layer_norm(x, w, b):
    return ln_noparam(x) * w + b


def bitlinear(x, w_t, w_scale, bias=None):
    """x [T,in] float, w_t [out,in] in {-1,0,1}, w_scale f32, bias [out] or None."""
    xn = ln_noparam(x)
    s = 128.0 / np.maximum(np.abs(xn).max(-1, keepdims=True), 1e-5)
    q = np.clip(round_half_away(xn * s), -128, 127)
    acc = q @ w_t.T                              # exact integers (|acc| <= 128 * in < 2^24)
    if bias is not None:
        acc = acc + bias
    return acc / (w_scale * s)


try:
    from scipy.special import erf as _erf
except ImportError:  # exact but slow fallback
    _erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x):
    """Exact erf GELU: 0.5 x (1 + erf(x / sqrt 2))."""
    return (0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))).astype(x.dtype)


def embed_ids(m, ids, dtype=np.float64, normalize=True):
    """Forward for one sequence of token ids (already with [CLS] ... [SEP]).  Returns [out], L2-normalised
    unless normalize=False (the projected mean itself: what window pooling weighs)."""
    ids = np.asarray(ids, np.int64)
    if ids.size == 0 or ids.max() >= m["vocab"] or ids.min() < 0:
        raise ValueError("token id out of range")
    c = lambda a: np.asarray(a, dtype)
    x = c(m["emb"][ids])
    T, D = x.shape
    H = m["n_heads"]
    dh = D // H
    for L in m["layers"]:
        h = layer_norm(x, c(L["ln1_w"]), c(L["ln1_b"]))
        q = bitlinear(h, L["wq"], L["sq"]).reshape(T, H, dh)
        k = bitlinear(h, L["wk"], L["sk"]).reshape(T, H, dh)
        v = bitlinear(h, L["wv"], L["sv"]).reshape(T, H, dh)
        a = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(dh)
        a = np.exp(a - a.max(-1, keepdims=True))
        a = a / a.sum(-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", a, v).reshape(T, D)
        x = x + bitlinear(o, L["wo"], L["so"], c(L["bo"]))
        h = layer_norm(x, c(L["ln2_w"]), c(L["ln2_b"]))
        f = gelu(bitlinear(h, L["w1"], L["s1"], c(L["b1"])))
        x = x + bitlinear(f, L["w2"], L["s2"], c(L["b2"]))
    x = layer_norm(x, c(m["lnf_w"]), c(m["lnf_b"]))
    e = x.mean(0)                                   # mean over all tokens incl. [CLS]/[SEP]
    e = c(m["proj"]) @ e + c(m["proj_b"])
    if not normalize:
        return e
    n = np.linalg.norm(e)
    return e / max(n, 1e-12)


# ------------------------------------------------------------------------------------ tokenizer
class Tokenizer:
    """BERT uncased WordPiece: lowercase, strip accents, clean text, split CJK, `##` pieces,
    [CLS] ... [SEP], at most 128 ids, [SEP] kept when truncating.  Special-token strings in the
    text (e.g. "[PAD]") are ordinary text: they are not registered as added tokens."""

    def __init__(self, vocab_path, max_len=MAX_LEN):
        """max_len=None: no truncation (the whole text's ids, for embed_text)."""
        from tokenizers import Tokenizer as HFTok, normalizers, pre_tokenizers, processors
        from tokenizers.models import WordPiece
        vocab = {}
        with open(vocab_path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                vocab[line.rstrip("\n")] = i
        t = HFTok(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
        t.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                  strip_accents=None, lowercase=True)
        t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        t.post_processor = processors.BertProcessing(("[SEP]", vocab["[SEP]"]), ("[CLS]", vocab["[CLS]"]))
        if max_len:
            t.enable_truncation(max_len)
        else:
            t.no_truncation()
        t.no_padding()
        self.t = t

    def encode(self, text):
        return self.t.encode(text).ids

    def encode_batch(self, texts):
        return [e.ids for e in self.t.encode_batch(list(texts))]


def embed_text(m, ids, dtype=np.float64):
    """The whole text's vector from all its ids ([CLS] ... [SEP], untruncated): one forward when the
    content ids fit one pass (max_len - 2), else back-to-back windows of max_len - 2 content ids, each
    run as [CLS] window [SEP], their vectors pooled as the mean weighted by each window's content ids,
    L2-normalised (docs/model-format.md, "Long texts")."""
    width = m["max_len"] - 2
    content = list(ids[1:-1])
    if len(content) <= width:
        return embed_ids(m, ids, dtype)
    acc = np.zeros(m["out"], dtype)
    for s in range(0, len(content), width):
        win = content[s:s + width]
        acc += len(win) * embed_ids(m, [ids[0]] + win + [ids[-1]], dtype)
    return acc / max(np.linalg.norm(acc), 1e-12)


def embed(m, tok, texts, dtype=np.float64):
    return np.stack([embed_ids(m, ids, dtype) for ids in tok.encode_batch(texts)]) if texts else \
        np.zeros((0, m["out"]))


# ------------------------------------------------------------------------------------ writing
def write(path, *, fmt, emb_codes, emb_scales, emb_f32, layers, lnf_w, lnf_b, proj, proj_b, n_heads, max_len=128):
    """Serialise a model given already-quantised pieces (ternary matrices as ints in {-1,0,1})."""
    V, D = (emb_f32 if fmt == "fp32" else emb_codes).shape
    F = layers[0]["w1"].shape[0] if layers else 0
    O = proj.shape[0]
    f32 = lambda a: np.asarray(a, "<f4").tobytes()
    out = [HEADER.pack(MAGIC, 1, EMB_CODES[fmt], 0, V, D, len(layers), n_heads, F, O, max_len, b"\0" * 10)]
    if fmt == "fp32":
        out.append(f32(emb_f32))
    else:
        if fmt == "int8":
            out.append(np.asarray(emb_codes, np.int8).tobytes())
        elif fmt == "ternary":
            out.append(pack_ternary(emb_codes))
        else:
            out.append(pack_int4(emb_codes))
        out.append(f32(emb_scales))
    for L in layers:
        out += [f32(L["ln1_w"]), f32(L["ln1_b"])]
        for k in ("q", "k", "v"):
            out += [pack_ternary(L["w" + k]), f32([L["s" + k]])]
        out += [pack_ternary(L["wo"]), f32([L["so"]]), f32(L["bo"])]
        out += [f32(L["ln2_w"]), f32(L["ln2_b"])]
        out += [pack_ternary(L["w1"]), f32([L["s1"]]), f32(L["b1"])]
        out += [pack_ternary(L["w2"]), f32([L["s2"]]), f32(L["b2"])]
    out += [f32(lnf_w), f32(lnf_b), f32(proj), f32(proj_b)]
    body = b"".join(out)
    data = body + hashlib.sha256(body).digest()
    with open(path, "wb") as f:
        f.write(data)
    return data


def generate(path, fmt, vocab, d, layers, heads, ffn, out, seed, max_len=128):
    """A random but valid (and numerically sane) TERN v1 file."""
    rng = np.random.RandomState(seed)
    emb = rng.randn(vocab, d).astype(np.float32) * 0.5
    codes = scales = None
    if fmt == "int8":
        scales = (np.abs(emb).max(1) / 127).astype(np.float32)
        codes = np.clip(np.round(emb / scales[:, None]), -127, 127).astype(np.int8)
    elif fmt == "int4":
        scales = (np.abs(emb).max(1) / 7).astype(np.float32)
        codes = np.clip(np.round(emb / scales[:, None]), -8, 7).astype(np.int8)
    elif fmt == "ternary":
        scales = np.abs(emb).mean(1).astype(np.float32)
        codes = np.clip(np.round(emb / scales[:, None]), -1, 1).astype(np.int8)
    tern = lambda o, i: rng.choice([-1, 0, 1], size=(o, i), p=[0.3, 0.4, 0.3]).astype(np.int8)
    sc = lambda i: np.float32(math.sqrt(i) * rng.uniform(0.5, 2.0))
    Ls = []
    for _ in range(layers):
        Ls.append(dict(
            ln1_w=1 + 0.1 * rng.randn(d), ln1_b=0.1 * rng.randn(d),
            wq=tern(d, d), sq=sc(d), wk=tern(d, d), sk=sc(d), wv=tern(d, d), sv=sc(d),
            wo=tern(d, d), so=sc(d), bo=100 * rng.randn(d),
            ln2_w=1 + 0.1 * rng.randn(d), ln2_b=0.1 * rng.randn(d),
            w1=tern(ffn, d), s1=sc(d), b1=100 * rng.randn(ffn),
            w2=tern(d, ffn), s2=sc(ffn), b2=100 * rng.randn(d)))
    return write(path, fmt=fmt, emb_codes=codes, emb_scales=scales, emb_f32=emb, layers=Ls,
                 lnf_w=1 + 0.1 * rng.randn(d), lnf_b=0.1 * rng.randn(d),
                 proj=rng.randn(out, d) / math.sqrt(d), proj_b=0.01 * rng.randn(out),
                 n_heads=heads, max_len=max_len)


# ------------------------------------------------------------------------------------ CLI
def main(argv=None):
    ap = argparse.ArgumentParser(description="TERN v1 numpy reference")
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("embed", help="embed stdin lines -> JSON arrays on stdout")
    e.add_argument("model")
    e.add_argument("--vocab", default="models/vocab.txt")
    e.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    t = sub.add_parser("tokenize", help="stdin lines -> JSON id lists")
    t.add_argument("--vocab", default="models/vocab.txt")
    i = sub.add_parser("info")
    i.add_argument("model")
    g = sub.add_parser("gen", help="write a random valid TERN v1 file")
    g.add_argument("--format", choices=list(EMB_CODES), default="int4")
    g.add_argument("--vocab", type=int, default=30522)
    g.add_argument("--d", type=int, default=64)
    g.add_argument("--layers", type=int, default=2)
    g.add_argument("--heads", type=int, default=4)
    g.add_argument("--ffn", type=int, default=128)
    g.add_argument("--out", type=int, default=64)
    g.add_argument("--max-len", type=int, default=128)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("path")
    a = ap.parse_args(argv)
    if a.cmd == "gen":
        data = generate(a.path, a.format, a.vocab, a.d, a.layers, a.heads, a.ffn, a.out, a.seed, a.max_len)
        print(f"{a.path}: {len(data)} bytes sha256 {hashlib.sha256(data).hexdigest()}", file=sys.stderr)
    elif a.cmd == "info":
        m = load(a.model)
        print(json.dumps({k: m[k] for k in ("format", "vocab", "d", "n_heads", "ffn", "out", "max_len", "size",
                                             "sha256")} | {"n_layers": len(m["layers"]), "model_id": m["sha256"][:16]}))
    elif a.cmd == "tokenize":
        tok = Tokenizer(a.vocab)
        for line in sys.stdin:
            print(json.dumps(tok.encode(line.rstrip("\r\n"))))
    else:
        m = load(a.model)
        tok = Tokenizer(a.vocab, max_len=None)
        dt = np.float64 if a.dtype == "float64" else np.float32
        out = sys.stdout
        for line in sys.stdin:
            v = embed_text(m, tok.encode(line.rstrip("\r\n")), dt)
            out.write(json.dumps([float(np.float32(x)) for x in v]) + "\n")


if __name__ == "__main__":
    main()
