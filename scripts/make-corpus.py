#!/usr/bin/env python3
# Builds the demo corpus, www/demo/corpus.txt: 3 000 prose sentences of the Python 3.11
# documentation as Debian's python3-doc ships it (/usr/share/doc/python3-doc/html/_sources):
# the tutorial, the FAQ, the HOWTOs, the glossary and some library pages. reST markup is
# stripped, code blocks, directives and indented blocks are skipped, sentences of 6-40 words
# that are mostly letters are kept once each. Source and licence: www/demo/CORPUS.md.
# Usage: python3 scripts/make-corpus.py [OUT]   (apt-get install python3-doc first)
import re, glob, hashlib, sys
BASE = "/usr/share/doc/python3-doc/html/_sources/"
dirs = ["tutorial", "faq", "howto", "glossary.rst.txt", "library/functions.rst.txt",
        "library/stdtypes.rst.txt", "library/os.rst.txt", "library/pathlib.rst.txt",
        "library/json.rst.txt", "library/re.rst.txt", "library/datetime.rst.txt",
        "library/asyncio-task.rst.txt", "library/collections.rst.txt", "library/itertools.rst.txt",
        "library/subprocess.rst.txt", "library/logging.rst.txt", "library/unittest.rst.txt",
        "library/sqlite3.rst.txt", "library/threading.rst.txt", "library/socket.rst.txt",
        "library/csv.rst.txt", "library/random.rst.txt", "library/string.rst.txt"]
files = []
for d in dirs:
    p = BASE + d
    files += sorted(glob.glob(p + "/*.rst.txt")) if not p.endswith(".txt") else [p]
def clean(s):
    s = re.sub(r":[a-z:]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`", r"\1", s)
    s = re.sub(r"`([^`<]+?)\s*<[^>]*>`_+", r"\1", s)
    s = re.sub(r"``([^`]+)``", r"\1", s)
    s = re.sub(r"`([^`]+)`_*", r"\1", s)
    s = re.sub(r"\*\*?([^*]+)\*\*?", r"\1", s)
    s = re.sub(r"\|[^|]+\|", "", s)
    s = re.sub(r"\[#\]_|\[\d+\]_", "", s)
    return re.sub(r"\s+", " ", s).strip()
out, seen = [], set()
for f in files:
    lines = open(f, encoding="utf-8").read().split("\n")
    para, in_code, code_indent = [], False, 0
    paras = []
    for ln in lines + [""]:
        stripped = ln.strip()
        indent = len(ln) - len(ln.lstrip())
        if in_code:
            if stripped == "" or indent > code_indent:
                continue
            in_code = False
        if stripped.startswith("..") or stripped.startswith(">>>") or re.fullmatch(r"[=\-~^*#+`:.'\"]{3,}", stripped or "x"):
            if para: paras.append(" ".join(para)); para = []
            if stripped.startswith(".."):
                in_code, code_indent = True, indent
            continue
        if stripped == "":
            if para: paras.append(" ".join(para)); para = []
            continue
        if indent > 0 and not para:
            continue  # indented blocks: code, option lists, quotes
        para.append(stripped)
        if stripped.endswith("::"):
            paras.append(" ".join(para)); para = []
            in_code, code_indent = True, indent
    for p in paras:
        p = clean(p)
        for s in re.split(r"(?<=[.?!])\s+(?=[A-Z])", p):
            s = s.strip().rstrip(":")
            w = s.split()
            if not (6 <= len(w) <= 40): continue
            if not s[0].isupper() or s[-1] not in ".?!": continue
            if sum(c.isalpha() or c == " " for c in s) / len(s) < 0.85: continue
            if any(t in s for t in ("http", "::", ">>>", "  ", "\\", "{", "}", "=")): continue
            k = s.lower()
            if k in seen: continue
            seen.add(k); out.append(s)
print(len(out), "sentences from", len(files), "files")
# A spread over every file: the 3 000 with the smallest SHA-256, kept in document order.
keep = set(sorted(out, key=lambda s: hashlib.sha256(s.encode()).hexdigest())[:3000])
out = [s for s in out if s in keep]
open(sys.argv[1] if len(sys.argv) > 1 else "www/demo/corpus.txt", "w").write("\n".join(out) + "\n")
