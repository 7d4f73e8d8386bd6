"""From what a file states to a kg.json the loader accepts: one entity per key, ids made, and
every clash named by the places (rows, nodes, triples) that cause it.

Each reader (``table.py``, ``rdf.py``, ``graphml.py``) fills a :class:`Draft` with what its file
says, each statement with the place it came from ("row 12", "node 'n3'", "ex:Aspirin");
:func:`assemble` merges it, makes ids and validates the result with the loader itself
(library/graph/kg.py), so an import writes only what ``kgr data`` accepts.

>>> d = Draft("drugs.csv", "CSV", type_hint="head_type and tail_type columns")
>>> for row in (2, 3):
...     d.entity("aspirin", f"row {row}", type="drug")
...     d.entity("head ache", f"row {row}", type="symptom")
...     d.relation("treats", f"row {row}")
...     d.link("aspirin", "treats", "head ache", f"row {row}")
>>> imported = assemble(d)
>>> imported.kg["entities"]
[{'id': 'Aspirin', 'label': 'aspirin', 'type': 'drug'}, {'id': 'HeadAche', 'label': 'head ache', 'type': 'symptom'}]
>>> imported.kg["edges"], imported.skipped
([{'src': 'Aspirin', 'rel': 'treats', 'dst': 'HeadAche'}], {'duplicate edge (kept once)': ['row 3']})

Two entities whose labels differ only in case are refused, naming where each comes from:

>>> d.entity("Aspirin", "row 4", type="drug")
>>> assemble(d)
Traceback (most recent call last):
...
library.errors.DataFileError: drugs.csv: rows 2 and 4 give 'aspirin' and 'Aspirin' two ids: Aspirin, Aspirin_2; \
labels must differ by more than case, spacing or Unicode form (one entity: give it one name; two: tell their labels apart)
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from library.errors import DataFileError
from library.graph.kg import MAX_LABEL_CHARS, KnowledgeGraph, label_key, normalise_label

#: What a skipped statement is, as the summary names it (see docs/KG.md "Importing triples").
DUPLICATE_EDGE = "duplicate edge (kept once)"
SELF_LOOP = "self-loop (a question never walks back to the entity it stands on)"

# Room left for a "_2" suffix under the loader's id limit.
_ID_ROOM = MAX_LABEL_CHARS - 10


def is_plain_id(text: str) -> bool:
    """Whether a source's own id can be kept as written: letters, digits, ``_ . -``.

    >>> is_plain_id("Q42"), is_plain_id("has_ingredient"), is_plain_id("olive oil")
    (True, True, False)
    """
    return 0 < len(text) <= _ID_ROOM and re.fullmatch(r"[\w.\-]+", text) is not None


def entity_id(text: str) -> str:
    """An entity id made from a name, in the shipped graphs' style (CamelCase words).

    >>> entity_id("olive oil"), entity_id("TLS handshake error"), entity_id("crème brûlée"), entity_id("+++")
    ('OliveOil', 'TLSHandshakeError', 'CrèmeBrûlée', 'entity')
    """
    words = re.findall(r"\w+", unicodedata.normalize("NFC", text))
    return "".join(w[0].upper() + w[1:] for w in words)[:_ID_ROOM] or "entity"


def relation_id(text: str) -> str:
    """A relation id made from a name, in the shipped graphs' style (snake_case).

    >>> relation_id("is caused by"), relation_id("Made-From")
    ('is_caused_by', 'made_from')
    """
    words = re.findall(r"\w+", unicodedata.normalize("NFC", text))
    return "_".join(w.lower() for w in words)[:_ID_ROOM] or "relation"


def humanize(name: str) -> str:
    """A relation label read off an id: words split at ``_``, ``-`` and inner capitals.

    >>> humanize("has_ingredient"), humanize("causedBy"), humanize("usesHTTPServer"), humanize("is caused by")
    ('has ingredient', 'caused by', 'uses HTTP server', 'is caused by')
    """
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", " ", name)
    words = [w for w in re.split(r"[\s_\-]+", spaced) if w]
    return " ".join(w if len(w) > 1 and w.isupper() else w.lower() for w in words)


def describe(places: list[str], most: int = 3) -> str:
    """Places for a message, like ones grouped ("rows 3 and 9"), the rest counted.

    >>> describe(["row 3", "row 9"]), describe(["node 'a'"]), describe(["ex:a", "ex:b", "ex:c", "ex:d"])
    ('rows 3 and 9', "node 'a'", 'ex:a, ex:b, ex:c and 1 more')
    """
    places = list(dict.fromkeys(places))
    kinds = {p.split(" ", 1)[0] for p in places}
    prefix = ""
    if len(places) > 1 and len(kinds) == 1 and kinds <= {"row", "node", "edge"}:
        prefix, places = f"{kinds.pop()}s ", [p.split(" ", 1)[1] for p in places]
    shown, more = places[:most], len(places) - most
    if more > 0:
        return prefix + ", ".join(shown) + f" and {more} more"
    return prefix + (", ".join(shown[:-1]) + " and " + shown[-1] if len(shown) > 1 else shown[0])


def _count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun for it.

    >>> _count(1, "relation"), _count(2, "entity", "entities")
    ('1 relation', '2 entities')
    """
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def _line(places: list[str]) -> int | None:
    """The file line of a single row (rows are lines: row 1 is a table's header), else None."""
    rows = {p for p in places if p.startswith("row ")}
    return int(rows.pop()[4:]) if len(rows) == 1 and len(set(places)) == 1 else None


