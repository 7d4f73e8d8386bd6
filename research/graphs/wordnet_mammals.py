"""Triples of primates and ungulates from WordNet 3.0 (Debian `wordnet-base`), for `kgr kg import`.

The third graph of the repository (data/mammals/) is public knowledge that installs from Debian:
WordNet's noun database, /usr/share/wordnet/data.noun (licence: data/mammals/LICENSE). This script
reads it and writes a CSV of triples; `kgr kg import` turns that into kg.json:

    $ sudo apt-get install wordnet-base
    $ python research/graphs/wordnet_mammals.py data/mammals/triples.csv
    $ kgr kg import data/mammals/triples.csv --out data/mammals/kg.json --domain mammals

Entities: every animal synset under "primate" or "ungulate" (type ``animal``), and the taxa they
are members of, up to the kingdom (typed by rank: ``genus``, ``family``, ``order`` ...). Relations:
``is_a`` ("is a kind of": WordNet's hypernym pointer ``@`` between two of those animals) and
``member_of`` ("is a member of": the member holonym ``#m``, from an animal to its genus and from
each taxon to the next). Labels are the synset's first word; where two entities would share one,
each is told apart by its first parent ("pony (horse)"), and then by sense ("pony (horse, sense 2)").
"""

from __future__ import annotations

import csv
import sys
from collections import Counter, defaultdict
from pathlib import Path

DATA_NOUN = Path("/usr/share/wordnet/data.noun")
ROOTS = ("primate", "ungulate")
ANIMAL_FILE = "05"  # WordNet's lexicographer file noun.animal
RANKS = ("genus", "family", "order", "class", "phylum", "kingdom", "subclass", "superorder", "suborder",
         "subfamily", "superfamily", "infraorder", "subphylum", "superclass", "tribe", "subgenus")
RELATION_LABELS = {"is_a": "is a kind of", "member_of": "is a member of"}


def read_synsets(path: Path = DATA_NOUN) -> dict[str, tuple[str, list[str], list[tuple[str, str]]]]:
    """offset -> (lexicographer file, words, noun pointers (symbol, target offset)); format: wndb(5WN)."""
    synsets = {}
    for line in path.open(encoding="latin-1"):
        if line.startswith("  "):  # the licence header
            continue
        fields = line.partition(" | ")[0].split()
        offset, lexfile, n_words = fields[0], fields[1], int(fields[3], 16)
        words = [fields[4 + 2 * i] for i in range(n_words)]
        i = 4 + 2 * n_words
        pointers = []
        for _ in range(int(fields[i])):
            symbol, target, pos = fields[i + 1:i + 4]
            i += 4
            if pos == "n":
                pointers.append((symbol, target))
        synsets[offset] = (lexfile, words, pointers)
    return synsets


def triples(synsets) -> list[list[str]]:
    """The CSV rows (header first) of the primates-and-ungulates graph."""
    def word(o: str) -> str:
        return synsets[o][1][0]

    def up(o: str, symbol: str) -> list[str]:
        return [t for s, t in synsets[o][2] if s == symbol]

    def ancestors(o: str) -> set[str]:
        seen, todo = set(), [o]
        while todo:
            for t in up(todo.pop(), "@") + up(o, "@i"):
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        return seen

    def rank(o: str) -> str | None:
        for a in [o, *sorted(ancestors(o))]:
            name = word(a)
            for r in RANKS:
                if name == r or name.endswith("_" + r):
                    return r
        return None

    by_word = defaultdict(list)
    for o in synsets:
        by_word[word(o)].append(o)
    taxon_root = by_word["taxonomic_group"][0]
    animals: set[str] = set()
    for name in ROOTS:
        candidates = [o for o in by_word[name] if synsets[o][0] == ANIMAL_FILE]
        root = max(candidates, key=lambda r: sum(r in ancestors(o) for o in synsets if synsets[o][0] == ANIMAL_FILE))
        animals |= {o for o in synsets if synsets[o][0] == ANIMAL_FILE and root in ancestors(o)
                    and taxon_root not in ancestors(o)} | {root}
    edges, taxa = set(), set()
    for a in animals:
        edges |= {(a, "is_a", t) for t in up(a, "@") if t in animals}
        for t in up(a, "#m"):
            if rank(t):
                taxa.add(t)
                edges.add((a, "member_of", t))
    todo = list(taxa)
    while todo:
        taxon = todo.pop()
        for u in up(taxon, "#m"):
            if rank(u):
                edges.add((taxon, "member_of", u))
                if u not in taxa:
                    taxa.add(u)
                    todo.append(u)
    entities = sorted(animals | taxa)
    first_parent = {a: b for a, _, b in sorted(edges, key=lambda e: (e[0], e[1] != "is_a", e[2]))[::-1]}
    label = {o: word(o).replace("_", " ") for o in entities}
    clash = Counter(v.casefold() for v in label.values())
    label = {o: (f"{v} ({word(first_parent[o]).replace('_', ' ')})" if clash[v.casefold()] > 1 else v)
             for o, v in label.items()}
    # the few still alike (two senses under one parent) are numbered in WordNet's order
    alike = defaultdict(list)
    for o in entities:
        alike[label[o].casefold()].append(o)
    for group in (g for g in alike.values() if len(g) > 1):
        for n, o in enumerate(group, start=1):
            label[o] = f"{label[o][:-1]}, sense {n})"
    ids = Counter(word(o).casefold() for o in entities)
    ident = {o: word(o) if ids[word(o).casefold()] == 1 else f"{word(o)}_{o}" for o in entities}
    kind = {o: (rank(o) if o in taxa else "animal") for o in entities}
    rows = [["head", "relation", "tail", "head_label", "tail_label", "head_type", "tail_type", "relation_label"]]
    for a, rel, b in sorted(edges, key=lambda e: (ident[e[0]], e[1], ident[e[2]])):
        rows.append([ident[a], rel, ident[b], label[a], label[b], kind[a], kind[b], RELATION_LABELS[rel]])
    return rows


def main(out: str) -> None:
    rows = triples(read_synsets())
    with open(out, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    print(f"wrote {len(rows) - 1} triples to {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "data/mammals/triples.csv")
