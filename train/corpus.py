#!/usr/bin/env python3
"""Build the offline English distillation corpus for Ternlight.

Sources (all Debian packages, all offline):
  * WordNet 3.0 (wordnet-base): /usr/share/wordnet/data.{noun,verb,adj,adv} glosses + examples
  * GCIDE (dict-gcide), FOLDOC (dict-foldoc), Jargon File (dict-jargon): dictd .index + .dict.dz
  * fortunes (fortunes / fortunes-min): /usr/share/games/fortunes/*

Besides the definitions themselves we generate query-, question- and title-style text from the
headwords ("what is a <word>", "<word> meaning", "how does a <word> work", title-cased noun
phrases, truncated first clauses), because the student is meant for short queries and titles.

Every text carries the key of the entry it came from (the normalised headword, or file:index for
fortunes).  The split is decided by a hash of that key, so all texts derived from one headword land
in the same split (no leakage of "apple meaning" into train while "what is an apple" is in test).

Output: train/work/{train,val,test}.txt (one text per line) and train/work/corpus_stats.json.
"""
import argparse
import base64
import glob
import gzip
import hashlib
import json
import os
import random
import re
import sys

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
WS = re.compile(r"\s+")


def b64num(s):
    v = 0
    for c in s:
        v = v * 64 + B64.index(c)
    return v


def norm(t):
    t = t.replace("\u00a0", " ")
    t = WS.sub(" ", t).strip()
    return t


def ok(t, min_words=2, max_words=64, max_chars=400):
    if len(t) < 6 or len(t) > max_chars:
        return False
    n = len(t.split())
    if n < min_words or n > max_words:
        return False
    letters = sum(c.isalpha() for c in t)
    return letters >= 0.5 * len(t.replace(" ", ""))


def article(w):
    return "an" if w[:1].lower() in "aeiou" else "a"


def first_clause(t):
    # truncated first clause: up to the first , ; : ( or 8 words
    m = re.split(r"[,;:(]", t, maxsplit=1)[0]
    words = m.split()
    return " ".join(words[:8])


def query_variants(word, pos, rng, k=2):
    """Query/question/title-style texts generated from a headword."""
    w = word.replace("_", " ").strip()
    if not w or len(w) < 2:
        return []
    a = article(w)
    if pos == "v":
        pool = [f"how to {w}", f"what does it mean to {w}", f"{w} meaning", f"define {w}",
                f"how do you {w}", f"ways to {w}", f"why do people {w}", f"{w} definition"]
    elif pos in ("a", "s", "r"):
        pool = [f"{w} meaning", f"what does {w} mean", f"define {w}", f"synonym for {w}",
                f"{w} definition", f"is it {w}", f"another word for {w}"]
    else:
        pool = [f"what is {a} {w}", f"{w} meaning", f"how does {a} {w} work", f"define {w}",
                f"{w} definition", f"what is {w} used for", f"history of the {w}",
                f"types of {w}", f"{w}", w.title(), f"The {w.title()}", f"where to find {a} {w}",
                f"{w} explained", f"how to choose {a} {w}", f"pictures of {a} {w}"]
    return rng.sample(pool, min(k, len(pool)))