@dataclass
class _Thing:
    """One entity or relation as the file states it, merged over every place that names it."""

    key: str
    places: list[str] = field(default_factory=list)
    label: tuple[str, str] | None = None  # (label, where it was first given)
    type: tuple[str, str] | None = None
    ident: str | None = None  # the id the source itself gives, when it has one apart from the label


@dataclass
class Imported:
    """A validated kg.json built from a file, and what was left out of it and why."""

    source: str
    format: str
    kg: dict
    skipped: dict[str, list[str]]
    notes: list[str]

    def summary(self) -> list[str]:
        """Lines for the command line: size, types, relations, what was skipped and renamed."""
        kg = self.kg
        types = Counter(e["type"] for e in kg["entities"])
        rels = Counter(e["rel"] for e in kg["edges"])
        counts = [_count(len(kg["entities"]), "entity", "entities"), _count(len(kg["edges"]), "edge"),
                  _count(len(kg["relations"]), "relation"), _count(len(types), "type")]
        lines = [f"{self.source} ({self.format}): {', '.join(counts)}",
                 "types: " + ", ".join(f"{t} {n}" for t, n in sorted(types.items(), key=lambda tn: (-tn[1], tn[0]))),
                 "relations: " + ", ".join(f"{r} {rels[r]}" for r in (x["id"] for x in kg["relations"]))]
        lines += [f"skipped {what}: {len(places)} ({describe(places)})" for what, places in self.skipped.items()]
        return lines + self.notes


class Draft:
    """What one file states, in its order: entities, relations and links between them, each
    with the place it came from, plus what the reader skipped and notes for the summary."""

    def __init__(self, source: str | Path, format: str, type_hint: str):
        self.source, self.format, self.type_hint = str(source), format, type_hint
        self.entities: dict[str, _Thing] = {}
        self.relations: dict[str, _Thing] = {}
        self.links: list[tuple[str, str, str, str]] = []
        self.skipped: dict[str, list[str]] = {}
        self.notes: list[str] = []

    def _merge(self, table: dict[str, _Thing], what: str, key: str, place: str,
               label: str | None, type: str | None, ident: str | None) -> None:
        thing = table.setdefault(key, _Thing(key))
        if place not in thing.places[-1:]:
            thing.places.append(place)
        thing.ident = thing.ident if thing.ident is not None else ident
        for attr, value in (("label", None if label is None else normalise_label(label)),
                            ("type", None if type is None else type.strip())):
            if not value:
                continue
            known = getattr(thing, attr)
            if known is None:
                setattr(thing, attr, (value, place))
            elif known[0] != value:
                raise DataFileError(self.source, f"{describe([known[1], place])} give {what} {key!r} two "
                                                 f"{attr}s: {known[0]!r}, {value!r}")

    def entity(self, key: str, place: str, *, label: str | None = None, type: str | None = None,
               ident: str | None = None) -> None:
        """``key`` names one entity across the file; without a ``label`` the key is its label too."""
        self._merge(self.entities, "entity", key, place, label, type, ident)

    def relation(self, key: str, place: str, *, label: str | None = None, ident: str | None = None) -> None:
        self._merge(self.relations, "relation", key, place, label, None, key if ident is None else ident)

    def link(self, head: str, rel: str, tail: str, place: str) -> None:
        self.links.append((head, rel, tail, place))

    def skip(self, what: str, place: str) -> None:
        self.skipped.setdefault(what, []).append(place)


def _assign_ids(things: list[_Thing], make: Callable[[str], str]) -> tuple[list[str], list[str]]:
    """Ids in file order, and notes on those renamed. A source's own plain id is kept as written
    (the first to give it reserves it, so no made id takes it); any other is made from the source's
    id or label; where that id is taken, the later entity gets ``_2``, ``_3`` ..."""
    plain = [t.ident if t.ident is not None and is_plain_id(t.ident) else None for t in things]
    ids: list[str | None] = []
    taken: set[str] = set()
    for ident in plain:
        ids.append(ident if ident is not None and ident not in taken else None)
        taken.update([ident] if ident is not None else [])
    notes = []
    for n, thing in enumerate(things):
        if ids[n] is not None:
            continue
        base = plain[n] or make(thing.ident if thing.ident is not None else (thing.label[0] if thing.label else thing.key))
        ident, k = base, 2
        while ident in taken:
            ident, k = f"{base}_{k}", k + 1
        if ident != base:
            notes.append(f"{thing.key!r} ({thing.places[0]}) -> {ident}")
        ids[n] = ident
        taken.add(ident)
    return ids, notes  # type: ignore[return-value]


