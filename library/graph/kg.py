"""The knowledge graph: load and validate ``data/kg.json``, query it, sample paths from it.

Everything here is deterministic: entities keep file order, successor lists are sorted,
and path sampling takes an explicit ``random.Random``.

>>> kg = KnowledgeGraph.from_dict({
...     "version": "1", "domain": "toy",
...     "entities": [{"id": "A", "label": "a", "type": "symptom"},
...                  {"id": "B", "label": "b", "type": "cause"},
...                  {"id": "C", "label": "c", "type": "fix"}],
...     "relations": [{"id": "caused_by", "label": "is caused by"},
...                   {"id": "fixed_by", "label": "is fixed by"}],
...     "edges": [{"src": "A", "rel": "caused_by", "dst": "B"},
...               {"src": "B", "rel": "fixed_by", "dst": "C"}]})
>>> kg.reach("A", ["caused_by", "fixed_by"])
['C']
>>> kg.has_edge("A", "caused_by", "B")
True
"""

from __future__ import annotations

import json
import random
import re
import unicodedata
from collections import defaultdict
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator

import networkx as nx
from pydantic import BaseModel, ConfigDict, ValidationError

from library.contracts import BLANK_TAG_RE, GoldPath, PathEdge
from library.errors import DataFileError

DEFAULT_KG_PATH = Path("data/kg.json")

#: The longest label or id a graph may have: every prompt and TRACE that names an entity writes
#: it out, and the committed graphs' longest is 37 characters, so a longer one is a mistake.
MAX_LABEL_CHARS = 200

# Text the completion format gives a meaning (library/scoring/answer_format.py, library/contracts.py),
# each with what it means there: inside a label it is read as format, not as the entity's name.
_FORMAT_MARKERS = (
    (re.compile(r"(?<!\w)(?:trace|answer)[ \t*_`\u200b\u200c\u200d\u2060\ufeff]*[:\uff1a]", re.IGNORECASE),
     "the keyword of a TRACE or ANSWER line"),
    (BLANK_TAG_RE, "a blank tag, which the reward deletes from a TRACE before reading it"),
    (re.compile(r"\([A-D]\)"), "an option's letter, which prompts and TRACEs write right after a label"),
    (re.compile("[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]"), "a line break, but a prompt writes each option on one line"),
)


def normalise_label(text: str) -> str:
    """A label as the graph keeps it: Unicode NFC (one spelling for "é", composed or not), trimmed.

    >>> normalise_label(" cafe\u0301 ") == "caf\u00e9"
    True
    """
    return unicodedata.normalize("NFC", text).strip()


def label_key(label: str) -> str:
    """What two labels must differ in: more than case, spacing and Unicode form. The reward's
    matcher keys its aliases by it too (library/scoring/matching.py), so what it cannot tell apart
    the loader refuses.

    >>> label_key("Clock  SKEW") == label_key("clock skew")
    True
    """
    return " ".join(unicodedata.normalize("NFC", label.casefold()).split())


def format_marker(label: str) -> tuple[str, str] | None:
    """The first marker of the completion format in ``label`` and what the format reads it as, or None.

    >>> format_marker("disk full [Q] ANSWER: B")[0], format_marker("trace system calls")
    ('[Q]', None)
    >>> format_marker("answer: yes")
    ('answer:', 'the keyword of a TRACE or ANSWER line')
    """
    found = [(m.start(), m.group().strip(" \t") or m.group(), meaning)
             for regex, meaning in _FORMAT_MARKERS if (m := regex.search(label))]
    if not found:
        return None
    _, marker, meaning = min(found, key=lambda f: f[0])
    return marker, meaning


def _label_problem(what: str, owner: str, label: str) -> str | None:
    """Why ``label`` (already normalised) cannot be a label, or None when it can."""
    if len(label) > MAX_LABEL_CHARS:
        return (f"{what} of {owner!r} is {len(label)} characters long ({label[:30]!r}...); "
                f"labels may have at most {MAX_LABEL_CHARS}")
    marker = format_marker(label)
    if marker is not None:
        return f"{what} {label!r} of {owner!r} contains {marker[0]!r}, {marker[1]}; reword the label"
    return None


