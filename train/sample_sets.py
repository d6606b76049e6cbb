#!/usr/bin/env python3
"""Draw the evaluation sets and the ordered training pool from the broad corpus (corpus_broad.py).

  python3 train/sample_sets.py            # reads/writes $TERN_WORK (default train/work)

  test_<domain>.txt   --n-test texts per domain from the test split (held out: never trained on,
                      never used for model selection)
  dev.tsv             --n-dev texts per domain from the dev split (domain \\t text; training curves /
                      early stopping only)
  pool.txt            training texts in a random order with the domain mixture --mix, so that any
                      prefix is a representative sample (labelling runs in shards over a prefix)
  pool_domains.txt    the domain of each line of pool.txt
  sets_stats.json     counts
"""
import argparse
import collections
import json
import os
import random

MIX = "dict=0.20,queries=0.20,pypi=0.14,pkgdesc=0.15,man=0.10,docs=0.08,literature=0.08,faq=0.05"


def read(path):
    by = collections.defaultdict(list)
    with open(path, encoding="utf-8") as f:
        for line in f:
            d, _, t = line.rstrip("\n").split("\t", 2)
            by[d].append(t)
    return by


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=os.environ.get("TERN_WORK", os.path.join(os.path.dirname(__file__), "work")))
    ap.add_argument("--n-test", type=int, default=600)
    ap.add_argument("--n-dev", type=int, default=300)
    ap.add_argument("--n-pool", type=int, default=600000)
    ap.add_argument("--mix", default=MIX, help="domain=weight,... for the training pool")
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    W = args.work
    stats = {"test": {}, "dev": {}, "pool": {}}
    test = read(os.path.join(W, "corpus_test.tsv"))
    for d in sorted(test):
        xs = test[d]
        rng.shuffle(xs)
        xs = xs[:args.n_test]
        stats["test"][d] = len(xs)
        with open(os.path.join(W, f"test_{d}.txt"), "w", encoding="utf-8") as f:
            f.writelines(t + "\n" for t in xs)
    dev = read(os.path.join(W, "corpus_dev.tsv"))
    with open(os.path.join(W, "dev.tsv"), "w", encoding="utf-8") as f:
        for d in sorted(dev):
            xs = dev[d]
            rng.shuffle(xs)
            stats["dev"][d] = len(xs[:args.n_dev])
            f.writelines(f"{d}\t{t}\n" for t in xs[:args.n_dev])
    train = read(os.path.join(W, "corpus_train.tsv"))
    mix = {k: float(v) for k, v in (kv.split("=") for kv in args.mix.split(","))}
    tot = sum(mix.values())
    want = {d: int(round(args.n_pool * w / tot)) for d, w in mix.items()}
    items = []
    for d, n in want.items():
        xs = train.get(d, [])
        rng.shuffle(xs)
        xs = xs[:n]          # small domains give what they have
        stats["pool"][d] = len(xs)
        items += [(d, t) for t in xs]
    rng.shuffle(items)
    with open(os.path.join(W, "pool.txt"), "w", encoding="utf-8") as f, \
            open(os.path.join(W, "pool_domains.txt"), "w") as g:
        for d, t in items:
            f.write(t + "\n")
            g.write(d + "\n")
    stats["pool_total"] = len(items)
    with open(os.path.join(W, "sets_stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