def assemble(draft: Draft, *, default_type: str | None = None, domain: str | None = None,
             version: str = "1.0") -> Imported:
    """The kg.json object for ``draft``, validated by the loader; raises DataFileError naming the
    places of the first clash (two labels or types for one entity, labels equal but for case,
    a missing type, a type spelled two ways, anything else the loader refuses)."""
    source = draft.source
    skipped = {what: list(places) for what, places in draft.skipped.items()}  # the draft stays as read
    ents = list(draft.entities.values())
    untyped = [e for e in ents if e.type is None]
    if untyped and default_type is None:
        shown = "; ".join(f"{(e.label[0] if e.label else e.key)!r} ({describe(e.places, 2)})" for e in untyped[:5])
        raise DataFileError(source, f"{len(untyped)} of {len(ents)} entities have no type: {shown}"
                                    f"{' ...' if len(untyped) > 5 else ''}; give {draft.type_hint}, "
                                    "or pass --default-type TYPE")
    types = [e.type[0] if e.type else default_type.strip() for e in ents]  # type: ignore[union-attr]
    spellings: dict[str, tuple[str, str]] = {}
    for e, t in zip(ents, types):
        folded = " ".join(t.split()).casefold()
        first = spellings.setdefault(folded, (t, e.type[1] if e.type else e.places[0]))
        if first[0] != t:
            raise DataFileError(source, f"{describe([first[1], e.type[1] if e.type else e.places[0]])} spell one "
                                        f"type two ways: {first[0]!r}, {t!r}; one type, one spelling")
    ids, renamed = _assign_ids(ents, entity_id)
    labels = [e.label[0] if e.label else normalise_label(e.key) for e in ents]
    by_key: dict[str, int] = {}
    for n, label in enumerate(labels):
        m = by_key.setdefault(label_key(label), n)
        if m != n:
            said = repr(labels[m]) if labels[m] == label else f"{labels[m]!r} and {label!r}"
            raise DataFileError(source, f"{describe([ents[m].places[0], ents[n].places[0]])} give {said} two ids: "
                                        f"{ids[m]}, {ids[n]}; labels must differ by more than case, spacing or "
                                        "Unicode form (one entity: give it one name; two: tell their labels apart)")
    rels = list(draft.relations.values())
    rel_ids, rel_renamed = _assign_ids(rels, relation_id)
    id_of = {e.key: i for e, i in zip(ents, ids)}
    rel_of = {r.key: i for r, i in zip(rels, rel_ids)}
    edges, edge_places, seen = [], [], set()
    for head, rel, tail, place in draft.links:
        triple = (id_of[head], rel_of[rel], id_of[tail])
        if head == tail:
            skipped.setdefault(SELF_LOOP, []).append(place)
        elif triple in seen:
            skipped.setdefault(DUPLICATE_EDGE, []).append(place)
        else:
            seen.add(triple)
            edges.append({"src": triple[0], "rel": triple[1], "dst": triple[2]})
            edge_places.append([place])
    kg = {
        "version": version,
        "domain": domain if domain is not None else Path(source).stem,
        "entities": [{"id": i, "label": label, "type": t} for i, label, t in zip(ids, labels, types)],
        "relations": [{"id": i, "label": r.label[0] if r.label else humanize(r.key)} for r, i in zip(rels, rel_ids)],
        "edges": edges,
    }
    for section in ("entities", "edges"):
        if not kg[section]:
            # The loader refuses a kg.json without them (kgr data would have nothing to ask).
            said = ", ".join(f"{len(p)} {what}" for what, p in skipped.items()) or "nothing"
            raise DataFileError(source, f"found no {section} to import (skipped: {said}); docs/KG.md says what "
                                        "each format must hold")
    places = {"entities": [e.places for e in ents], "relations": [r.places for r in rels], "edges": edge_places}
    try:
        KnowledgeGraph.from_dict(kg, source=source)
    except DataFileError as exc:
        # The loader names the item ("entities[4]: ..."); the user needs the rows that made it.
        m = re.match(r"(entities|relations|edges)\[(\d+)\][.\w]*: (.*)", exc.message, re.S)
        if m is None:
            raise
        where = places[m[1]][int(m[2])]
        line = _line(where)  # a single row is a line: the message's "file:line:" names it
        raise DataFileError(source, m[3] if line else f"{describe(where)}: {m[3]}", line=line) from None
    notes = list(draft.notes)
    renamed += rel_renamed
    if renamed:
        more = f" and {len(renamed) - 5} more" if len(renamed) > 5 else ""
        notes.append(f"renamed (id taken by another): {', '.join(renamed[:5])}{more}")
    return Imported(source=source, format=draft.format, kg=kg, skipped=skipped, notes=notes)