# ----------------------------------------------------------------------------------- WordNet
def wordnet_entries(root="/usr/share/wordnet", rng=None):
    for pos_name, pos in [("noun", "n"), ("verb", "v"), ("adj", "a"), ("adv", "r")]:
        path = os.path.join(root, "data." + pos_name)
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  "):
                    continue
                if "|" not in line:
                    continue
                head, gloss = line.split("|", 1)
                parts = head.split()
                try:
                    nw = int(parts[3], 16)
                except (IndexError, ValueError):
                    continue
                lemmas = [parts[4 + 2 * i] for i in range(nw)]
                lemmas = [re.sub(r"\(.*\)$", "", l).replace("_", " ") for l in lemmas]
                lemma = lemmas[0]
                gloss = gloss.strip()
                examples = re.findall(r'"([^"]+)"', gloss)
                defs = re.sub(r'"[^"]*"', "", gloss)
                defs = [d.strip(" ;") for d in defs.split(";") if d.strip(" ;")]
                texts = []
                if defs:
                    texts.append(defs[0])
                    if len(defs) > 1:
                        texts.append("; ".join(defs))
                    fc = first_clause(defs[0])
                    if len(fc.split()) >= 3 and fc != defs[0]:
                        texts.append(fc)
                    texts.append(f"{lemma}: {defs[0]}")
                texts.extend(examples)
                texts.extend(query_variants(lemma, pos, rng, k=2))
                if len(lemmas) > 1:
                    texts.append(rng.choice([f"{lemma} vs {lemmas[1]}",
                                             f"difference between {lemma} and {lemmas[1]}",
                                             f"{lemmas[1]} or {lemma}"]))
                yield "wn", lemma.lower(), texts


# ----------------------------------------------------------------------------------- dictd
def dictd_raw(name, root="/usr/share/dictd"):
    data = gzip.open(os.path.join(root, name + ".dict.dz")).read()
    seen = set()
    with open(os.path.join(root, name + ".index"), encoding="utf-8", errors="replace") as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) < 3 or p[0].startswith("00-database") or p[0].startswith("00database"):
                continue
            off, ln = b64num(p[1]), b64num(p[2])
            if (off, ln) in seen:
                continue
            seen.add((off, ln))
            yield p[0], data[off:off + ln].decode("utf-8", errors="replace")


def clean_markup(t):
    t = re.sub(r"\[1913 Webster\]|\[WordNet 1\.5\]|\[PJC\]|\[Webster 1913 Suppl\.\]", " ", t)
    t = re.sub(r"\[[^\]]{0,80}\]", " ", t)            # etymology / source tags
    t = re.sub(r"\(https?://[^)]*\)", " ", t)
    t = re.sub(r"<[a-z ,/-]+>", " ", t)               # foldoc <category>
    t = t.replace("{", "").replace("}", "")
    t = t.replace("\u201c", '"').replace("\u201d", '"').replace("\u2018", "'").replace("\u2019", "'")
    return norm(t)


def sentences(t, max_n=3):
    out = []
    for s in re.split(r"(?<=[.!?])\s+(?=[A-Z\"])", t):
        s = s.strip()
        if s:
            out.append(s)
        if len(out) >= max_n:
            break
    return out


def gcide_entries(rng):
    for head, body in dictd_raw("gcide"):
        lines = body.split("\n")
        m = re.match(r"^(.*?)\s*\\", lines[0])
        word = (m.group(1) if m else head).strip()
        pos_m = re.search(r"\),?\s*(n|v\. t|v\. i|v|a|adv)\.", lines[0])
        pos = {"n": "n", "a": "a", "adv": "r"}.get(pos_m.group(1), "v") if pos_m else "n"
        rest = "\n".join(lines[1:])
        rest = re.sub(r"\n\s*Note:.*?(?=\n\s*\n|\Z)", "\n", rest, flags=re.S)
        rest = re.sub(r"\n\s*Syn:.*", "", rest, flags=re.S)
        senses = re.split(r"\n\s*\d+\.\s", "\n" + rest)
        texts = []
        for s in senses[:4]:
            s = clean_markup(s)
            s = re.sub(r"^\((?:[A-Za-z]+\.\s?)+\)\s*", "", s)   # (bot.) (Zool.) labels
            s = re.sub(r"^-+\s*", "", s)
            if not s:
                continue
            ss = sentences(s, 2)
            if ss:
                texts.append(ss[0])
                if len(ss) > 1 and rng.random() < 0.3:
                    texts.append(" ".join(ss))
        if not texts:
            continue
        texts.extend(query_variants(word, pos, rng, k=1))
        yield "gcide", word.lower(), texts


