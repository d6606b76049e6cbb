#!/usr/bin/env python3
"""Build the broad, multi-domain distillation corpus (issue 13) from what this machine can reach.

Domains (each text carries its domain and the id of the source document it came from):
  dict       WordNet / GCIDE / FOLDOC / Jargon definitions and their generated queries (train/corpus.py)
  pkgdesc    Debian package descriptions (`apt-cache dumpavail`): short and long descriptions
  man        manual pages (/usr/share/man/man1-8): NAME lines, DESCRIPTION and option text (roff stripped)
  docs       Python's documentation sources (python3-doc, reStructuredText): prose and section titles
  faq        questions and first answer sentences of the Python FAQ (python3-doc) and the Debian FAQ
  literature KJV Bible verses (bible-kjv), Ambrose Bierce's Devil's Dictionary (dict-devil), fortunes
  pypi       one-line package summaries from the PyPI and npm lists in /work/.library/env/packages
  queries    generated search-engine-style queries: WordNet lemmas by lexicographer file ("symptoms of
             X" for noun.state, "where is X" for noun.location, ...), man NAME lines ("how to list
             directory contents"), package short descriptions ("X for linux")

Split: SHA-256 of "<domain>:<document id>" decides train / dev / test, so every text of one source
document (a package, a man page, a doc file, a headword, a verse chapter) lands in one split.  The dict
domain uses corpus.py's headword key, so its splits agree with the old corpus.

Output (in --out): corpus_{train,dev,test}.tsv  (domain \\t doc-id \\t text), corpus_stats.json.
  python3 train/corpus_broad.py --out $TERN_WORK
"""
import argparse
import collections
import glob
import gzip
import hashlib
import html
import json
import os
import random
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus as C  # noqa: E402  (old dictionary corpus: generators, norm, ok)

PKG_LISTS = "/work/.library/env/packages"


def sents(t, max_n=3):
    return C.sentences(C.norm(t), max_n)


# ----------------------------------------------------------------------------------- dict
def dict_docs(rng):
    for gen in (C.wordnet_entries(rng=rng), C.gcide_entries(rng), C.tech_entries("foldoc", rng),
                C.tech_entries("jargon", rng)):
        for src, key, texts in gen:
            yield "dict", re.sub(r"[^a-z0-9]+", " ", key).strip(), texts


# ----------------------------------------------------------------------------------- literature
def literature_docs(rng):
    # unwrapped output: a "Book N" line per chapter, then "  V text" per verse
    out = subprocess.run(["bible", "-l100000", "Gen1:1-Rev22:21"], capture_output=True, text=True).stdout
    chap = collections.defaultdict(list)
    cur = None
    for line in out.splitlines():
        m = re.match(r"^\s+(\d+)\s+(.*)$", line)
        if m and cur:
            chap[cur].append(m.group(2))
        elif line.strip():
            cur = "kjv:" + line.strip()
    for k, verses in chap.items():
        yield "literature", k, verses
    for head, body in C.dictd_raw("devil"):
        t = C.clean_markup(" ".join(body.split("\n")[1:]))
        if t:
            yield "literature", "devil:" + head.lower(), sents(t, 3)
    for src, key, texts in C.fortune_entries():
        yield "literature", key, texts


# ----------------------------------------------------------------------------------- pkgdesc
def pkg_docs(rng):
    out = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True).stdout
    for block in out.split("\n\n"):
        f, cur = {}, None
        desc_lines = []
        for line in block.split("\n"):
            if line.startswith(" ") and cur == "Description":
                desc_lines.append(line[1:])
            elif ":" in line and not line.startswith(" "):
                cur, v = line.split(":", 1)
                f[cur] = v.strip()
        if "Package" not in f or "Description" not in f:
            continue
        pkg = f["Package"]
        src = f.get("Source", pkg).split()[0]
        short = f["Description"]
        texts = [short, f"{pkg}: {short}"]
        paras = "\n".join(desc_lines).split("\n.\n")
        for p in paras[:2]:
            p = re.sub(r"^\s*[*-]\s+", "", p, flags=re.M)
            texts.extend(sents(p, 3))
        yield "pkgdesc", src, texts
        yield "queries", "pkg:" + src, [rng.choice([
            f"{short.lower()} for linux", f"how to install {pkg}", f"what is {pkg}",
            f"{pkg} alternative", f"best {short.lower()}", f"{short.lower()} debian package",
            f"is there a {short.lower()}", f"{pkg} tutorial"])]


