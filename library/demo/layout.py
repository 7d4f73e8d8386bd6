"""How the demo page draws a question: the claims of a TRACE, and a layered layout of the gold
path with its 1-hop neighbourhood. The static page (``library/demo/site.py``) and Try it
(``library/demo/tryit.py``) draw alike through these.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from library.contracts import Claim, Question
from library.graph.kg import KnowledgeGraph

GRAPH_W, GRAPH_H = 1000, 620
MAX_LANE = 8  # extra entities (mentioned off the neighbourhood) drawn on the top lane
MAX_PER_COLUMN = 4  # neighbour nodes stacked above/below one path node


def page_claims(claims: Iterable[Claim]) -> list[dict[str, Any]]:
    """Claims as the page draws them (``on_path``: an edge of the question's gold path).

    >>> page_claims([Claim(src="A", rel="caused_by", dst="B", in_kg=True, on_gold_path=False)])
    [{'src': 'A', 'rel': 'caused_by', 'dst': 'B', 'in_kg': True, 'on_path': False}]
    """
    return [{"src": c.src, "rel": c.rel, "dst": c.dst, "in_kg": c.in_kg, "on_path": c.on_gold_path} for c in claims]


def layout_subgraph(kg: KnowledgeGraph, path_entities: list[str], extra: Iterable[str] = (),
                    extra_edges: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    """A layered layout of the gold path and its 1-hop neighbourhood.

    The path runs left to right along the middle row (one column per entity); each
    neighbour is stacked above/below the first path entity it touches (at most
    ``MAX_PER_COLUMN`` per column); ``extra`` entities (e.g. endpoints of false claims)
    that touch no path entity go on a top lane. Edges: every KG edge among the drawn
    nodes, with ``hop`` set on the gold path's edges, plus ``extra_edges`` (false claims).
    """
    path_entities = list(path_entities)
    n = len(path_entities)
    mid = 330
    margin = 90
    step = (GRAPH_W - 2 * margin) / max(1, n - 1)
    pos: dict[str, tuple[float, float]] = {}
    for i, ent in enumerate(path_entities):
        pos[ent] = (margin + i * step if n > 1 else GRAPH_W / 2, mid)
    column_count: dict[int, int] = defaultdict(int)
    neighbours = kg.neighborhood(path_entities, radius=1)
    undirected = kg.graph.to_undirected(as_view=True)
    for ent in neighbours[n:]:
        cols = [i for i, p in enumerate(path_entities) if undirected.has_edge(ent, p)]
        if not cols:
            continue
        col = next((c for c in cols if column_count[c] < MAX_PER_COLUMN), None)
        if col is None:
            continue
        k = column_count[col]
        column_count[col] += 1
        sign = -1 if k % 2 == 0 else 1
        level = k // 2 + 1
        x = pos[path_entities[col]][0] + (25 if level == 2 else 0) * sign
        pos[ent] = (x, mid + sign * level * 115)
    lane = [e for e in dict.fromkeys(extra) if e not in pos and e in kg.entities][:MAX_LANE]
    for j, ent in enumerate(lane):
        pos[ent] = (margin + (j + 0.5) * (GRAPH_W - 2 * margin) / max(1, len(lane)), 28)
    path_hops = {(a, b): i for i, (a, b) in enumerate(zip(path_entities, path_entities[1:]))}
    path_rel = {}
    edges: list[dict[str, Any]] = []
    seen = set()
    for e in kg.edges:
        if e.src in pos and e.dst in pos:
            hop = path_hops.get((e.src, e.dst))
            edges.append({"src": e.src, "rel": e.rel, "dst": e.dst, "hop": hop, "kind": "kg"})
            seen.add((e.src, e.rel, e.dst))
            if hop is not None:
                path_rel.setdefault(hop, e.rel)
    for e in extra_edges:
        key = (e["src"], e["rel"], e["dst"])
        if key in seen or e["src"] not in pos or e["dst"] not in pos:
            continue
        seen.add(key)
        edges.append({"src": e["src"], "rel": e["rel"], "dst": e["dst"], "hop": None, "kind": "claim"})
    nodes = [{"id": ent, "label": kg.label(ent), "type": kg.type_of(ent), "x": round(x, 1), "y": round(y, 1),
              "path_index": path_entities.index(ent) if ent in path_entities else None}
             for ent, (x, y) in pos.items()]
    return {"width": GRAPH_W, "height": GRAPH_H, "nodes": nodes, "edges": edges}


def packed_layout(layout: dict[str, Any]) -> dict[str, Any]:
    """``layout`` as the page packs it: nodes without their label and type (the run's entity map
    has them) and KG edges without their defaults (no hop, kind "kg"); app.js fills them in.

    >>> packed_layout({"nodes": [{"id": "A", "label": "a", "type": "t", "x": 1}],
    ...                "edges": [{"src": "A", "rel": "r", "dst": "B", "hop": None, "kind": "kg"}]})
    {'nodes': [{'id': 'A', 'x': 1}], 'edges': [{'src': 'A', 'rel': 'r', 'dst': 'B'}]}
    """
    nodes = [{k: v for k, v in n.items() if k not in ("label", "type")} for n in layout["nodes"]]
    edges = [{k: v for k, v in e.items() if not (e.get("kind") == "kg" and (k == "kind" or (k == "hop" and v is None)))}
             for e in layout["edges"]]
    return {**layout, "nodes": nodes, "edges": edges}


def gold_path_layout(kg: KnowledgeGraph, q: Question, extra: Iterable[str] = (),
                     extra_edges: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    """Layout for a question; gold path edges with the path's own relation get ``hop``."""
    layout = layout_subgraph(kg, q.path_star.entities, extra, extra_edges)
    gold = {(e.src, e.rel, e.dst): i for i, e in enumerate(q.path_star.edges)}
    for e in layout["edges"]:
        e["hop"] = gold.get((e["src"], e["rel"], e["dst"]))
    return layout