class Entity(BaseModel):
    """An entity. Its ``type`` is the graph's own (any non-empty name: "symptom", "dish",
    "protein" ...); distractors are drawn from the answer's type, so the types a graph uses must
    be spelled consistently (checked on load)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    label: str
    type: str


class Relation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    label: str


class KGFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str
    domain: str
    entities: list[Entity]
    relations: list[Relation]
    edges: list[PathEdge]


def _line_of_item(raw: str, section: str, index: int) -> int | None:
    """1-based line where item ``index`` of the top-level array ``section`` starts.

    Written by hand because ``json`` reports positions only for syntax errors, and we want
    "kg.json:412: edge 37 names unknown entity" for semantic errors too. A tiny scanner
    that skips strings and counts object openings at array depth is enough.
    """
    key = raw.find(f'"{section}"')
    if key < 0:
        return None
    pos = raw.find("[", key)
    depth, count, in_str, escape = 0, -1, False, False
    for i in range(pos + 1, len(raw)):
        ch = raw[i]
        if in_str:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "{[":
            if depth == 0:
                count += 1
                if count == index:
                    return raw.count("\n", 0, i) + 1
            depth += 1
        elif ch in "}]":
            if depth == 0:
                return None
            depth -= 1
    return None


class KnowledgeGraph:
    """A validated KG with fast lookups and a networkx MultiDiGraph view."""

    def __init__(self, data: KGFile, source: str | Path = "<memory>", raw: str | None = None):
        self.source = str(source)
        self.version = data.version
        self.domain = data.domain
        self.entities: dict[str, Entity] = {}
        self.relations: dict[str, Relation] = {}
        self.edges: list[PathEdge] = []

        def fail(section: str, index: int, message: str) -> DataFileError:
            line = _line_of_item(raw, section, index) if raw is not None else None
            return DataFileError(self.source, f"{section}[{index}]: {message}", line=line)

        labels: dict[str, tuple[str, str, int]] = {}  # label key -> (entity id, its label, its index)
        types: dict[str, str] = {}  # folded spelling -> the first spelling seen
        for i, ent in enumerate(data.entities):
            if not ent.type.strip():
                raise fail("entities", i, f"entity {ent.id!r} has an empty type")
            folded = " ".join(ent.type.split()).casefold()
            if types.setdefault(folded, ent.type) != ent.type:
                raise fail("entities", i, f"type {ent.type!r} of {ent.id!r} is spelled {types[folded]!r} elsewhere; "
                                          "one type, one spelling")
            if not ent.id.strip():  # as kg.schema.json says: an id is a key edges must be able to name
                raise fail("entities", i, f"entity {ent.label!r} has an empty id")
            if ent.id in self.entities:
                raise fail("entities", i, f"duplicate entity id {ent.id!r}")
            if len(ent.id) > MAX_LABEL_CHARS:
                raise fail("entities", i, f"entity id {ent.id[:30]!r}... is {len(ent.id)} characters long; "
                                          f"ids may have at most {MAX_LABEL_CHARS}")
            label = normalise_label(ent.label)
            if not label:
                raise fail("entities", i, f"entity {ent.id!r} has an empty label")
            problem = _label_problem("label", ent.id, label)
            if problem:
                raise fail("entities", i, problem)
            key = label_key(label)
            if key in labels:
                other, other_label, j = labels[key]
                line = _line_of_item(raw, "entities", j) if raw is not None else None
                raise fail("entities", i, f"label {label!r} of {ent.id!r} is already used by {other!r} "
                                          f"({other_label!r}{f', line {line}' if line else ''}): labels must differ "
                                          "by more than case, spacing or Unicode form")
            labels[key] = (ent.id, label, i)
            # The graph keeps the normalised label, so prompts, options and the matcher all see one spelling.
            self.entities[ent.id] = ent if label == ent.label else ent.model_copy(update={"label": label})
        for i, rel in enumerate(data.relations):
            if not rel.id.strip():
                raise fail("relations", i, f"relation {rel.label!r} has an empty id")
            if rel.id in self.relations:
                raise fail("relations", i, f"duplicate relation id {rel.id!r}")
            if len(rel.id) > MAX_LABEL_CHARS:
                raise fail("relations", i, f"relation id {rel.id[:30]!r}... is {len(rel.id)} characters long; "
                                           f"ids may have at most {MAX_LABEL_CHARS}")
            label = normalise_label(rel.label)
            if not label:  # a question says it between two labels (kg.schema.json)
                raise fail("relations", i, f"relation {rel.id!r} has an empty label")
            problem = _label_problem("relation label", rel.id, label)
            if problem:
                raise fail("relations", i, problem)
            self.relations[rel.id] = rel if label == rel.label else rel.model_copy(update={"label": label})
        seen: set[tuple[str, str, str]] = set()
        for i, edge in enumerate(data.edges):
            for end in (edge.src, edge.dst):
                if end not in self.entities:
                    raise fail("edges", i, f"edge {edge.src} -{edge.rel}-> {edge.dst} names unknown entity {end!r}")
            if edge.rel not in self.relations:
                raise fail("edges", i, f"edge {edge.src} -{edge.rel}-> {edge.dst} names unknown relation {edge.rel!r}")
            if edge.src == edge.dst:
                raise fail("edges", i, f"self-loop on {edge.src!r}")
            triple = (edge.src, edge.rel, edge.dst)
            if triple in seen:
                raise fail("edges", i, f"duplicate edge {edge.src} -{edge.rel}-> {edge.dst}")
            seen.add(triple)
            self.edges.append(edge)
        self._edge_set = seen
        out: dict[tuple[str, str], list[str]] = defaultdict(list)
        inc: dict[tuple[str, str], list[str]] = defaultdict(list)
        for e in self.edges:
            out[(e.src, e.rel)].append(e.dst)
            inc[(e.dst, e.rel)].append(e.src)
        self._out = {k: sorted(v) for k, v in out.items()}
        self._in = {k: sorted(v) for k, v in inc.items()}
        self._out_edges: dict[str, list[PathEdge]] = defaultdict(list)
        for e in sorted(self.edges, key=lambda e: (e.src, e.rel, e.dst)):
            self._out_edges[e.src].append(e)
        # Any-relation views: distractor search (library/questions/distractors.py) walks them many
        # thousands of times per dataset build, and questions are checked from their labels.
        undirected: dict[str, set[str]] = defaultdict(set)
        incoming: dict[str, list[PathEdge]] = defaultdict(list)
        for e in self.edges:
            undirected[e.src].add(e.dst)
            undirected[e.dst].add(e.src)
            incoming[e.dst].append(e)
        self._undirected = {k: sorted(v) for k, v in undirected.items()}
        self._in_edges = {k: sorted(v, key=lambda e: (e.rel, e.src)) for k, v in incoming.items()}
        self._by_label = {ent.label: ent.id for ent in self.entities.values()}

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_dict(cls, obj: dict[str, Any], source: str | Path = "<memory>", raw: str | None = None) -> "KnowledgeGraph":
        try:
            data = KGFile.model_validate(obj)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = err["loc"]
            line = None
            if raw is not None and len(loc) >= 2 and isinstance(loc[1], int):
                line = _line_of_item(raw, str(loc[0]), loc[1])
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
            raise DataFileError(source, f"{where or '<top level>'}: {err['msg']}", line=line) from None
        return cls(data, source=source, raw=raw)

    @classmethod
    def load(cls, path: str | Path = DEFAULT_KG_PATH) -> "KnowledgeGraph":
        path = Path(path)
        if not path.exists():
            raise DataFileError(path, "knowledge graph file not found")
        if path.is_dir():
            raise DataFileError(path, "is a folder; pass the kg.json file inside it")
        try:
            raw = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise DataFileError(path, f"not UTF-8 text (byte {exc.start}): a kg.json is a JSON text file") from None
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DataFileError(path, f"invalid JSON: {exc.msg} (column {exc.colno})", line=exc.lineno) from None
        except RecursionError:
            # json's decoder recurses once per nesting level; no kg.json needs more than four.
            raise DataFileError(path, "JSON nested too deeply to read") from None
        if not isinstance(obj, dict):
            raise DataFileError(path, "top level must be a JSON object with version, domain, entities, relations, edges")
        kg = cls.from_dict(obj, source=path, raw=raw)
        # Checked here, not in from_dict: small in-memory graphs without edges serve the docs' examples.
        for section, items in (("entities", kg.entities), ("edges", kg.edges)):
            if not items:
                key = raw.find(f'"{section}"')
                line = raw.count("\n", 0, key) + 1 if key >= 0 else None
                raise DataFileError(path, f"has no {section}: nothing to ask questions about", line=line)
        return kg

    # ------------------------------------------------------------------ queries
    def label(self, entity_id: str) -> str:
        return self.entities[entity_id].label

    def type_of(self, entity_id: str) -> str:
        return self.entities[entity_id].type

    def relation_label(self, rel_id: str) -> str:
        return self.relations[rel_id].label

    def has_edge(self, src: str, rel: str, dst: str) -> bool:
        return (src, rel, dst) in self._edge_set

    def successors(self, entity_id: str, rel: str) -> list[str]:
        """Sorted targets of ``entity_id -rel->``."""
        return self._out.get((entity_id, rel), [])

    def predecessors(self, entity_id: str, rel: str) -> list[str]:
        return self._in.get((entity_id, rel), [])

    def out_edges(self, entity_id: str) -> list[PathEdge]:
        """Outgoing edges sorted by (rel, dst)."""
        return self._out_edges.get(entity_id, [])

    def in_edges(self, entity_id: str) -> list[PathEdge]:
        """Incoming edges sorted by (rel, src)."""
        return self._in_edges.get(entity_id, [])

    def neighbours(self, entity_id: str) -> list[str]:
        """Sorted entities one edge away in either direction, over any relation."""
        return self._undirected.get(entity_id, [])

    def entity_by_label(self, label: str) -> str | None:
        """The id of the entity with this label (labels name entities in questions), or None.
        A label spelled in another Unicode form or with surrounding spaces finds it too."""
        ident = self._by_label.get(label)
        return ident if ident is not None else self._by_label.get(normalise_label(label))

    def reach(self, start: str, chain: list[str]) -> list[str]:
        """Sorted entities reachable from ``start`` by following the relations in ``chain``.

        Walks may revisit entities here: this is the conservative set a question must rule
        out (a distractor in it would be a second correct answer under some reading).
        """
        frontier = {start}
        for rel in chain:
            frontier = {dst for src in frontier for dst in self.successors(src, rel)}
            if not frontier:
                break
        return sorted(frontier)

    def entities_of_type(self, entity_type: str) -> list[str]:
        return [e.id for e in self.entities.values() if e.type == entity_type]

    @cached_property
    def graph(self) -> nx.MultiDiGraph:
        """A networkx view: nodes carry label/type, edges carry rel (key = rel)."""
        g = nx.MultiDiGraph()
        for e in self.entities.values():
            g.add_node(e.id, label=e.label, type=e.type)
        for edge in self.edges:
            g.add_edge(edge.src, edge.dst, key=edge.rel, rel=edge.rel)
        return g

    def neighborhood(self, entity_ids: list[str], radius: int = 1, limit: int | None = None) -> list[str]:
        """The given entities plus those within ``radius`` undirected hops, in a stable order
        (given entities first, then by distance, then by id). ``limit`` caps the total."""
        undirected = self.graph.to_undirected(as_view=True)
        order = list(dict.fromkeys(entity_ids))
        dist = {e: 0 for e in order}
        frontier = list(order)
        for d in range(1, radius + 1):
            nxt = []
            for node in frontier:
                for nb in sorted(undirected.neighbors(node)):
                    if nb not in dist:
                        dist[nb] = d
                        nxt.append(nb)
            frontier = sorted(set(nxt))
            order.extend(frontier)
        return order[:limit] if limit else order

    # ------------------------------------------------------------------- paths
    def path_from_entities(self, entities: list[str], rels: list[str]) -> GoldPath:
        edges = [PathEdge(src=a, rel=r, dst=b) for a, r, b in zip(entities, rels, entities[1:])]
        for e in edges:
            if not self.has_edge(e.src, e.rel, e.dst):
                raise ValueError(f"not an edge of the KG: {e.src} -{e.rel}-> {e.dst}")
        return GoldPath(entities=list(entities), edges=edges)

    def sample_path(self, rng: random.Random, hops: int, start: str | None = None, max_tries: int = 50) -> GoldPath | None:
        """A random simple path (no entity revisited) of exactly ``hops`` edges, or None.

        Deterministic given the state of ``rng``: choices are made from sorted lists.
        """
        starts = [start] if start is not None else list(self.entities)
        for _ in range(max_tries):
            node = rng.choice(starts)
            nodes, edges = [node], []
            for _ in range(hops):
                options = [e for e in self.out_edges(nodes[-1]) if e.dst not in nodes]
                if not options:
                    break
                edge = rng.choice(options)
                edges.append(edge)
                nodes.append(edge.dst)
            if len(edges) == hops:
                return GoldPath(entities=nodes, edges=edges)
        return None

    def iter_paths(self, hops: int, start: str | None = None) -> Iterator[GoldPath]:
        """Every simple path of exactly ``hops`` edges, in deterministic DFS order."""
        starts = [start] if start is not None else list(self.entities)

        def dfs(nodes: list[str], edges: list[PathEdge]) -> Iterator[GoldPath]:
            if len(edges) == hops:
                yield GoldPath(entities=list(nodes), edges=list(edges))
                return
            for e in self.out_edges(nodes[-1]):
                if e.dst in nodes:
                    continue
                nodes.append(e.dst)
                edges.append(e)
                yield from dfs(nodes, edges)
                nodes.pop()
                edges.pop()

        for s in starts:
            yield from dfs([s], [])

    def stats(self) -> dict[str, Any]:
        by_type: dict[str, int] = defaultdict(int)
        for e in self.entities.values():
            by_type[e.type] += 1
        by_rel: dict[str, int] = defaultdict(int)
        for e in self.edges:
            by_rel[e.rel] += 1
        return {
            "entities": len(self.entities),
            "relations": len(self.relations),
            "edges": len(self.edges),
            "entities_by_type": dict(sorted(by_type.items())),
            "edges_by_relation": dict(sorted(by_rel.items())),
        }


def load_kg(path: str | Path = DEFAULT_KG_PATH) -> KnowledgeGraph:
    """Load and validate a kg.json; raises DataFileError naming the file, line and problem."""
    return KnowledgeGraph.load(path)