# ----------------------------------------------------------------------------------- man pages
ROFF_ESC = [(r"\\f(\[[^\]]*\]|\(..|.)", ""), (r"\\s[-+]?\d+", ""), (r"\\\*(\[[^\]]*\]|\(..|.)", ""),
            (r"\\\((aq|cq)", "'"), (r"\\\((dq|lq|rq)", '"'), (r"\\\((em|en)", " - "), (r"\\\(bu", ""),
            (r"\\\(..", ""), (r"\\\[[^\]]*\]", ""), (r"\\[-]", "-"), (r"\\[&|^/,%:)]", ""),
            (r"\\e", "\\"), (r"\\ ", " "), (r"\\c", ""), (r"\\\\", "\\")]
ROFF_ESC = [(re.compile(a), (lambda m, b=b: b)) for a, b in ROFF_ESC]


def unroff(line):
    for r, b in ROFF_ESC:
        line = r.sub(b, line)
    return line


def man_sections(text):
    """{SECTION: [paragraph, ...]} from man(7) or mdoc(7) source."""
    secs = collections.defaultdict(list)
    sec, para = None, []

    def flush():
        if sec and para:
            secs[sec].append(" ".join(para))
        para.clear()

    for line in text.split("\n"):
        if line.startswith(".\\\"") or line.startswith("'\\\"") or line.startswith('.\\"'):
            continue
        m = re.match(r"^\.(SH|Sh)\s+(.*)$", line)
        if m:
            flush()
            sec = unroff(m.group(2)).strip('" ').upper()
            continue
        m = re.match(r"^\.(Nd)\s+(.*)$", line)
        if m:
            secs["ND"].append(unroff(m.group(2)))
            continue
        if line.startswith(".") or line.startswith("'"):
            m = re.match(r"^[.'](B|I|BR|IR|RB|RI|BI|IB|SM|SB|Nm|Ar|Fl|Cm|Em|Sy|Pa|Xr)\s+(.*)$", line)
            if m:
                arg = m.group(2).replace('"', "")
                if m.group(1) == "Fl":
                    arg = "-" + arg
                para.append(unroff(arg))
            else:
                flush()          # .PP .TP .IP .LP .SS .sp ... end a paragraph
            continue
        if line.strip():
            para.append(unroff(line))
        else:
            flush()
    flush()
    return secs


def man_docs(rng, max_per_page=12):
    seen_pages = set()
    for path in sorted(glob.glob("/usr/share/man/man[1-8]/*")):
        base = os.path.basename(path)
        name = re.sub(r"\.(gz|bz2|xz)$", "", base)
        page = name.rsplit(".", 1)[0]
        if page in seen_pages:
            continue
        # 16 000 of the man pages here are Google Cloud SDK subcommands: keep 1 in 25 of them
        if page.startswith("gcloud") and int(hashlib.sha256(page.encode()).hexdigest()[:8], 16) % 25:
            continue
        try:
            raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
        except (OSError, EOFError):
            continue
        text = raw.decode("utf-8", errors="replace")
        if text.lstrip().startswith(".so "):
            continue
        seen_pages.add(page)
        secs = man_sections(text)
        texts, qs = [], []
        name_line = " ".join(secs.get("NAME", []) + secs.get("ND", []))
        m = re.match(r"^(.*?)\s+-+\s+(.*)$", C.norm(name_line))
        if m:
            desc = m.group(2).strip()
            texts.append(desc)
            texts.append(f"{m.group(1)} - {desc}")
            d = desc[0].lower() + desc[1:] if desc else desc
            qs.append(rng.choice([f"how to {d}", f"linux command to {d}", f"{page} command",
                                  f"what does {page} do", f"command that can {d}",
                                  f"{page} man page", f"how do i {d}"]))
        for key in ("DESCRIPTION", "OPTIONS"):
            for p in secs.get(key, [])[:8]:
                texts.extend(sents(p, 2))
        yield "man", page, texts[:max_per_page]
        if qs:
            yield "queries", "man:" + page, qs


