"""Ternlight student in JAX, computed exactly as the TERN v1 engine computes it.

Forward (docs/model-format.md, ARCHITECTURE.md):
  ids -> embedding rows (no position embeddings)
  per layer:  x = x + Wout(attn(Wq,Wk,Wv over LN1(x)))      pre-LN, eps 1e-5, LN with weight+bias
              x = x + fc2(gelu_erf(fc1(LN2(x))))
  final LN -> mean pool over real tokens (incl. [CLS]/[SEP]) -> fp32 projection (O x D + bias) -> L2
BitLinear (per token row), quantised mode:
  xn  = (x - mean) / sqrt(var + 1e-5)                      parameter-free LN
  s   = 128 / max(max|xn|, 1e-5)
  q   = clamp(round(xn * s), -128, 127)                    round half away from zero
  ws  = 1 / max(mean|W|, 1e-8)                             "w_scale" stored in the file (f32)
  Wt  = clamp(round(W * ws), -1, 1)                        ternary codes stored in the file
  acc = q . Wt                                             exact integers (fit in f32)
  y   = (acc + bias) / (ws * s)                            bias = the parameter stored in the file
The trainable bias is reparametrised as bias = BIAS_SCALE * b_raw (BIAS_SCALE = 1024, a power of
two, so pack writes float32(1024 * b_raw) which is bit-identical to what the forward uses).
Straight-through estimator on both round/clamp operations.  In fp32 warm-up mode (quant=False) the
same formula is used with q = xn * s and Wt = W * ws, i.e. y = xn . W + bias / (ws * s).

Embedding fake-quant (emb_format): 'fp32' none; 'int8' scale = max|row|/127, codes in [-127,127];
'int4' scale = max|row|/7, codes in [-8,7]; 'ternary' scale = mean|row|, codes in [-1,1];
value = code * scale (per-row f32 scale).  STE as well.
"""
import math

import numpy as np
import jax
import jax.numpy as jnp

BIAS_SCALE = 1024.0
LN_EPS = 1e-5

CFG = dict(vocab=30522, d=384, layers=2, heads=6, ffn=1536, out=384, max_len=128)


def rround(x):
    """Round half away from zero (matches Rust f32::round / C roundf)."""
    return jnp.sign(x) * jnp.floor(jnp.abs(x) + 0.5)


def ste(x, q):
    return x + jax.lax.stop_gradient(q - x)


def ln_noparam(x):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / jnp.sqrt(v + LN_EPS)


def ln(x, w, b):
    return ln_noparam(x) * w + b


def ternarize(W):
    """W [out,in] float -> (codes float in {-1,0,1}, ws scalar) exactly as packed."""
    ws = 1.0 / jnp.maximum(jnp.abs(W).mean(), 1e-8)
    return jnp.clip(rround(W * ws), -1.0, 1.0), ws


# Diagnostics only (train/emb_formats.py): False leaves the activations unrounded while the
# weights stay ternary.  Read when a forward is traced: clear JAX's caches after changing it.
ROUND_ACTIVATIONS = True


def bitlinear(x, W, b_raw, quant):
    xn = ln_noparam(x)
    s = 128.0 / jnp.maximum(jnp.max(jnp.abs(xn), axis=-1, keepdims=True), 1e-5)
    ws = 1.0 / jnp.maximum(jnp.abs(W).mean(), 1e-8)
    xs = xn * s
    Ws = W * ws
    if quant:
        if ROUND_ACTIVATIONS:
            xs = ste(xs, jnp.clip(rround(xs), -128.0, 127.0))
        Ws = ste(Ws, jnp.clip(rround(Ws), -1.0, 1.0))
    acc = xs @ Ws.T
    if b_raw is not None:
        acc = acc + BIAS_SCALE * b_raw
    return acc / (ws * s)


def quant_embedding(E, fmt):
    if fmt == "fp32" or fmt is None:
        return E
    if fmt == "int8":
        sc = jnp.maximum(jnp.abs(E).max(-1, keepdims=True), 1e-12) / 127.0
        return ste(E, jnp.clip(rround(E / sc), -127, 127) * sc)
    if fmt == "int4":
        sc = jnp.maximum(jnp.abs(E).max(-1, keepdims=True), 1e-12) / 7.0
        return ste(E, jnp.clip(rround(E / sc), -8, 7) * sc)
    if fmt == "ternary":
        sc = jnp.maximum(jnp.abs(E).mean(-1, keepdims=True), 1e-12)
        return ste(E, jnp.clip(rround(E / sc), -1, 1) * sc)
    raise ValueError(fmt)


