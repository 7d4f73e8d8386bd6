"""Graphs written the way users bring them, for the tests of ``kgr data`` and ``kgr kg check``:
small, deterministic (a seeded ``random.Random`` over fixed word lists) and unlike the shipped
graphs, which were curated for the product.

- :func:`merge_heavy_graph`: medicine, where branches meet everywhere: the drugs of a class share
  their side effects and the causes of a family a complication, so a walk that holds two of them
  finds one successor twice; relief edges close cycles (drug -> side effect -> drug).
- :func:`cyclic_graph`: troubleshooting, where symptoms lead to symptoms in rings (A leads to B
  leads to C leads to A) with branches off them, causes that share a fix, and fixes that bring
  symptoms of their own.
- :func:`shallow_graph`: a supply chain of five layers: no chain is longer than 4 hops, so the
  paper's 1-3 / 4-5 hop lengths do not fit it and 1-2 / 3-4 do.

>>> g = merge_heavy_graph()
>>> len(g["entities"]), len(g["edges"]), sorted({e["type"] for e in g["entities"]})[:3]
(132, 388, ['cause', 'condition', 'drug'])
>>> merge_heavy_graph() == g   # deterministic
True
"""

from __future__ import annotations

import itertools
import random
from typing import Sequence

_SYLLABLES = ("lo", "ra", "zin", "me", "ta", "prol", "vi", "dex", "ca", "nol", "su", "fen", "bu", "tor", "xa", "mid")


def _names(rng: random.Random, words: Sequence[Sequence[str]], n: int) -> list[str]:
    """``n`` distinct labels, each one word from every list in ``words`` joined by spaces."""
    combos = [" ".join(c) for c in itertools.product(*words)]
    rng.shuffle(combos)
    if len(combos) < n:
        raise ValueError(f"only {len(combos)} labels for {n} entities")
    return combos[:n]


def _drug_names(rng: random.Random, n: int) -> list[str]:
    combos = ["".join(c) for c in itertools.product(_SYLLABLES, _SYLLABLES, ("ine", "ol", "ide", "ex"))]
    rng.shuffle(combos)
    return combos[:n]


class _Builder:
    """Entities by type and edges without repeats (a graph file lists an edge once)."""

    def __init__(self, domain: str, seed: int):
        self.rng = random.Random(f"{domain}:{seed}")
        self.domain = domain
        self.entities: list[dict] = []
        self.by_type: dict[str, list[str]] = {}
        self.relations: list[dict] = []
        self.edges: list[dict] = []
        self._seen: set[tuple[str, str, str]] = set()

    def add_type(self, type_: str, labels: list[str]) -> list[str]:
        ids = [f"{type_}_{i:03d}" for i in range(len(labels))]
        self.entities += [{"id": i, "label": label, "type": type_} for i, label in zip(ids, labels)]
        self.by_type[type_] = ids
        return ids

    def relation(self, rel: str, label: str) -> str:
        self.relations.append({"id": rel, "label": label})
        return rel

    def edge(self, src: str, rel: str, dst: str) -> None:
        if src != dst and (src, rel, dst) not in self._seen:
            self._seen.add((src, rel, dst))
            self.edges.append({"src": src, "rel": rel, "dst": dst})

    def fan(self, srcs: Sequence[str], rel: str, dsts: Sequence[str], sizes: Sequence[int],
            pool: int | None = None) -> None:
        """Every source gets a successor count drawn from ``sizes``, taken from the first ``pool``
        targets (a small pool: many sources share a successor, a merge)."""
        targets = list(dsts[:pool] if pool else dsts)
        for src in srcs:
            for dst in self.rng.sample(targets, min(self.rng.choice(sizes), len(targets))):
                self.edge(src, rel, dst)

    def graph(self) -> dict:
        return {"version": "1.0", "domain": self.domain, "entities": self.entities,
                "relations": self.relations, "edges": self.edges}


def _families(ids: Sequence[str], size: int) -> list[list[str]]:
    """``ids`` in consecutive groups of ``size``: entities that share successors (a drug class)."""
    return [list(ids[i:i + size]) for i in range(0, len(ids), size)]