# ----------------------------------------------------------------------------------- docs, faq
RST_ROLE = re.compile(r":[a-z:+-]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")


def unrst(t):
    t = RST_ROLE.sub(r"\1", t)
    t = re.sub(r"``([^`]*)``", r"\1", t)
    t = re.sub(r"`([^`<]*?)(?:\s*<[^>]*>)?`_*", r"\1", t)
    t = re.sub(r"\*\*?([^*]+)\*\*?", r"\1", t)
    t = t.replace("|", "")
    return C.norm(t)


def rst_blocks(text):
    """(kind, text) for section titles and prose paragraphs of a .rst file (no code, no directives)."""
    lines = text.split("\n")
    i, para = 0, []
    out = []

    def flush():
        if para:
            out.append(("para", unrst(" ".join(para))))
        para.clear()

    while i < len(lines):
        ln = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if ln.strip() and re.fullmatch(r"([=\-~^\"'`#*+])\1{2,}", nxt.strip()) and len(nxt.strip()) >= len(ln.strip()) - 2:
            flush()
            out.append(("title", unrst(ln)))
            i += 2
            continue
        if re.fullmatch(r"([=\-~^\"'`#*+])\1{2,}", ln.strip()):
            i += 1
            continue
        if ln.startswith(" ") or ln.startswith("\t") or ln.startswith(".. ") or ln.startswith(">>>"):
            flush()
            i += 1
            continue
        if not ln.strip():
            flush()
        else:
            para.append(ln)
        i += 1
    flush()
    return out


def pydoc_docs(rng, root="/usr/share/doc/python3-doc/html/_sources"):
    for path in sorted(glob.glob(os.path.join(root, "**/*.rst.txt"), recursive=True)):
        rel = os.path.relpath(path, root)
        blocks = rst_blocks(open(path, encoding="utf-8", errors="replace").read())
        if rel.startswith("faq/"):
            # each question (a section title) with its first answer sentence is one document
            q = None
            for kind, t in blocks:
                if kind == "title":
                    q = t
                    if t.endswith("?"):
                        yield "faq", f"pyfaq:{rel}:{t}", [t]
                elif q and q.endswith("?"):
                    ss = sents(t, 2)
                    if ss:
                        yield "faq", f"pyfaq:{rel}:{q}", ss[:1]
                    q = q + " "  # only the first paragraph after a question
            continue
        texts = []
        for kind, t in blocks:
            if kind == "title":
                texts.append(t)
            else:
                texts.extend(sents(t, 3))
        # documents are files; long files are split into chunks of 40 texts (chunk = document)
        for c in range(0, len(texts), 40):
            yield "docs", f"pydoc:{rel}:{c // 40}", texts[c:c + 40]


def debian_faq_docs(rng, path="/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz"):
    text = gzip.open(path).read().decode("utf-8", errors="replace")
    body = text.split("\n")
    # the body repeats the numbered titles: "N.M. Question?" followed by the answer paragraphs
    cur, buf, seen = None, [], set()
    for ln in body + ["9999. end"]:
        m = re.match(r"^(\d+(?:\.\d+)+)\.\s+(.*)$", ln.strip())
        if m and not ln.startswith("    "):
            if cur and cur[0] not in seen and buf:
                seen.add(cur[0])
                paras = re.split(r"\n\s*\n", "\n".join(buf))
                ans = [p for p in paras if p.strip()]
                texts = [cur[1]] + (sents(ans[0], 2) if ans else [])
                yield "faq", "debfaq:" + cur[0], texts
            cur, buf = (m.group(1), C.norm(m.group(2))), []
        elif cur is not None:
            if cur[1] and not cur[1].endswith("?") and not buf and ln.strip() and not ln.startswith("   "):
                cur = (cur[0], cur[1] + " " + C.norm(ln))   # a title wrapped over two lines
            else:
                buf.append(ln)


