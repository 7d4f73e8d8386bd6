"""Distractors: three near misses of the answer's type that the question's chain provably
does not reach (docs/DESIGN.md, "Lessons")."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Iterable

from library.contracts import GoldPath
from library.graph.kg import KnowledgeGraph

# Where a distractor came from (recorded in meta.distractors[].source), in tiers, best first:
#  tier 0  wrong_relation: break the chain at one hop by following another relation, then
#                          follow the rest of the chain;
#          sibling:        at one hop take another target of the same relation (one that a
#                          different source entity points to), then follow the rest;
#  tier 1  stop_early (an intermediate path entity), overshoot (one hop past the answer),
#          neighbour (adjacent to a path entity);
#  tier d  nearby_<d>: same type at undirected distance d (2..max_distance) from the path.
# Neither tier ever reaches across types or into kg.reach(start, chain).
DISTRACTOR_SOURCES = ("wrong_relation", "sibling", "stop_early", "overshoot", "neighbour", "nearby_<d>")


def distractor_candidates(kg: KnowledgeGraph, path: GoldPath, max_distance: int = 3,
                          enough: int | None = None) -> list[tuple[str, str]]:
    """Every admissible distractor for ``path`` as ``(entity id, source)``, best tier first; with
    ``enough``, only the tiers up to the first that brings the count to ``enough`` (a pick of that
    many never reaches past it, and far tiers of a big graph are its slowest part).

    Admissible: the answer's type, not the answer, not the start, and never in
    ``kg.reach(start, chain)`` (which allows revisits, so it over-approximates what the
    chain reaches: nothing the chain could reach under any reading becomes a distractor).

    >>> from library.graph.kg import KnowledgeGraph
    >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
    ...     "entities": [{"id": "s", "label": "s", "type": "symptom"},
    ...                  {"id": "c1", "label": "c1", "type": "cause"},
    ...                  {"id": "c2", "label": "c2", "type": "cause"},
    ...                  {"id": "f1", "label": "f1", "type": "fix"},
    ...                  {"id": "f2", "label": "f2", "type": "fix"},
    ...                  {"id": "f3", "label": "f3", "type": "fix"}],
    ...     "relations": [{"id": "caused_by", "label": "is caused by"},
    ...                   {"id": "fixed_by", "label": "is fixed by"},
    ...                   {"id": "prevented_by", "label": "is prevented by"}],
    ...     "edges": [{"src": "s", "rel": "caused_by", "dst": "c1"},
    ...               {"src": "c1", "rel": "fixed_by", "dst": "f1"},
    ...               {"src": "c1", "rel": "prevented_by", "dst": "f2"},
    ...               {"src": "c2", "rel": "fixed_by", "dst": "f1"},
    ...               {"src": "c2", "rel": "fixed_by", "dst": "f3"}]})
    >>> distractor_candidates(kg, kg.path_from_entities(["s", "c1", "f1"], ["caused_by", "fixed_by"]))
    [('f2', 'wrong_relation'), ('f3', 'sibling')]
    """
    entities, chain = path.entities, [e.rel for e in path.edges]
    start, answer = entities[0], entities[-1]
    want = kg.type_of(answer)
    reach = set(kg.reach(start, chain))
    found: dict[str, str] = {}

    def offer(candidates: Iterable[str], source: str) -> None:
        for c in candidates:
            if c not in found and c != start and c not in reach and kg.type_of(c) == want:
                found[c] = source

    # Tier 0: break the chain at exactly one hop, then follow the rest of it faithfully.
    for i, rel in enumerate(chain):
        rest = chain[i + 1:]
        for e in kg.out_edges(entities[i]):
            if e.rel != rel:
                offer(kg.reach(e.dst, rest), "wrong_relation")
    for i, rel in enumerate(chain):
        rest = chain[i + 1:]
        for other_src in kg.predecessors(entities[i + 1], rel):
            if other_src == entities[i]:
                continue
            for sibling in kg.successors(other_src, rel):
                if sibling != entities[i + 1]:
                    offer(kg.reach(sibling, rest), "sibling")
    # Tier 1: one step off the path.
    if enough is not None and len(found) >= enough:
        return list(found.items())
    offer(entities[1:-1], "stop_early")
    offer([e.dst for e in kg.out_edges(answer)], "overshoot")
    for ent in entities:
        offer(kg.neighbours(ent), "neighbour")
    # Tier d: same type at undirected distance d >= 2 from the path, nearest first.
    seen = set(entities)
    frontier = sorted(seen)
    for dist in range(1, max_distance + 1):
        nxt = sorted({nb for node in frontier for nb in kg.neighbours(node) if nb not in seen})
        seen.update(nxt)
        if enough is not None and len(found) >= enough:
            break
        if dist >= 2:
            offer(nxt, f"nearby_{dist}")
        frontier = nxt
    return list(found.items())


def pick_distractors(kg: KnowledgeGraph, path: GoldPath, rng: random.Random, k: int = 3,
                     max_distance: int = 3) -> list[tuple[str, str]] | None:
    """``k`` distractors as ``(entity id, source)``, filled tier by tier (random within a
    tier), or None if there are too few admissible ones.

    Tiers are filled in order so that a far-away entity is used only when near misses run
    out: tier 0 breaks the chain at one hop, tier 1 is one step off the path, tier d >= 2
    is at undirected distance d.
    """
    tiers: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for ent, source in distractor_candidates(kg, path, max_distance=max_distance, enough=k):
        tiers[_tier(source)].append((ent, source))
    chosen: list[tuple[str, str]] = []
    for rank in sorted(tiers):
        need = k - len(chosen)
        if need <= 0:
            break
        pool = tiers[rank]  # candidate order is deterministic (graph order), so sample is too
        chosen.extend(rng.sample(pool, min(need, len(pool))))
    return chosen if len(chosen) == k else None


def _tier(source: str) -> int:
    if source in ("wrong_relation", "sibling"):
        return 0
    if source in ("stop_early", "overshoot", "neighbour"):
        return 1
    return int(source.rsplit("_", 1)[1])  # nearby_<d>
