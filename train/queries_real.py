#!/usr/bin/env python3
"""Real web queries and questions from public IR test collections (issue 30): three domains
"web", "questions" and "dup" for distillation and held-out evaluation.

  pip download pyserini==0.19.2 --no-deps -d /work/cache/model/wheels      # once (~131 MB wheel)
  python3 train/queries_real.py [--wheel PATH] [--work $TERN_WORK]

Reads the topic files that Anserini bundles in its fat jar (pyserini/resources/jars/
anserini-0.16.2-fatjar.jar, topics-and-qrels/): no Java, no network; zipfile only.  Sources, their
formats and their terms: train/SOURCES.md ("Real queries").

Every text is NFC-normalised, control/format characters become spaces, whitespace is collapsed,
2..300 characters with at least one letter are kept.  Deduplication is global over all sources on a
key: accents stripped, lower-cased, every run of non-word characters a single space ("What's up?"
== "what s up" == Ternlight's BERT-decoded "what ' s up").  The first source in SOURCES order keeps
the text (its "primary" source); a text that any held-out source contains is held out.

Domains: web = TREC Terabyte 2005 efficiency log queries, TREC Million Query 2007-2009, MS MARCO
(v1 passage/doc dev+test, v2 dev/dev2, TREC DL 2019-2022), TREC Web/ad hoc titles, NTCIR WWW,
DBpedia-Entity; questions = NQ, TriviaQA, SQuAD, WebQuestions, CuratedTREC, HotpotQA, FEVER and
Climate-FEVER claims, SciFact, FiQA, BioASQ, TREC-COVID, NFCorpus, Touche, Mr. TyDi en, MIRACL en;
dup = Quora and CQADupStack question titles.

Splits (per domain):
  * held out by source, test only: web: TREC DL 2019-2022 (MS MARCO queries judged by NIST) and
    TREC Web 2009-2014; questions: WebQuestions and CuratedTREC; dup: the CQADupStack webmasters
    and wordpress forums;
  * the rest by SHA-1 of the dedup key: a dev and a test bucket per domain, each sized to give
    ~1.5x what the sets below need, and train.
  * test_DOMAIN.txt: 600 = 300 from the held-out sources + 300 from the hashed test bucket;
    (sources_test_DOMAIN.txt: the primary source of each line, named so that the test_*.txt glob of
    eval_domains.py / run_broad.sh does not take it for a test set);
    dev_DOMAIN.tsv: 300 from the hashed dev bucket (curves / early stopping only; `pool.py append-dev
    DOMAIN` adds it and its labels to dev.tsv once dev.tsv is labelled);
    DOMAIN_{train,dev,test}.tsv (domain, source, text) hold every text of each split, as
    entity_queries.py's files do; realq_train.txt (+ _domains.txt, _sources.txt): all three domains'
    training texts in one seeded shuffle (any prefix is representative), for
    `label.py --shards realq_train.txt`.

Leakage: Ternlight's protocol queries ($TERNLIGHT_QUERIES, default
$TERN_WORK/../ternlight_eval/spearman_smoke_1k.json: 100 MS MARCO queries with published teacher
vectors) are removed from every split, together with near-duplicates: the same dedup key, token
Jaccard >= 0.8 on the key's tokens, or teacher cosine >= 0.95 (onnxruntime teacher, computed for
every text with token Jaccard >= 0.25 against a protocol query, or sharing a content token and having
>= 0.5 of the shorter side's tokens in common).  Counts printed and written to real_stats.json;
the dropped texts to real_leakage.tsv.  train/test_leakage.py checks the produced files.
"""
import argparse
import fnmatch
import gzip
import hashlib
import io
import json
import math
import os
import random
import re
import sys
import unicodedata
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.environ.get("TERN_WORK", os.path.join(HERE, "work"))
WHEEL = os.environ.get("PYSERINI_WHEEL", "/work/cache/model/wheels/pyserini-0.19.2-py3-none-any.whl")
JAR = "pyserini/resources/jars/anserini-0.16.2-fatjar.jar"
TQ = os.environ.get("TERNLIGHT_QUERIES", os.path.join(WORK, "..", "ternlight_eval", "spearman_smoke_1k.json"))
TP = "topics-and-qrels/"
N_DEV, N_TEST = 300, 600
JACCARD_DROP, JACCARD_CAND, COS_DROP = 0.8, 0.25, 0.95

