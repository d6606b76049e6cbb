"""Issue 30: more labelled points near the real queries, made from the training texts themselves.

Every run since stage 12 peaks on dev within ~800 steps and drifts down after while its training loss
falls: the student over-fits the 215 k real queries (web / questions / dup) it sees again and again.
The offline query sources are exhausted (pyserini 0.19.2's jar has the most topic files: 0.20 adds
only generated expansions and non-English sets, 0.22 and later ship none), so this makes variants of
the training texts and lets the teacher label them, as TinyBERT's augmentation does for task
distillation: the teacher's vector of a cut, thinned or joined query is a new, exact target.

Writes $TERN_WORK/realqaug_train.txt (+ _domains.txt, _sources.txt): realq_train.txt unchanged
(so its first full label shards are reused: linked, not relabelled), then the variants, shuffled.
Variants, one kind drawn per text (--per variants of each training text, concatenations on top):
  drop    every word dropped with probability 0.25 (texts of 3+ words)
  crop    a contiguous 50-85 % of the words (texts of 3+ words)
  swap    1-2 words replaced by words of other texts of the same domain
  concat  the text and another of its domain, joined with a space
Kept only when new: the key (queries_real.key) of no training text, no dev or test text of any
domain, and no protocol query, token-Jaccard near-duplicate of one, nor a text whose teacher vector
is within cosine 0.95 of one (queries_real.protocol_leaks, as for the real queries: a first version
without the teacher check let 'human growth hormone' through, 0.9509 to 'what is human growth
hormone'); train/test_leakage.py checks every labelled variant again.
Variants of the held-out sources cannot arise: only training texts are varied.

    TERN_WORK=... python3 train/augment.py [--per 1] [--concat 0.3] [--seed 40]
    TERN_WORK=... python3 train/label.py --shards $TERN_WORK/realqaug_train.txt
"""
import argparse
import glob
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import queries_real as Q  # noqa: E402
from label import SHARD  # noqa: E402

WORK = os.environ.get("TERN_WORK", os.path.join(HERE, "work"))


def read(p):
    with open(p, encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f]


def held_keys(w):
    """Keys of every dev and test text of every domain (their last tab-separated column)."""
    keys = set()
    pats = ["test_*.txt", "dev*.tsv", "*_dev.tsv", "*_test.tsv", "corpus_dev.tsv", "corpus_test.tsv",
            "long_test.tsv"]
    for pat in pats:
        for p in glob.glob(os.path.join(w, pat)):
            for l in read(p):
                keys.add(Q.key(l.rsplit("\t", 1)[-1]))
    return keys


def variant(rng, t, words_of, dom):
    w = t.split()
    kinds = ["swap"] + (["drop", "crop"] if len(w) >= 3 else [])
    kind = rng.choice(kinds)
    if kind == "drop":
        kept = [x for x in w if rng.random() >= 0.25]
        if len(kept) < 2 or len(kept) == len(w):
            kept = w[:]
            del kept[rng.randrange(len(kept))]
        out = kept
    elif kind == "crop":
        n = max(2, min(len(w) - 1, round(len(w) * rng.uniform(0.5, 0.85))))
        s = rng.randrange(len(w) - n + 1)
        out = w[s:s + n]
    else:
        out = w[:]
        pool = words_of[dom]
        for _ in range(1 if len(w) < 4 else rng.choice((1, 2))):
            out[rng.randrange(len(out))] = pool[rng.randrange(len(pool))]
    return kind, " ".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--per", type=int, default=1, help="variants (drop / crop / swap) per training text")
    ap.add_argument("--concat", type=float, default=0.3,
                    help="concatenations of two texts of a domain, as a fraction of its training texts")
    ap.add_argument("--seed", type=int, default=40)
    ap.add_argument("--work", default=WORK)
    args = ap.parse_args()
    w = args.work
    rng = random.Random(args.seed)
    texts = read(os.path.join(w, "realq_train.txt"))
    doms = read(os.path.join(w, "realq_train_domains.txt"))
    srcs = read(os.path.join(w, "realq_train_sources.txt"))
    assert len(texts) == len(doms) == len(srcs)
    by_dom = {}
    for i, d in enumerate(doms):
        by_dom.setdefault(d, []).append(i)
    words_of = {d: [x for i in ix for x in texts[i].split()] for d, ix in by_dom.items()}

    seen = {Q.key(t) for t in texts} | held_keys(w)
    out = {}  # key -> (text, domain, source, kind)
    made = {}
    for i, t in enumerate(texts):
        for _ in range(args.per):
            kind, v = variant(rng, t, words_of, doms[i])
            v = Q.normalise(v)
            k = v and Q.key(v)
            if k and k not in seen and k not in out:
                out[k] = (v, doms[i], srcs[i], kind)
                made[kind] = made.get(kind, 0) + 1
    for d, ix in by_dom.items():
        for _ in range(round(args.concat * len(ix))):
            a, b = rng.choice(ix), rng.choice(ix)
            v = Q.normalise(texts[a] + " " + texts[b])
            k = v and Q.key(v)
            if a != b and k and k not in seen and k not in out:
                out[k] = (v, d, srcs[a], "concat")
                made["concat"] = made.get("concat", 0) + 1

    items = json.load(open(Q.TQ))
    drop, n_cand, n_cos = Q.protocol_leaks({k: [v[0]] for k, v in out.items()}, items)
    for k in drop:
        del out[k]
    keys = sorted(out)
    rng.shuffle(keys)
    stem = os.path.join(w, "realqaug_train")
    with open(stem + ".txt", "w", encoding="utf-8") as ft, open(stem + "_domains.txt", "w") as fd, \
            open(stem + "_sources.txt", "w") as fs:
        rows = list(zip(texts, doms, srcs)) + [(out[k][0], out[k][1], f"{out[k][2]}+{out[k][3]}") for k in keys]
        for t, d, s in rows:
            ft.write(t + "\n")
            fd.write(d + "\n")
            fs.write(s + "\n")
    # Labels: the shards wholly inside realq_train.txt are the same texts (linked); every later
    # shard of an earlier realqaug_train holds other texts now (label.py only fills missing
    # shards), so it goes.
    lab = os.path.join(w, "labels")
    kept = len(texts) // SHARD
    linked = removed = 0
    for p in glob.glob(os.path.join(lab, "realqaug_train_[0-9][0-9][0-9][0-9].npy")):
        if int(p[-8:-4]) >= kept:
            os.remove(p)
            removed += 1
    for s in range(kept):
        src = os.path.join(lab, f"realq_train_{s:04d}.npy")
        dst = os.path.join(lab, f"realqaug_train_{s:04d}.npy")
        if os.path.exists(src) and not os.path.exists(dst):
            os.link(src, dst)
            linked += 1
    stats = {"training_texts": len(texts), "variants": len(keys), "made_by_kind": made,
             "dropped_near_protocol": len(drop), "protocol_candidates": n_cand, "teacher_cosines_checked": n_cos,
             "by_domain": {d: sum(1 for k in keys if out[k][1] == d) for d in by_dom},
             "label_shards_linked": linked, "stale_label_shards_removed": removed, "seed": args.seed, "per": args.per, "concat": args.concat}
    json.dump(stats, open(os.path.join(w, "realqaug_stats.json"), "w"), indent=1)
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
