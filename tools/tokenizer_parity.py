#!/usr/bin/env python3
"""Write the tokenizer parity fixture: varied strings and the ids HF `tokenizers` gives them.

The reference pipeline is BERT uncased WordPiece on models/vocab.txt, built from HF's parts
(BertNormalizer(lowercase=True) + BertPreTokenizer + WordPiece(max_input_chars_per_word=100) +
BertProcessing, truncation to 128 ids). It is `BertWordPieceTokenizer` minus the added-token
matching: ternflow treats "[PAD]" in input text as ordinary text, so the special tokens are not
registered as added tokens here.

Usage: [SEED=n] python3 tools/tokenizer_parity.py [OUT.jsonl]
(default crates/engine/tests/data/tokenizer_parity.jsonl, checked by
`cargo test -p ternflow-engine --test tokenizer_parity`; any other output, e.g. with another SEED,
by `cargo run --release -p ternflow-engine --example tokenizer_check -- OUT.jsonl`).
"""
import json
import os
import random
import sys

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

VOCAB = "models/vocab.txt"
OUT = sys.argv[1] if len(sys.argv) > 1 else "crates/engine/tests/data/tokenizer_parity.jsonl"
MAX_IDS = 128


def reference():
    t = Tokenizer(models.WordPiece.from_file(VOCAB, unk_token="[UNK]", max_input_chars_per_word=100))
    t.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    )
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    t.post_processor = processors.BertProcessing(("[SEP]", 102), ("[CLS]", 101))
    t.enable_truncation(MAX_IDS)
    return t


rng = random.Random(int(os.environ.get("SEED", "20261129")))
words = [w for w in open(VOCAB, encoding="utf-8").read().split("\n") if w.isalpha()]


def rand_chars(ranges, n):
    out = []
    for _ in range(n):
        lo, hi = rng.choice(ranges)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def random_unicode(n):
    out = []
    while len(out) < n:
        plane = rng.random()
        if plane < 0.5:
            cp = rng.randint(0x80, 0xFFFF)
        elif plane < 0.8:
            cp = rng.randint(0x10000, 0x3FFFF)
        else:
            cp = rng.randint(0, 0x10FFFF)
        if 0xD800 <= cp <= 0xDFFF:
            continue
        out.append(chr(cp))
    return "".join(out)


SCRIPTS = [
    (0x0400, 0x04FF),  # Cyrillic
    (0x0370, 0x03FF),  # Greek
    (0x0600, 0x06FF),  # Arabic
    (0x0590, 0x05FF),  # Hebrew
    (0x0900, 0x097F),  # Devanagari
    (0x0E00, 0x0E7F),  # Thai
    (0x3040, 0x30FF),  # kana
    (0xAC00, 0xD7A3),  # Hangul (decomposes under NFD)
    (0x4E00, 0x9FFF),  # CJK
    (0x3400, 0x4DBF),  # CJK ext A
    (0x20000, 0x2A6DF),  # CJK ext B
    (0xF900, 0xFAFF),  # CJK compatibility (decomposes)
    (0x00C0, 0x024F),  # Latin with accents
    (0x1E00, 0x1EFF),  # Latin extended additional
    (0xFF00, 0xFFEF),  # full width
    (0x1F300, 0x1FAFF),  # emoji
    (0x2000, 0x206F),  # general punctuation, spaces, format chars
    (0x0300, 0x036F),  # combining marks
]
CONTROLS = "\x00\x01\x07\t\n\r\x0b\x0c\x1c\x1f\x7f\x85\xa0\xad\u200b\u200d\u2028\u202e\u3000\ufeff\ufffd"
PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~¡¿«»“”‘’—–…·、。！？《》【】§¶†‡•"
ACCENTED = "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿÀÁÂÃÄÅÇÈÉÊËÌÍÎÏÑÒÓÔÕÖØÙÚÛÜÝßřžšćłőűİıǅǄǆ"
SPECIAL_CASES = [
    "", " ", "\t\n", "[PAD]", "[CLS] hello [SEP]", "[UNK][MASK]", "##ing", "# # ing",
    "İstanbul", "ß STRASSE", "ﬁne ﬂow", "Ω Ω Å Å K K", "e\u0301le\u0300ve", "n\u0303",
    "ǅemal", "Ａｂｃ　ＤＥＦ", "a\u00adb", "a\u200bb", "x\u0000y", "\ufffd\ufffd", "😀👍🏽👨‍👩‍👧",
    "don't", "U.S.A.", "e-mail", "3.14159", "$100,000.00", "C++/C#", "http://example.com/a?b=c",
    "a" * 99, "a" * 100, "a" * 101, "é" * 100, "é" * 101, "x" * 300,
    "unaffable", "UNAFFABLE", "Héllo, WORLD!", "東京タワー", "北京欢迎你", "한국어 텍스트",
    "Привет, мир!", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก",
]