def forward(p, ids, mask, quant=True, emb_format=None, heads=6, return_tokens=False, pooled=False):
    """ids, mask: [B,T] int32.  Returns L2-normalised [B,O] float32; with return_tokens also the
    projected final token states [B,T,O] (before pooling; for token-level distillation); with pooled
    the mean-pooled final states [B,D] instead, before the projection (train/head.py fits it)."""
    if emb_format and emb_format != "fp32":
        # fake-quantise only the rows in use (cheap), exactly like the whole table would be
        rows = quant_embedding(p["emb"][ids.reshape(-1)], emb_format)
        x = rows.reshape(ids.shape + (p["emb"].shape[1],))
    else:
        x = p["emb"][ids]
    if "pos" in p:
        # Diagnostic only (distil.py --pos): position embeddings, which TERN v1 has not.
        x = x + p["pos"][None, :x.shape[1]]
    B, T, D = x.shape
    H = heads
    dh = D // H
    keymask = mask[:, None, None, :] > 0
    for L in p["layers"]:
        h = ln(x, L["ln1_w"], L["ln1_b"])
        q = bitlinear(h, L["wq"], None, quant).reshape(B, T, H, dh)
        k = bitlinear(h, L["wk"], None, quant).reshape(B, T, H, dh)
        v = bitlinear(h, L["wv"], None, quant).reshape(B, T, H, dh)
        a = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(dh)
        a = jnp.where(keymask, a, -1e30)
        a = jax.nn.softmax(a, axis=-1)
        o = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(B, T, D)
        x = x + bitlinear(o, L["wo"], L["bo"], quant)
        h = ln(x, L["ln2_w"], L["ln2_b"])
        f = jax.nn.gelu(bitlinear(h, L["w1"], L["b1"], quant), approximate=False)
        x = x + bitlinear(f, L["w2"], L["b2"], quant)
    x = ln(x, p["lnf_w"], p["lnf_b"])
    m = mask.astype(jnp.float32)[..., None]
    e = (x * m).sum(1) / jnp.maximum(m.sum(1), 1.0)
    if pooled:
        return e
    e = e @ p["proj"].T + p["proj_b"]
    e = e / jnp.maximum(jnp.linalg.norm(e, axis=-1, keepdims=True), 1e-12)
    if return_tokens:
        return e, x @ p["proj"].T + p["proj_b"]
    return e


# --------------------------------------------------------------------------- init from MiniLM
def init_from_teacher(tw, calib_ids=None, calib_mask=None, cfg=CFG, seed=0):
    """tw: dict of numpy teacher weights (safetensors).  Maps MiniLM layers 0,1 onto the student.

    Post-LN BERT -> pre-LN student (it is only an init):
      emb    = LN_emb(word + type0 + mean(position[:32]))  (teacher's embedding output, no position)
      ln1    = identity for layer 0, the previous teacher layer's output LN for later layers
      Wq,Wk,Wv,Wout,fc1,fc2 = teacher weights times the rms of their teacher input (the BitLinear
               LN divides it out); Wq additionally * sqrt(2) (12 heads of 32 -> 6 of 64)
      ln2    = teacher attention-output LN; final LN = last mapped layer's output LN
      biases = teacher bias * ws * s_typ / BIAS_SCALE (+ V bias folded into the out bias)
      projection = identity.
    """
    t = {k: np.asarray(v, np.float32) for k, v in tw.items()}
    D = cfg["d"]
    stats = calib_stats(t, calib_ids, calib_mask, cfg["layers"])

    def g(name):
        return t[name]

    def lnp(x, w, b, eps=1e-12):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + eps) * w + b

    emb = g("embeddings.word_embeddings.weight") + g("embeddings.token_type_embeddings.weight")[0] \
        + g("embeddings.position_embeddings.weight")[:32].mean(0)
    emb = lnp(emb, g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"))

    def braw(bf, W, s_typ):
        ws = 1.0 / max(np.abs(W).mean(), 1e-8)
        return (bf * ws * s_typ / BIAS_SCALE).astype(np.float32)

    layers = []
    for i in range(cfg["layers"]):
        p = f"encoder.layer.{i}."
        st = stats[i]
        if i == 0:
            l1w, l1b = np.ones(D, np.float32), np.zeros(D, np.float32)
        else:
            q = f"encoder.layer.{i - 1}.output.LayerNorm."
            l1w, l1b = g(q + "weight"), g(q + "bias")
        Wq = g(p + "attention.self.query.weight") * st["h_std"] * math.sqrt(2.0)
        Wk = g(p + "attention.self.key.weight") * st["h_std"]
        Wv = g(p + "attention.self.value.weight") * st["h_std"]
        Wo = g(p + "attention.output.dense.weight") * st["o_std"]
        bo_f = g(p + "attention.output.dense.bias") + g(p + "attention.output.dense.weight") @ (
            g(p + "attention.self.value.bias") + g(p + "attention.self.value.weight") @ np.zeros(D))
        W1 = g(p + "intermediate.dense.weight") * st["a_std"]
        W2 = g(p + "output.dense.weight") * st["f_std"]
        layers.append(dict(
            ln1_w=l1w, ln1_b=l1b, wq=Wq, wk=Wk, wv=Wv, wo=Wo,
            bo=braw(bo_f, Wo, 128.0 / st["o_max"]),
            ln2_w=g(p + "attention.output.LayerNorm.weight"), ln2_b=g(p + "attention.output.LayerNorm.bias"),
            w1=W1, b1=braw(g(p + "intermediate.dense.bias"), W1, 128.0 / st["a_max"]),
            w2=W2, b2=braw(g(p + "output.dense.bias"), W2, 128.0 / st["f_max"])))
    last = f"encoder.layer.{cfg['layers'] - 1}.output.LayerNorm."
    params = dict(emb=emb.astype(np.float32), layers=layers,
                  lnf_w=g(last + "weight"), lnf_b=g(last + "bias"),
                  proj=np.eye(cfg["out"], D, dtype=np.float32), proj_b=np.zeros(cfg["out"], np.float32))
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32), params)


