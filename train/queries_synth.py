#!/usr/bin/env python3
"""Web-search-style queries synthesised from the corpus's own sentences (issue 13, domain "webq").

  python3 train/queries_synth.py                   # -> $TERN_WORK/webq_{train,dev,test}.tsv
  python3 train/queries_synth.py --append-pool     # also appends webq_train to pool.txt / pool_domains.txt
                                                   # (then train/label.py --pool labels the new shards)
                                                   # and webq_dev to dev.tsv (before it is labelled)

Why: the "queries" domain (train/corpus_broad.py) fills ~60 fixed templates with WordNet lemmas, so
its pairs are easy to rank (same template = similar vector) and its words are the dictionary's rare
ones.  Ternlight's protocol ranks pairs of unrelated web queries, which mix common words, proper
nouns and many sentence shapes.  These queries are cut out of real sentences of every domain:

  * keywords   - 2-6 consecutive content words of a sentence ("bulging disc symptoms treatment")
  * np         - a noun phrase (determiner + up to 3 words) in one of ~50 question shapes
                 ("what is the boot loader", "difference between X and Y", "X near me")
  * howto      - a sentence that opens with a WordNet verb, cut to <= 7 words ("how to convert pdf files")
  * entity     - a capitalised word inside a sentence in a who/where/when shape ("how old is Isaac")

Each query is built from one corpus line and lands in that line's split (corpus_<split>.tsv was split by
source document in train/corpus_broad.py), so no held-out query shares a source document with training.
Deterministic (--seed).  Queries already in the pool, and duplicates, are dropped.
"""
import argparse
import os
import random
import re

from pool import append_train

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.environ.get("TERN_WORK", os.path.join(HERE, "work"))

STOP = set("""a an the this that these those its their his her our your my of in on at to for from by with
as is are was were be been being and or but not no nor so if then than which who whom whose what when
where why how it they them he she we you i me us him do does did done has have had can could may might
must shall should will would also such into onto over under about above below between through during
per via each every any all some most more other another same only own very just one two there here
e g etc use used using see""".split())
DET = {"the", "a", "an", "this", "its", "their", "his", "her", "your", "our", "each", "every", "any"}

NP_SHAPES = [
    "what is {np}", "what are {np}", "what is a {np}", "{np} definition", "{np} meaning", "define {np}",
    "how does {np} work", "how to make {np}", "how to use {np}", "how to install {np}", "how to fix {np}",
    "where to buy {np}", "{np} near me", "best {np}", "cheap {np}", "{np} price", "how much is {np}",
    "{np} cost", "is {np} safe", "is {np} good", "why is {np} important", "{np} examples",
    "types of {np}", "history of {np}", "who invented {np}", "when was {np} invented", "what causes {np}",
    "{np} side effects", "{np} benefits", "{np} symptoms", "{np} for beginners", "{np} tutorial",
    "how long does {np} last", "how big is {np}", "what does {np} mean", "what is {np} used for",
    "{np} vs {np2}", "difference between {np} and {np2}", "{np} and {np2}", "{np} for {np2}",
    "{np} in {np2}", "how to get {np}", "can i use {np}", "{np} review", "{np} wiki", "{np} facts",
    "what is the best {np}", "how many {np} are there", "{np} list", "{np} images",
]
ENTITY_SHAPES = [
    "who is {e}", "how old is {e}", "where is {e}", "what is {e}", "{e} population", "{e} wiki",
    "when was {e} born", "what county is {e} in", "{e} weather", "who wrote {e}", "{e} net worth",
    "where is {e} located", "what did {e} do", "{e} facts", "{e} history", "{e} meaning",
]
WORD = re.compile(r"[A-Za-z][A-Za-z0-9'-]*|\d+")


