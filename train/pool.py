#!/usr/bin/env python3
"""Adding a generated query domain to the training pool and the dev set (train/queries_synth.py's
webq, train/entity_queries.py's ents).

  python3 train/pool.py append-dev DOMAIN   # dev_DOMAIN.tsv -> dev.tsv, and its labels
                                            # dev_DOMAIN_teacher.npy (label.py --files) -> dev_teacher.npy;
                                            # does nothing when dev.tsv has DOMAIN rows already

A generator writes $TERN_WORK/DOMAIN_{train,dev,test}.tsv (domain, key, text) and calls
append_train(DOMAIN), which appends the train queries to pool.txt / pool_domains.txt (label.py --pool
then labels the new shards) and writes dev_DOMAIN.tsv.  Once dev.tsv is labelled, a new dev domain
is labelled on its own and appended to both files in the same order.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.environ.get("TERN_WORK", os.path.join(HERE, "work"))


def texts(path):
    return [l.rstrip("\n").split("\t", 2)[2] for l in open(path, encoding="utf-8")]


def append_train(domain):
    """Appends DOMAIN_train.tsv to the pool; writes dev_DOMAIN.tsv; returns the dev texts."""
    qs = texts(os.path.join(WORK, f"{domain}_train.tsv"))
    with open(os.path.join(WORK, "pool.txt"), "a", encoding="utf-8") as f:
        f.write("".join(q + "\n" for q in qs))
    with open(os.path.join(WORK, "pool_domains.txt"), "a") as f:
        f.write(f"{domain}\n" * len(qs))
    print(f"appended {len(qs)} {domain} queries to pool.txt")
    dev = texts(os.path.join(WORK, f"{domain}_dev.tsv"))
    with open(os.path.join(WORK, f"dev_{domain}.tsv"), "w", encoding="utf-8") as f:
        f.write("".join(f"{domain}\t{q}\n" for q in dev))
    return dev


def append_dev(domain):
    """dev_DOMAIN.tsv and its teacher labels onto dev.tsv and dev_teacher.npy."""
    import numpy as np
    if any(l.startswith(f"{domain}\t") for l in open(os.path.join(WORK, "dev.tsv"), encoding="utf-8")):
        print(f"dev.tsv already has {domain} rows: nothing to append")
        return
    rows = open(os.path.join(WORK, f"dev_{domain}.tsv"), encoding="utf-8").read()
    y = np.load(os.path.join(WORK, f"dev_{domain}_teacher.npy"))
    if len(y) != rows.count("\n"):
        sys.exit(f"dev_{domain}_teacher.npy has {len(y)} rows for {rows.count(chr(10))} texts: relabel it")
    base = np.load(os.path.join(WORK, "dev_teacher.npy"))
    n_dev = sum(1 for _ in open(os.path.join(WORK, "dev.tsv"), encoding="utf-8"))
    if len(base) != n_dev:
        sys.exit(f"dev_teacher.npy has {len(base)} rows for {n_dev} dev texts: label dev.tsv first")
    with open(os.path.join(WORK, "dev.tsv"), "a", encoding="utf-8") as f:
        f.write(rows)
    np.save(os.path.join(WORK, "dev_teacher.npy"), np.concatenate([base, y]))
    print(f"appended {len(y)} {domain} dev texts to dev.tsv and dev_teacher.npy")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "append-dev":
        sys.exit(__doc__)
    append_dev(sys.argv[2])
