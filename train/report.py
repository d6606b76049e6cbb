#!/usr/bin/env python3
"""Print the markdown pieces of models/README.md that come from files: the training curve
(train/work/curve.tsv, also copied to train/curve.tsv), the evaluation table
(train/work/eval_results.json), file sizes and SHA-256 hashes, and the corpus statistics.

  python3 train/report.py > train/work/report.md
"""
import hashlib
import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
WORK = os.path.join(HERE, "work")


def main():
    curve = os.path.join(WORK, "curve.tsv")
    if os.path.exists(curve):
        shutil.copy(curve, os.path.join(HERE, "curve.tsv"))
        rows = [l.rstrip("\n").split("\t") for l in open(curve)]
        hdr, rows = rows[0], rows[1:]
        print("### Training curve (validation split, 2 000 sentences, 40 000 random pairs)\n")
        print("| step | phase | val cos(student, teacher) | val Spearman | int4-file forward: cos | int4: Spearman | train loss | minutes |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
        print()
        # ascii sparkline of val cos vs step
        print("```")
        print("val cos (int4 forward) vs step")
        for r in rows:
            v = float(r[4])
            print(f"{int(r[0]):>6} {v:.4f} " + "#" * int(max(0.0, v - 0.2) * 100))
        print("```\n")
    ev = os.path.join(WORK, "eval_results.json")
    if os.path.exists(ev):
        e = json.load(open(ev))
        print(f"### Held-out test split ({e['sentences']} sentences, {e['pairs']} pairs; backend {e['backend']})\n")
        print("| file | bytes | Spearman | Pearson | recall@10 | mean cos to teacher | packed vs training forward, min cos |")
        print("|---|---|---|---|---|---|---|")
        for k, r in e["models"].items():
            print(f"| `{k}` | {r['size']} | {r['spearman']:.4f} | {r['pearson']:.4f} | {r['recall_at_10']:.4f} | "
                  f"{r['mean_cos_to_teacher']:.4f} | {r.get('packed_vs_training_min_cos', float('nan')):.6f} |")
        print()
    print("### Files\n")
    print("| file | bytes | SHA-256 | model id |")
    print("|---|---|---|---|")
    for p in ["models/ternlight-int4.bin", "models/ternlight-ternary.bin", "train/work/ternlight-int8.bin",
              "models/ternlight-int8.bin"]:
        fp = os.path.join(ROOT, p)
        if os.path.exists(fp):
            h = hashlib.sha256(open(fp, "rb").read()).hexdigest()
            print(f"| `{p}` | {os.path.getsize(fp)} | `{h}` | `{h[:16]}` |")
    print()
    cs = os.path.join(WORK, "corpus_stats.json")
    if os.path.exists(cs):
        print("### Corpus\n\n```\n" + json.dumps(json.load(open(cs)), indent=1) + "\n```")


if __name__ == "__main__":
    main()