def merge_heavy_graph(seed: int = 0) -> dict:
    """Medicine, 132 entities of 6 types, 388 edges over 9 relations. Drugs come in classes that share their
    side effects, causes in families that share a complication, and a condition is treated by two
    drugs of one class and caused by two causes of one family: a walk that holds both finds
    their shared successor twice (a merge). Side effects are relieved by drugs, and complications
    are conditions: cycles."""
    b = _Builder("medicine", seed)
    rng = b.rng
    drugs = b.add_type("drug", _drug_names(rng, 40))
    conditions = b.add_type("condition", _names(rng, [("acute", "chronic", "mild", "severe", "recurrent", "early"),
                                                       ("gastritis", "migraine", "asthma", "anaemia", "arthritis",
                                                        "bronchitis", "dermatitis", "hepatitis", "nephritis")], 30))
    symptoms = b.add_type("symptom", _names(rng, [("sharp", "dull", "persistent", "sudden", "night"),
                                                  ("headache", "rash", "nausea", "cough", "fatigue", "dizziness",
                                                   "fever", "cramps")], 20))
    causes = b.add_type("cause", _names(rng, [("viral", "bacterial", "genetic", "dietary", "stress"),
                                              ("infection", "deficiency", "exposure", "imbalance", "injury")], 15))
    organs = b.add_type("organ", ["liver", "kidney", "lung", "heart", "stomach", "skin", "brain", "blood",
                                  "joints", "bowel", "pancreas", "thyroid", "spleen", "bladder", "eyes"])
    tests = b.add_type("test", _names(rng, [("blood", "urine", "skin", "breath", "stool", "tissue", "saliva"),
                                            ("panel", "culture", "screen", "assay")], 12))
    treated_by = b.relation("treated_by", "is treated by")
    side = b.relation("has_side_effect", "has the side effect")
    symptom_of = b.relation("symptom_of", "is a symptom of")
    caused_by = b.relation("caused_by", "is caused by")
    complication = b.relation("complicates_into", "can complicate into")
    affects = b.relation("affects", "affects")
    diagnosed_by = b.relation("diagnosed_by", "is diagnosed by")
    relieved_by = b.relation("relieved_by", "is relieved by")
    interacts = b.relation("interacts_with", "interacts with")
    classes, families = _families(drugs, 4), _families(causes, 3)
    class_effects = {i: rng.sample(symptoms, rng.choice((1, 2))) for i in range(len(classes))}
    family_complication = {i: rng.choice(conditions) for i in range(len(families))}
    for i, members in enumerate(classes):
        for drug in members:
            for effect in class_effects[i]:  # a class shares its side effects: the merge
                b.edge(drug, side, effect)
            for other in rng.sample(classes[(i + 1) % len(classes)], 2):  # two of the next class
                b.edge(drug, interacts, other)
    for i, members in enumerate(families):
        for cause in members:
            b.edge(cause, complication, family_complication[i])  # a family shares its complication
    for condition in conditions:
        for drug in rng.sample(rng.choice(classes), 2):  # two drugs of one class
            b.edge(condition, treated_by, drug)
        for cause in rng.sample(rng.choice(families), rng.choice((1, 2, 2))):
            b.edge(condition, caused_by, cause)
        b.edge(condition, affects, rng.choice(organs))
        b.edge(condition, diagnosed_by, rng.choice(tests))
    b.fan(symptoms, symptom_of, conditions, (1, 2))
    for symptom in symptoms:  # drug -> side effect -> drug: cycles
        for drug in rng.sample(rng.choice(classes), 2):
            b.edge(symptom, relieved_by, drug)
    return b.graph()