FAQ_FILES = ["/usr/share/doc/procps/FAQ.gz", "/usr/share/doc/man-db/FAQ", "/usr/share/doc/zlib1g-dev/FAQ.gz",
             "/usr/share/doc/lsof/00FAQ.gz", "/usr/share/doc/base-files/FAQ", "/usr/share/doc/xz-utils/faq.txt.gz",
             "/usr/share/doc/sed/sedfaq.txt.gz", "/usr/share/doc/gnupg/FAQ", "/usr/share/doc/valgrind/FAQ.txt.gz",
             "/usr/share/doc/ncurses-base/FAQ"]


def faq_file_docs(rng):
    """Questions (a line ending in '?', numbering / 'Q:' stripped) and the first sentence after them,
    from plain-text FAQ files in /usr/share/doc and the perlfaq pods (perl-doc)."""
    paths = [p for p in FAQ_FILES if os.path.exists(p)]
    paths += sorted(glob.glob("/usr/share/perl/*/pod/perlfaq[1-9].pod"))
    for path in paths:
        raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
        lines = raw.decode("utf-8", errors="replace").split("\n")
        for i, ln in enumerate(lines):
            q = re.sub(r"^\s*(=head\d\s+|Q[.:]\s*|\d+(\.\d+)*[.)]?\s+|[0-9A-Z]\.\s+)", "", ln).strip()
            q = re.sub(r"[CIBFL]<+([^>]*)>+", r"\1", q)
            if not q.endswith("?") or not (3 <= len(q.split()) <= 30):
                continue
            key = f"faqfile:{os.path.basename(os.path.dirname(path))}/{os.path.basename(path)}:{i}"
            ans = []
            for ln2 in lines[i + 1:i + 12]:
                if ln2.strip().startswith("=") or ln2.strip().endswith("?"):
                    break
                if ln2.strip():
                    ans.append(ln2.strip())
                elif ans:
                    break
            a = re.sub(r"[CIBFL]<+([^>]*)>+", r"\1", " ".join(ans))
            yield "faq", key, [q] + sents(a, 1)


# ----------------------------------------------------------------------------------- pypi / npm
def pypi_docs(rng, per_list=150000):
    for fn, tag in (("pypi.tsv", "pypi"), ("npm.tsv", "npm")):
        path = os.path.join(PKG_LISTS, fn)
        if not os.path.exists(path):
            continue
        rows = []
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.readline().rstrip("\n").split("\t")
            si = [i for i, h in enumerate(head) if h.startswith("summary")][0]
            ni = head.index("name")
            for line in f:
                p = line.rstrip("\n").split("\t")
                if len(p) > si:
                    summ = re.sub(r"^\[tested here:[^\]]*\]\s*", "", p[si])
                    if len(summ.split()) >= 4:
                        rows.append((p[ni], summ))
        rng.shuffle(rows)
        for name, summ in rows[:per_list]:
            yield "pypi", f"{tag}:{name.lower()}", [html.unescape(summ)]


# ----------------------------------------------------------------------------------- queries
LEX_TEMPLATES = {   # WordNet lexicographer file number -> query templates
    26: ["symptoms of {w}", "what causes {w}", "{w} treatment", "is {w} contagious", "how to treat {w}"],
    15: ["where is {w}", "weather in {w}", "{w} population", "things to do in {w}", "how far is {w}"],
    18: ["who is {w}", "what does a {w} do", "how to become a {w}", "{w} salary", "{w} job description"],
    13: ["calories in {w}", "is {w} healthy", "how to cook {w}", "{w} recipe", "how long does {w} last"],
    5: ["what do {w} eat", "where do {w} live", "how long do {w} live", "{w} facts", "are {w} dangerous"],
    20: ["how to grow {w}", "when to plant {w}", "is {w} poisonous", "{w} care"],
    6: ["how much does a {w} cost", "how to use a {w}", "best {w} to buy", "{w} price", "how to fix a {w}"],
    27: ["what is {w} made of", "is {w} toxic", "{w} uses", "{w} chemical formula"],
    9: ["what is {w}", "{w} examples", "{w} definition psychology", "types of {w}"],
    4: ["how to {w}", "steps to {w}", "how long does it take to {w}"],
    11: ["when does {w} happen", "what is {w}", "{w} explained"],
    28: ["how long is a {w}", "what time is {w}", "when is {w}"],
    14: ["how to join {w}", "what is the {w}", "history of the {w}"],
    8: ["normal {w} level", "{w} function", "where is the {w} located", "{w} pain"],
}