def gen():
    texts = list(SPECIAL_CASES)
    try:
        lines = [l.strip() for l in open("train/work/val.txt", encoding="utf-8") if l.strip()]
    except OSError:
        lines = []
    texts += rng.sample(lines, min(500, len(lines)))
    for _ in range(300):  # sentences of vocabulary words with noise
        ws = [rng.choice(words) for _ in range(rng.randint(1, 20))]
        if rng.random() < 0.5:
            ws = [w.capitalize() if rng.random() < 0.3 else w.upper() if rng.random() < 0.1 else w for w in ws]
        sep = rng.choice([" ", "  ", " , ", "-", "_", "", "\t", "\n"])
        texts.append(sep.join(ws) + rng.choice(["", ".", "?", "!", "...", " :)"]))
    for _ in range(250):  # accents and combining marks
        texts.append(" ".join(
            "".join(rng.choice(ACCENTED + "abcdefghijklmnop") for _ in range(rng.randint(1, 10)))
            + (chr(rng.randint(0x300, 0x36F)) if rng.random() < 0.3 else "")
            for _ in range(rng.randint(1, 8))))
    for _ in range(300):  # mixed scripts
        parts = [rand_chars([rng.choice(SCRIPTS)], rng.randint(1, 12)) for _ in range(rng.randint(1, 6))]
        if rng.random() < 0.5:
            parts.append(rng.choice(words))
        texts.append(rng.choice([" ", "", ",", " - "]).join(parts))
    for _ in range(200):  # controls and odd whitespace
        s = list(rng.choice(lines) if lines else "some text here")
        for _ in range(rng.randint(1, 6)):
            s.insert(rng.randint(0, len(s)), rng.choice(CONTROLS))
        texts.append("".join(s))
    for _ in range(200):  # punctuation runs
        texts.append("".join(
            rng.choice(PUNCT) * rng.randint(1, 4) if rng.random() < 0.5 else rng.choice(words)
            for _ in range(rng.randint(1, 12))))
    for _ in range(250):  # random unicode
        texts.append(random_unicode(rng.randint(1, 40)))
    for _ in range(60):  # long words, around the 100-char limit
        n = rng.choice([98, 99, 100, 101, 102, 150, rng.randint(20, 400)])
        texts.append(rng.choice(["", "pre ", "ünïcödé "]) + "".join(
            rng.choice("abcdefghijklmnopqrstuvwxyzé") for _ in range(n)) + rng.choice(["", " post", "!"]))
    for _ in range(60):  # long texts: truncation at 128 ids keeps [SEP]
        n = rng.randint(100, 400)
        texts.append(" ".join(rng.choice(words) for _ in range(n)))
    for _ in range(60):  # long inputs of vocab words glued (deep WordPiece splits)
        texts.append("".join(rng.choice(words) for _ in range(rng.randint(2, 6))))
    return texts


def main():
    tok = reference()
    texts = gen()
    with open(OUT, "w", encoding="utf-8") as f:
        for t in texts:
            ids = tok.encode(t).ids
            assert len(ids) <= MAX_IDS and ids[0] == 101 and ids[-1] == 102, (t, ids)
            f.write(json.dumps({"text": t, "ids": ids}, ensure_ascii=False) + "\n")
    print(f"{len(texts)} strings -> {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