def tech_entries(name, rng):
    for head, body in dictd_raw(name):
        paras = [p for p in re.split(r"\n\s*\n", body) if p.strip()]
        if not paras:
            continue
        # the first paragraph (or two) hold the headword / synonyms
        paras = [p for p in paras[1:] if not re.match(r"^\s*\(\d{4}-\d\d-\d\d\)\s*$", p)]
        texts = []
        for p in paras[:3]:
            c = clean_markup(p)
            c = re.sub(r"^\(.*?\)\s*", "", c) if len(c) < 60 else c
            c = re.sub(r"^\d+\.\s*", "", c)
            c = re.sub(r"^(n|v|vt|vi|adj|adv)\.\s+", "", c)
            for s in sentences(c, 2):
                texts.append(s)
        if not texts:
            continue
        w = head.strip()
        a = article(w)
        texts.append(rng.choice([f"what is {w}", f"{w} in computing", f"what does {w} mean",
                                 f"{w} programming", f"how does {w} work", f"{w} meaning",
                                 f"explain {w}", f"{a} {w} example"]))
        yield name, w.lower(), texts


# ----------------------------------------------------------------------------------- fortunes
def fortune_entries(root="/usr/share/games/fortunes"):
    for path in sorted(glob.glob(os.path.join(root, "*"))):
        base = os.path.basename(path)
        if "." in base or os.path.islink(path) or not os.path.isfile(path):
            continue
        if base in ("art", "ascii-art"):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            chunks = f.read().split("\n%\n")
        for i, c in enumerate(chunks):
            c = re.sub(r"\n\s*--\s.*$", "", c.strip(), flags=re.S)   # attribution
            t = norm(c)
            if t:
                yield "fortune", f"{base}:{i}", [t]


def split_of(key, val_pct, test_pct):
    h = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "little") % 10000
    if h < test_pct * 100:
        return "test"
    if h < (test_pct + val_pct) * 100:
        return "val"
    return "train"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "work"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--max-train", type=int, default=100000)
    ap.add_argument("--n-val", type=int, default=2000)
    ap.add_argument("--n-test", type=int, default=2000)
    ap.add_argument("--val-pct", type=float, default=2.0)
    ap.add_argument("--test-pct", type=float, default=2.0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)

    gens = [("wordnet", wordnet_entries(rng=rng)), ("gcide", gcide_entries(rng)),
            ("foldoc", tech_entries("foldoc", rng)), ("jargon", tech_entries("jargon", rng)),
            ("fortunes", fortune_entries())]
    splits = {"train": [], "val": [], "test": []}
    seen = set()
    stats = {}
    for name, gen in gens:
        n_e = n_t = 0
        for src, key, texts in gen:
            n_e += 1
            # the split key is the normalised headword across sources (so "apple" in WordNet and
            # in GCIDE go to the same split); fortunes use file:index.
            k = key if src == "fortune" else re.sub(r"[^a-z0-9]+", " ", key).strip()
            sp = split_of(k, args.val_pct, args.test_pct)
            for t in texts:
                t = norm(t)
                if not ok(t, min_words=1 if len(t) >= 6 else 2):
                    continue
                lk = t.lower()
                if lk in seen:
                    continue
                seen.add(lk)
                splits[sp].append((src, t))
                n_t += 1
        stats[name] = {"entries": n_e, "texts": n_t}
        print(f"{name}: {n_e} entries, {n_t} texts", file=sys.stderr)

    limits = {"train": args.max_train, "val": args.n_val, "test": args.n_test}
    for sp in splits:
        items = splits[sp]
        rng.shuffle(items)
        stats[sp + "_available"] = len(items)
        items = items[:limits[sp]]
        stats[sp] = len(items)
        by_src = {}
        for s, _ in items:
            by_src[s] = by_src.get(s, 0) + 1
        stats[sp + "_by_source"] = by_src
        with open(os.path.join(args.out, sp + ".txt"), "w", encoding="utf-8") as f:
            for _, t in items:
                f.write(t + "\n")
    with open(os.path.join(args.out, "corpus_stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps(stats, indent=1), file=sys.stderr)


if __name__ == "__main__":
    main()