def wordnet_query_docs(rng, root="/usr/share/wordnet"):
    for pos_name, pos in (("noun", "n"), ("verb", "v")):
        with open(os.path.join(root, "data." + pos_name), encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  ") or "|" not in line:
                    continue
                parts = line.split()
                lex = int(parts[1])
                lemma = re.sub(r"\(.*\)$", "", parts[4]).replace("_", " ")
                if pos == "v":
                    tpl = ["how to {w}", "how do you {w}", "ways to {w}", "why do people {w}",
                           "what does it mean to {w}", "can you {w}"]
                else:
                    tpl = LEX_TEMPLATES.get(lex)
                if not tpl or len(lemma) < 3:
                    continue
                w = lemma.lower() if not lemma[:1].isupper() else lemma
                yield "queries", re.sub(r"[^a-z0-9]+", " ", lemma.lower()).strip(), \
                    [t.format(w=w) for t in rng.sample(tpl, min(2, len(tpl)))]


# ----------------------------------------------------------------------------------- main
def split_of(domain, key, dev_pct, test_pct):
    # dict and WordNet queries share corpus.py's headword key (so a headword's queries and
    # definitions are in the same split as in the old corpus); other domains prefix the domain
    k = key if domain in ("dict", "queries") and ":" not in key else f"{domain}:{key}"
    # a query generated from a package / man page goes where its source document goes
    if domain == "queries" and key.startswith("pkg:"):
        k = "pkgdesc:" + key[4:]
    elif domain == "queries" and key.startswith("man:"):
        k = key
    if domain in SMALL_DOMAINS:
        dev_pct, test_pct = SMALL_DOMAINS[domain]
    return C.split_of(k, dev_pct, test_pct).replace("val", "dev")


# domains too small for 2 % to give a usable held-out set: (dev %, test %)
SMALL_DOMAINS = {"faq": (5.0, 25.0)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("TERN_WORK", os.path.join(os.path.dirname(__file__), "work")))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dev-pct", type=float, default=2.0)
    ap.add_argument("--test-pct", type=float, default=2.0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    gens = [("dict", dict_docs), ("literature", literature_docs), ("pkgdesc", pkg_docs),
            ("man", man_docs), ("docs", pydoc_docs), ("debfaq", debian_faq_docs), ("faqfiles", faq_file_docs),
            ("pypi", pypi_docs), ("wnqueries", wordnet_query_docs)]
    seen = set()
    files = {sp: open(os.path.join(args.out, f"corpus_{sp}.tsv"), "w", encoding="utf-8")
             for sp in ("train", "dev", "test")}
    stats = collections.defaultdict(lambda: collections.Counter())
    docs = collections.defaultdict(set)
    for gname, gen in gens:
        n0 = sum(sum(c.values()) for c in stats.values())
        for domain, key, texts in gen(rng):
            sp = split_of(domain, key, args.dev_pct, args.test_pct)
            for t in texts:
                t = C.norm(t.replace("\t", " "))
                if not C.ok(t, min_words=1 if len(t) >= 6 else 2):
                    continue
                lk = t.lower()
                if lk in seen:
                    continue
                seen.add(lk)
                files[sp].write(f"{domain}\t{key}\t{t}\n")
                stats[domain][sp] += 1
                docs[domain].add(key)
        n1 = sum(sum(c.values()) for c in stats.values())
        print(f"{gname}: {n1 - n0} texts", file=sys.stderr, flush=True)
    for f in files.values():
        f.close()
    out = {d: dict(stats[d], documents=len(docs[d]), total=sum(stats[d].values())) for d in sorted(stats)}
    out["_all"] = sum(v["total"] for v in out.values())
    with open(os.path.join(args.out, "corpus_stats.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