def cyclic_graph(seed: int = 0, scale: float = 1.0) -> dict:
    """Troubleshooting, 193 entities and 664 edges over 6 relations (``scale`` times as many symptoms,
    causes, fixes and diagnostics): symptoms in rings of 3-5 (each leads to the next, the last to the first) with a
    branch off every ring; causes in families that share a fix, fixes that bring symptoms of
    their own (fix -> symptom -> cause -> fix)."""
    b = _Builder("troubleshooting", seed)
    rng = b.rng
    symptoms = b.add_type("symptom", _names(rng, [("slow", "failing", "stuck", "flaky", "missing", "broken", "noisy"),
                                                  ("login", "backup", "build", "deploy", "cache", "queue", "upload",
                                                   "search", "report", "sync")], round(60 * scale)))
    causes = b.add_type("cause", _names(rng, [("expired", "leaked", "corrupt", "stale", "misconfigured", "exhausted"),
                                              ("token", "index", "quota", "certificate", "pool", "lock", "replica",
                                               "config")], round(45 * scale)))
    fixes = b.add_type("fix", _names(rng, [("rotate", "rebuild", "raise", "renew", "restart", "purge", "pin"),
                                           ("the token", "the index", "the quota", "the certificate", "the pool",
                                            "the lock", "the replica")], round(30 * scale)))
    checks = b.add_type("diagnostic", _names(rng, [("inspect", "trace", "measure", "compare"),
                                                   ("logs", "latency", "metrics", "headers", "traffic", "disk",
                                                    "memory", "threads")], round(30 * scale)))
    tools = b.add_type("tool", ["strace", "tcpdump", "htop", "iostat", "curl", "dig", "openssl", "jq", "lsof",
                                "netstat", "perf", "gdb", "vmstat", "sar", "ss", "nmap", "mtr", "iperf", "ethtool",
                                "journalctl", "dmesg", "pidstat", "nicstat", "tshark", "ngrep", "socat", "ab", "wrk"])
    leads_to = b.relation("leads_to", "leads to")
    caused_by = b.relation("caused_by", "is caused by")
    fixed_by = b.relation("fixed_by", "is fixed by")
    diagnosed_by = b.relation("diagnosed_by", "is diagnosed by")
    uses_tool = b.relation("uses_tool", "uses tool")
    side = b.relation("may_cause", "may cause")
    order = list(symptoms)
    i = 0
    while i < len(order):  # rings of 3-5 symptoms: A leads to B leads to C leads to A
        ring = order[i:i + rng.choice((3, 4, 5))]
        for a, c in zip(ring, ring[1:] + ring[:1]):
            if len(ring) > 1:
                b.edge(a, leads_to, c)
        b.edge(ring[0], leads_to, rng.choice(order))  # and a branch off the ring
        i += len(ring)
    families = _families(causes, 3)
    family_fix = {i: rng.choice(fixes) for i in range(len(families))}
    for i, members in enumerate(families):
        for cause in members:
            b.edge(cause, fixed_by, family_fix[i])  # a family of causes shares its fix: a merge
            b.edge(cause, leads_to, rng.choice(symptoms))
    for symptom in symptoms:
        family = rng.choice(families)
        for cause in rng.sample(family, min(len(family), rng.choice((2, 3)))):
            b.edge(symptom, caused_by, cause)
    b.fan(symptoms, diagnosed_by, checks, (2, 3))
    b.fan(checks, uses_tool, tools, (2, 3))
    b.fan(fixes, uses_tool, tools, (2, 3))
    b.fan(fixes, side, symptoms, (1, 2))  # a fix with symptoms of its own
    return b.graph()


def shallow_graph(seed: int = 0) -> dict:
    """A supply chain in five layers (material -> part -> product -> retailer -> region), two or
    three relations between neighbouring layers and none across them: the longest chain has 4 hops."""
    b = _Builder("supply chain", seed)
    rng = b.rng
    layers = [
        b.add_type("material", _names(rng, [("recycled", "raw", "refined", "coated", "woven"),
                                            ("steel", "cotton", "glass", "resin", "copper", "rubber", "bamboo")], 30)),
        b.add_type("part", _names(rng, [("small", "large", "flexible", "rigid", "sealed"),
                                        ("hinge", "panel", "gasket", "spring", "frame", "lens", "strap", "valve")], 36)),
        b.add_type("product", _names(rng, [("compact", "deluxe", "travel", "outdoor", "kids"),
                                           ("lamp", "chair", "kettle", "backpack", "speaker", "bicycle", "tent",
                                            "camera")], 36)),
        b.add_type("retailer", _names(rng, [("north", "south", "east", "west", "central"),
                                            ("outlet", "market", "depot", "store", "bazaar")], 24)),
        b.add_type("region", ["alpine", "coastal", "desert", "delta", "highland", "island", "lakeside", "metro",
                              "plains", "prairie", "steppe", "tundra", "valley", "woodland", "harbour", "canyon"]),
    ]
    relations = [
        [b.relation("used_in", "is used in"), b.relation("coats", "coats")],
        [b.relation("part_of", "is part of"), b.relation("spare_for", "is a spare for"),
         b.relation("tested_in", "is tested in")],
        [b.relation("sold_by", "is sold by"), b.relation("repaired_by", "is repaired by")],
        [b.relation("operates_in", "operates in"), b.relation("ships_to", "ships to"),
         b.relation("sources_from", "sources from")],
    ]
    for (srcs, dsts), rels in zip(zip(layers, layers[1:]), relations):
        for rel in rels:
            b.fan(srcs, rel, dsts, (0, 1, 1, 2))
    return b.graph()