# (source, domain, held out by source, format, file patterns inside topics-and-qrels/)
#   colon: "id:text"; colon3: "id:priority:text"; id_tsv: "id<TAB>text" (optionally .gz);
#   text_tsv: "text<TAB>answers" (CSV quoting); jsonq: {"question": ...} per line; trec: <title> of TREC topics;
#   xmlq: <query>...</query>; xmlc: <content>...</content>
SOURCES = [
    ("msmarco-passage", "web", False, "id_tsv", ["topics.msmarco-passage.dev-subset.txt",
                                                  "topics.msmarco-passage.test-subset.txt"]),
    ("msmarco-doc", "web", False, "id_tsv", ["topics.msmarco-doc.dev.txt", "topics.msmarco-doc.test.txt"]),
    ("msmarco-v2", "web", False, "id_tsv", ["topics.msmarco-v2-passage.dev.txt", "topics.msmarco-v2-passage.dev2.txt",
                                             "topics.msmarco-v2-doc.dev.txt", "topics.msmarco-v2-doc.dev2.txt"]),
    ("trec-dl", "web", True, "id_tsv", ["topics.dl19-passage.txt", "topics.dl19-doc.txt", "topics.dl20.txt",
                                        "topics.dl21.txt", "topics.dl22.txt"]),
    ("tb05-efficiency", "web", False, "colon", ["topics.terabyte05.efficiency.txt"]),
    ("mq2007", "web", False, "colon", ["topics.mq.1-10000.txt"]),
    ("mq2008", "web", False, "colon", ["topics.mq.10001-20000.txt"]),
    ("mq2009", "web", False, "colon3", ["topics.mq.20001-60000.txt"]),
    ("trec-web", "web", True, "xmlq", ["topics.web.*.txt"]),
    ("trec-adhoc-titles", "web", False, "trec", ["topics.adhoc.*.txt", "topics.robust04.txt", "topics.robust05.txt",
                                                 "topics.core17.txt", "topics.core18.txt", "topics.terabyte04.*.txt",
                                                 "topics.terabyte05.751-800.txt", "topics.terabyte06.*.txt"]),
    ("ntcir-www", "web", False, "xmlc", ["topics.www1.english.txt", "topics.www2.english.txt"]),
    ("dbpedia-entity", "web", False, "id_tsv", ["topics.beir-v1.0.0-dbpedia-entity.test.tsv.gz"]),
    ("nq", "questions", False, "text_tsv", ["topics.dpr.nq.dev.txt", "topics.dpr.nq.test.txt",
                                            "topics.nq.dev.txt", "topics.nq.test.txt"]),
    ("nq", "questions", False, "id_tsv", ["topics.beir-v1.0.0-nq.test.tsv.gz"]),
    ("triviaqa", "questions", False, "text_tsv", ["topics.dpr.trivia.dev.txt", "topics.dpr.trivia.test.txt"]),
    ("squad", "questions", False, "jsonq", ["topics.dpr.squad.test.txt"]),
    ("webquestions", "questions", True, "jsonq", ["topics.dpr.wq.test.txt"]),
    ("curatedtrec", "questions", True, "jsonq", ["topics.dpr.curated.test.txt"]),
    ("hotpotqa", "questions", False, "id_tsv", ["topics.beir-v1.0.0-hotpotqa.test.tsv.gz"]),
    ("fever", "questions", False, "id_tsv", ["topics.fever.dev.txt", "topics.beir-v1.0.0-fever.test.tsv.gz"]),
    ("climate-fever", "questions", False, "id_tsv", ["topics.beir-v1.0.0-climate-fever.test.tsv.gz"]),
    ("scifact", "questions", False, "id_tsv", ["topics.beir-v1.0.0-scifact.test.tsv.gz"]),
    ("fiqa", "questions", False, "id_tsv", ["topics.beir-v1.0.0-fiqa.test.tsv.gz"]),
    ("bioasq", "questions", False, "id_tsv", ["topics.beir-v1.0.0-bioasq.test.tsv.gz"]),
    ("trec-covid", "questions", False, "id_tsv", ["topics.beir-v1.0.0-trec-covid.test.tsv.gz"]),
    ("nfcorpus", "questions", False, "id_tsv", ["topics.beir-v1.0.0-nfcorpus.test.tsv.gz"]),
    ("touche2020", "questions", False, "id_tsv", ["topics.beir-v1.0.0-webis-touche2020.test.tsv.gz"]),
    ("mrtydi-en", "questions", False, "id_tsv", ["topics.mrtydi-v1.1-en.*.txt.gz"]),
    ("miracl-en", "questions", False, "id_tsv", ["topics.miracl-v1.0-en-dev.tsv"]),
    ("quora", "dup", False, "id_tsv", ["topics.beir-v1.0.0-quora.test.tsv.gz"]),
    ("cqadupstack-heldout", "dup", True, "id_tsv", ["topics.beir-v1.0.0-cqadupstack-webmasters.test.tsv.gz",
                                                    "topics.beir-v1.0.0-cqadupstack-wordpress.test.tsv.gz"]),
    ("cqadupstack", "dup", False, "id_tsv", ["topics.beir-v1.0.0-cqadupstack-*.test.tsv.gz"]),
]
DOMAINS = ["web", "questions", "dup"]
# terms of each source (details and caveats: train/SOURCES.md): "open" = a licence that allows
# commercial use (CC BY / CC BY-SA / Apache-2.0); "noncommercial" = research / non-commercial terms;
# "unclear" = no licence found for the topic file.  --terms open keeps only the first class.
TERMS = {"msmarco-passage": "noncommercial", "msmarco-doc": "noncommercial", "msmarco-v2": "noncommercial",
         "trec-dl": "noncommercial", "tb05-efficiency": "unclear", "mq2007": "unclear", "mq2008": "unclear",
         "mq2009": "unclear", "trec-web": "unclear", "trec-adhoc-titles": "unclear", "ntcir-www": "noncommercial",
         "dbpedia-entity": "unclear", "nq": "open", "triviaqa": "unclear", "squad": "open",
         "webquestions": "open", "curatedtrec": "unclear", "hotpotqa": "open", "fever": "open",
         "climate-fever": "unclear", "scifact": "noncommercial", "fiqa": "unclear", "bioasq": "noncommercial",
         "trec-covid": "unclear", "nfcorpus": "unclear", "touche2020": "unclear", "mrtydi-en": "open",
         "miracl-en": "open", "quora": "noncommercial", "cqadupstack-heldout": "open", "cqadupstack": "open"}