def wordnet_verbs(root="/usr/share/wordnet"):
    vs = set()
    with open(os.path.join(root, "data.verb"), encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("  "):
                continue
            p = line.split()
            if len(p) > 4 and "_" not in p[4]:
                vs.add(re.sub(r"\(.*\)$", "", p[4]).lower())
    return vs


def noun_phrases(words):
    out = []
    for i, w in enumerate(words[:-1]):
        if w.lower() in DET:
            np_ = []
            for x in words[i + 1:i + 4]:
                if x.lower() in STOP or x.isdigit():
                    break
                np_.append(x.lower())
            if np_ and len(" ".join(np_)) >= 4:
                out.append(" ".join(np_))
    return out


def make_query(rng, text, verbs):
    words = WORD.findall(text)
    if len(words) < 2:
        return None
    kinds = ["keywords", "np", "np", "howto", "entity"]
    rng.shuffle(kinds)
    for kind in kinds:
        if kind == "keywords":
            content = [w.lower() for w in words if w.lower() not in STOP]
            if len(content) < 2:
                continue
            n = rng.randint(2, min(6, len(content)))
            s = rng.randint(0, len(content) - n)
            return kind, " ".join(content[s:s + n])
        if kind == "np":
            nps = noun_phrases(words)
            if not nps:
                continue
            shape = rng.choice(NP_SHAPES)
            if "{np2}" in shape:
                if len(nps) < 2:
                    continue
                a, b = rng.sample(nps, 2)
                return kind, shape.format(np=a, np2=b)
            return kind, shape.format(np=rng.choice(nps))
        if kind == "howto":
            if words[0].lower() not in verbs or words[0].lower() in STOP:
                continue
            n = rng.randint(2, min(7, len(words)))
            return kind, rng.choice(["how to ", "how do i ", "how can i ", "", "ways to "]) + \
                " ".join(w.lower() for w in words[:n])
        if kind == "entity":
            ents = [w for w in words[1:] if w[:1].isupper() and w.lower() not in STOP and len(w) > 2]
            if not ents:
                continue
            i = words.index(rng.choice(ents))
            e = words[i] + (" " + words[i + 1] if i + 1 < len(words) and words[i + 1][:1].isupper() else "")
            return kind, rng.choice(ENTITY_SHAPES).format(e=e)
    return None


def surface(rng, q):
    r = rng.random()
    if r < 0.08:
        q += "?"
    elif r < 0.12:
        q = q[:1].upper() + q[1:]
    return re.sub(r"\s+", " ", q).strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--train", type=int, default=150000, help="queries from corpus_train.tsv")
    ap.add_argument("--dev", type=int, default=300)
    ap.add_argument("--test", type=int, default=600)
    ap.add_argument("--append-pool", action="store_true")
    args = ap.parse_args()
    verbs = wordnet_verbs()
    pool = set(l.rstrip("\n") for l in open(os.path.join(WORK, "pool.txt"), encoding="utf-8"))
    seen = set(pool)
    for split, want in (("test", args.test), ("dev", args.dev), ("train", args.train)):
        rng = random.Random(f"{args.seed}:{split}")
        rows = [l.rstrip("\n").split("\t", 2) for l in open(os.path.join(WORK, f"corpus_{split}.tsv"), encoding="utf-8")]
        rows = [r for r in rows if len(r) == 3 and r[0] != "queries"]
        # every source domain contributes evenly (dict alone is 60 % of the lines)
        by_dom = {}
        for r in rows:
            by_dom.setdefault(r[0], []).append(r)
        for v in by_dom.values():
            rng.shuffle(v)
        order = []
        for i in range(max(len(v) for v in by_dom.values())):
            for d in sorted(by_dom):
                if i < len(by_dom[d]):
                    order.append(by_dom[d][i])
        out, kinds = [], {}
        for dom, key, text in order:
            if len(out) >= want:
                break
            made = make_query(rng, text, verbs)
            if not made:
                continue
            kind, q = made
            q = surface(rng, q)
            if len(q) < 6 or q in seen:
                continue
            seen.add(q)
            out.append((dom, key, q))
            kinds[kind] = kinds.get(kind, 0) + 1
        with open(os.path.join(WORK, f"webq_{split}.tsv"), "w", encoding="utf-8") as f:
            for dom, key, q in out:
                f.write(f"webq\t{dom}:{key}\t{q}\n")
        if split == "test":
            with open(os.path.join(WORK, "test_webq.txt"), "w", encoding="utf-8") as f:
                f.write("".join(q + "\n" for _, _, q in out))
        print(f"{split}: {len(out)} queries {kinds}", flush=True)
    if args.append_pool:
        dev = append_train("webq")
        if os.path.exists(os.path.join(WORK, "dev_teacher.npy")):
            # dev.tsv is already labelled: label dev_webq.tsv on its own, then append both
            print("dev_teacher.npy exists: run label.py --files dev_webq.tsv, then pool.py append-dev webq")
        else:
            with open(os.path.join(WORK, "dev.tsv"), "a", encoding="utf-8") as f:
                f.write("".join(f"webq\t{q}\n" for q in dev))
            print(f"appended {len(dev)} webq dev queries to dev.tsv")

if __name__ == "__main__":
    main()