def calib_stats(t, ids, mask, n_layers):
    """rms (std over features) and max|LN(x)| of each BitLinear input in the teacher's layers."""
    def lnp(x, w, b, eps=1e-12):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + eps) * w + b

    def feat(x, m):
        x = x[m > 0]
        sd = x.std(-1)
        z = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
        return float(sd.mean()), float(np.abs(z).max(-1).mean())

    if ids is None:
        return [dict(h_std=1.0, o_std=1.0, a_std=1.0, f_std=1.0, o_max=4.0, a_max=4.0, f_max=4.0)] * n_layers
    B, T = ids.shape
    x = t["embeddings.word_embeddings.weight"][ids] + t["embeddings.position_embeddings.weight"][:T][None] \
        + t["embeddings.token_type_embeddings.weight"][0]
    x = lnp(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"])
    out = []
    H, dh = 12, 32
    for i in range(n_layers):
        p = f"encoder.layer.{i}."
        lin = lambda z, n: z @ t[p + n + ".weight"].T + t[p + n + ".bias"]
        h_std, _ = feat(x, mask)
        q = lin(x, "attention.self.query").reshape(B, T, H, dh)
        k = lin(x, "attention.self.key").reshape(B, T, H, dh)
        v = lin(x, "attention.self.value").reshape(B, T, H, dh)
        a = np.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(dh) + (1 - mask[:, None, None, :]) * -1e9
        a = np.exp(a - a.max(-1, keepdims=True))
        a = a / a.sum(-1, keepdims=True)
        o = np.einsum("bhqk,bkhd->bqhd", a, v).reshape(B, T, -1)
        o_std, o_max = feat(o, mask)
        x = lnp(x + lin(o, "attention.output.dense"), t[p + "attention.output.LayerNorm.weight"],
                t[p + "attention.output.LayerNorm.bias"])
        a_std, a_max = feat(x, mask)
        hpre = lin(x, "intermediate.dense")
        from scipy.special import erf
        f = 0.5 * hpre * (1.0 + erf(hpre / math.sqrt(2.0)))
        f_std, f_max = feat(f, mask)
        x = lnp(x + lin(f, "output.dense"), t[p + "output.LayerNorm.weight"], t[p + "output.LayerNorm.bias"])
        out.append(dict(h_std=h_std, o_std=o_std, a_std=a_std, f_std=f_std, o_max=o_max, a_max=a_max, f_max=f_max))
    return out


def n_params(p):
    return sum(int(np.prod(a.shape)) for a in jax.tree_util.tree_leaves(p))
