"""A connected slice of a graph (``kgr kg slice KG --entities N --out slice.json``): fewer facts
to learn, so a run trains in minutes (``make demo`` trains on one), on any user's graph alike.

The slice is the first ``n`` entities a breadth-first walk reaches from one start entity, edge
direction ignored (:meth:`KnowledgeGraph.neighborhood`: by distance, then by id), with every edge
among them. A ball around one entity keeps the graph's own chains whole near the start, where a
random sample of entities would cut most long chains in two; the start defaults to the entity
with the most neighbours (ties: the first in the file), so the ball is as wide as the graph allows.

>>> kg = KnowledgeGraph.from_dict({
...     "version": "1", "domain": "toy",
...     "entities": [{"id": i, "label": i.lower(), "type": "t"} for i in "ABCDE"],
...     "relations": [{"id": "r", "label": "r"}, {"id": "s", "label": "s"}],
...     "edges": [{"src": "A", "rel": "r", "dst": "B"}, {"src": "B", "rel": "r", "dst": "C"},
...               {"src": "C", "rel": "r", "dst": "D"}, {"src": "D", "rel": "s", "dst": "E"}]})
>>> part = connected_slice(kg, 3)
>>> [e["id"] for e in part["entities"]], [(e["src"], e["dst"]) for e in part["edges"]]
(['A', 'B', 'C'], [('A', 'B'), ('B', 'C')])
>>> [r["id"] for r in part["relations"]]  # only the relations its edges use
['r']
>>> [e["id"] for e in connected_slice(kg, 2, start="E")["entities"]]
['D', 'E']
"""

from __future__ import annotations

from typing import Any

from library.graph.kg import KnowledgeGraph


def best_connected(kg: KnowledgeGraph) -> str:
    """The entity with the most neighbours (either direction); the first in the file on a tie."""
    if not kg.entities:
        raise ValueError(f"{kg.source}: the graph has no entities")
    return max(kg.entities, key=lambda e: len(kg.neighbours(e)))


def connected_slice(kg: KnowledgeGraph, n_entities: int, start: str | None = None) -> dict[str, Any]:
    """The kg.json mapping of ``kg``'s first ``n_entities`` entities breadth-first from ``start``
    (default :func:`best_connected`) and every edge among them; entities, relations and edges keep
    the file's order. Fewer entities where the start's component is smaller."""
    if n_entities < 2:
        raise ValueError(f"a slice needs at least 2 entities, not {n_entities}")
    if start is None:
        start = best_connected(kg)
    elif start not in kg.entities:
        raise ValueError(f"--start {start!r} is not an entity id of {kg.source}")
    keep = set(kg.neighborhood([start], radius=len(kg.entities), limit=n_entities))
    edges = [e for e in kg.edges if e.src in keep and e.dst in keep]
    used = {e.rel for e in edges}
    return {"version": kg.version, "domain": kg.domain,
            "entities": [e.model_dump() for e in kg.entities.values() if e.id in keep],
            "relations": [r.model_dump() for r in kg.relations.values() if r.id in used],
            "edges": [e.model_dump() for e in edges]}