STOP = set("a an the of to in on for and or is are was were be by with what how who when where why which "
           "does do did can i you it that this from as at my your s".split())


def open_jar(wheel):
    """The Anserini fat jar (itself a zip) inside the pyserini wheel, opened in memory."""
    jar_cache = os.path.join(os.path.dirname(wheel), os.path.basename(JAR))
    if os.path.exists(jar_cache):
        return zipfile.ZipFile(jar_cache)
    with zipfile.ZipFile(wheel) as w:
        return zipfile.ZipFile(io.BytesIO(w.read(JAR)))


def read_member(jar, name):
    raw = jar.read(name)
    if name.endswith(".gz"):
        raw = gzip.decompress(raw)
    return raw.decode("utf-8", errors="replace")


def unquote_csv(t):
    # DPR's TriviaQA file is CSV-quoted twice: """Who was the target of the """"Bomb Plot"""" of 1944?"""
    while len(t) >= 2 and t[0] == t[-1] == '"' and re.fullmatch(r'(?:[^"]|"")*', t[1:-1]):
        t = t[1:-1].replace('""', '"')
    return t


def parse(fmt, s):
    lines = [l.rstrip("\r") for l in s.split("\n")]     # not splitlines(): texts contain U+2028, \x1c ...
    if fmt in ("colon", "colon3"):
        n = 1 if fmt == "colon" else 2
        for line in lines:
            parts = line.split(":", n)
            if len(parts) == n + 1:
                yield parts[n]
    elif fmt == "id_tsv":
        for line in lines:
            if "\t" in line:
                yield line.split("\t", 1)[1]
    elif fmt == "text_tsv":
        for line in lines:
            if line.strip():
                yield unquote_csv(line.split("\t", 1)[0])
    elif fmt == "jsonq":
        for line in lines:
            if line.strip():
                yield json.loads(line)["question"]
    elif fmt == "trec":
        for t in re.findall(r"<title>\s*(?:Topic:)?\s*(.*?)\s*(?=<desc>|<|\n\s*\n)", s, re.S):
            yield t
    elif fmt == "xmlq":
        yield from (re.sub(r"&amp;", "&", q) for q in re.findall(r"<query>(.*?)</query>", s, re.S))
    elif fmt == "xmlc":
        yield from (re.sub(r"&amp;", "&", q) for q in re.findall(r"<content>(.*?)</content>", s, re.S))
    else:
        raise ValueError(fmt)


def normalise(t):
    t = unicodedata.normalize("NFC", t)
    t = "".join(" " if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c for c in t)
    t = re.sub(r"\s+", " ", t).strip()
    if not 2 <= len(t) <= 300 or not re.search(r"[^\W\d_]", t):
        return None
    return t


def key(t):
    """Dedup / leakage key: accents stripped, lower case, non-word runs -> one space."""
    t = unicodedata.normalize("NFKD", t)
    t = "".join(c for c in t if not unicodedata.combining(c)).lower()
    return re.sub(r"[\W_]+", " ", t).strip()


def bucket(k):
    return int(hashlib.sha1(k.encode("utf-8")).hexdigest()[:8], 16) % 10000


def collect(jar, terms=None):
    names = [n[len(TP):] for n in jar.namelist() if n.startswith(TP + "topics.")]
    seen = {}          # key -> [text, primary source, domain, held out, set of sources]
    stats = {}
    used = set()
    for src, dom, held, fmt, pats in SOURCES:
        if terms and TERMS[src] not in terms:
            continue
        st = stats.setdefault(src, {"domain": dom, "held_out": held, "terms": TERMS[src], "files": [],
                                    "raw": 0, "kept": 0, "primary": 0})
        files = sorted({n for p in pats for n in fnmatch.filter(names, p)} - used)
        if not files:
            sys.exit(f"{src}: no file matches {pats}")
        used.update(files)
        for fn in files:
            st["files"].append(fn)
            for raw in parse(fmt, read_member(jar, TP + fn)):
                st["raw"] += 1
                t = normalise(raw)
                if t is None:
                    continue
                st["kept"] += 1
                k = key(t)
                if not k:
                    continue
                if k in seen:
                    e = seen[k]
                    e[4].add(src)
                    e[3] = e[3] or held
                else:
                    seen[k] = [t, src, dom, held, {src}]
                    st["primary"] += 1
    return seen, stats


def protocol_leaks(seen, items, teacher=True):
    """Keys to drop: exact key, token Jaccard >= JACCARD_DROP, teacher cosine >= COS_DROP."""
    import numpy as np
    pk = [key(it["text"]) for it in items]
    ptok = [set(k.split()) for k in pk]
    inv = {}
    for i, ts in enumerate(ptok):
        for w in ts:
            inv.setdefault(w, []).append(i)
    drop, cand = {}, {}
    pset = set(pk)
    for k in seen:
        if k in pset:
            drop[k] = ("exact", pk.index(k), 1.0)
            continue
        toks = set(k.split())
        shared = {}
        for w in toks:
            for i in inv.get(w, ()):
                shared[i] = shared.get(i, 0) + 1
        best = None
        for i, c in shared.items():
            jac = c / len(toks | ptok[i])
            cont = c / min(len(toks), len(ptok[i]))
            content = any(w not in STOP for w in toks & ptok[i])
            if jac >= JACCARD_DROP:
                best = ("jaccard", i, jac)
                break
            if jac >= JACCARD_CAND or (content and cont >= 0.5):
                cand.setdefault(k, []).append(i)
        if best:
            drop[k] = best
    n_cos = 0
    if teacher and cand:
        sys.path.insert(0, HERE)
        import label as L
        ks = [k for k in cand if k not in drop]
        tok = L.tokenizer()
        ot = L.OrtTeacher(L.onnx_path())
        e = L.embed_ort(ot, [x.ids for x in tok.encode_batch([seen[k][0] for k in ks])])
        ref = np.array([it["teacher_emb"] for it in items], np.float32)
        ref /= np.linalg.norm(ref, axis=1, keepdims=True)
        sims = e @ ref.T
        n_cos = len(ks)
        for r, k in enumerate(ks):
            i = int(sims[r].argmax())
            if sims[r, i] >= COS_DROP:
                drop[k] = ("cosine", i, float(sims[r, i]))
    return drop, len(cand), n_cos


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheel", default=WHEEL)
    ap.add_argument("--work", default=WORK)
    ap.add_argument("--seed", type=int, default=30)
    ap.add_argument("--no-teacher", action="store_true", help="skip the teacher-cosine near-duplicate check")
    ap.add_argument("--terms", default="", help="comma list of TERMS classes to keep (default: all), "
                    "e.g. --terms open; use another --work directory for such a corpus")
    args = ap.parse_args()
    W = args.work
    rng = random.Random(args.seed)
    jar = open_jar(args.wheel)
    seen, stats = collect(jar, set(args.terms.split(",")) if args.terms else None)
    print(f"{sum(s['raw'] for s in stats.values())} raw texts, {len(seen)} distinct after normalising and dedup")

    # --- leakage: Ternlight's protocol queries
    leak = {"protocol_file": os.path.abspath(TQ)}
    if not os.path.exists(TQ):
        sys.exit(f"missing {TQ} (Ternlight's protocol queries): needed for the leakage check")
    items = json.load(open(TQ))
    drop, n_cand, n_cos = protocol_leaks(seen, items, teacher=not args.no_teacher)
    by_kind = {}
    with open(os.path.join(W, "real_leakage.tsv"), "w", encoding="utf-8") as f:
        for k, (kind, i, v) in sorted(drop.items(), key=lambda x: x[1][1]):
            e = seen[k]
            by_kind[kind] = by_kind.get(kind, 0) + 1
            f.write(f"{kind}\t{v:.4f}\t{e[1]}\t{e[0]}\t{items[i]['text']}\n")
    leak.update(protocol_queries=len(items), dropped=len(drop), dropped_by_kind=by_kind,
                protocol_queries_hit=len({v[1] for v in drop.values()}), cosine_candidates=n_cand,
                cosine_checked=n_cos, teacher_check=not args.no_teacher)
    dropped_by_source = {}
    for k in drop:
        dropped_by_source[seen[k][1]] = dropped_by_source.get(seen[k][1], 0) + 1
        del seen[k]
    leak["dropped_by_primary_source"] = dropped_by_source
    for s, st in stats.items():
        st["final"] = st["primary"] - dropped_by_source.get(s, 0)
    print(f"leakage: dropped {len(drop)} texts ({by_kind}) near {leak['protocol_queries_hit']} of the "
          f"{len(items)} protocol queries; teacher cosine computed for {n_cos} candidates")

    # --- splits
    size = {d: sum(1 for e in seen.values() if e[2] == d and not e[3]) for d in DOMAINS}
    held_n = {d: sum(1 for e in seen.values() if e[2] == d and e[3]) for d in DOMAINS}
    rate = {}
    for d in DOMAINS:
        need_test = N_TEST - min(N_TEST // 2, held_n[d])
        rate[d] = (min(2000, math.ceil(10000 * 1.5 * N_DEV / size[d])),
                   min(2000, math.ceil(10000 * 1.5 * need_test / size[d])))
    rows = {d: {"train": [], "dev": [], "test_held": [], "test_hash": []} for d in DOMAINS}
    for k in sorted(seen):
        t, src, d, held, _ = seen[k]
        if held:
            rows[d]["test_held"].append((src, t))
            continue
        b = bucket(k)
        r_dev, r_test = rate[d]
        sp = "dev" if b < r_dev else "test_hash" if b < r_dev + r_test else "train"
        rows[d][sp].append((src, t))
    split_stats = {}
    all_train = []
    for d in DOMAINS:
        R = rows[d]
        for sp in R:
            rng.shuffle(R[sp])
        test_all = R["test_held"] + R["test_hash"]
        for name, rs in (("train", R["train"]), ("dev", R["dev"]), ("test", test_all)):
            with open(os.path.join(W, f"{d}_{name}.tsv"), "w", encoding="utf-8") as f:
                f.writelines(f"{d}\t{s}\t{t}\n" for s, t in rs)
        n_held = min(len(R["test_held"]), N_TEST // 2)
        test = R["test_held"][:n_held] + R["test_hash"][:N_TEST - n_held]
        rng.shuffle(test)
        dev = R["dev"][:N_DEV]
        with open(os.path.join(W, f"test_{d}.txt"), "w", encoding="utf-8") as f:
            f.writelines(t + "\n" for _, t in test)
        with open(os.path.join(W, f"sources_test_{d}.txt"), "w") as f:
            f.writelines(s + "\n" for s, _ in test)
        with open(os.path.join(W, f"dev_{d}.tsv"), "w", encoding="utf-8") as f:
            f.writelines(f"{d}\t{t}\n" for _, t in dev)
        all_train += [(d, s, t) for s, t in R["train"]]
        split_stats[d] = {"train": len(R["train"]), "dev_split": len(R["dev"]), "test_split_held_out_sources":
                          len(R["test_held"]), "test_split_hashed": len(R["test_hash"]),
                          "dev_set": len(dev), "test_set": len(test), "test_set_from_held_out_sources": n_held,
                          "hash_rate_per_10000": {"dev": rate[d][0], "test": rate[d][1]}}
    rng.shuffle(all_train)
    tmp = os.path.join(W, "realq_train.txt.tmp")
    with open(tmp, "w", encoding="utf-8") as f, open(os.path.join(W, "realq_train_domains.txt"), "w") as g, \
            open(os.path.join(W, "realq_train_sources.txt"), "w") as h:
        for d, s, t in all_train:
            f.write(t + "\n")
            g.write(d + "\n")
            h.write(s + "\n")
    os.replace(tmp, os.path.join(W, "realq_train.txt"))
    per_domain = {d: sum(1 for e in seen.values() if e[2] == d) for d in DOMAINS}
    out = {"sources": stats, "per_domain_after_dedup": per_domain, "total_after_dedup": len(seen),
           "splits": split_stats, "realq_train": len(all_train), "leakage": leak}
    with open(os.path.join(W, "real_stats.json"), "w") as f:
        json.dump(out, f, indent=1)
    print("source                 domain        raw    kept  primary  final (primary: after dedup; final: after leakage)")
    for s, st in stats.items():
        print(f"{s:22s} {st['domain']:9s} {st['raw']:7d} {st['kept']:7d} {st['primary']:7d} {st['final']:7d}"
              f"{'  (held out)' if st['held_out'] else ''}")
    print(json.dumps({"per_domain_after_dedup": per_domain, "splits": split_stats,
                      "realq_train": len(all_train)}, indent=1))


if __name__ == "__main__":
    main()
