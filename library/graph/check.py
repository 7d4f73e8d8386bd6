"""Know a graph before generating from it (``kgr kg check KG``): its size, how its relations
branch, and how many questions it can give that are solvable by composition.

A question (start entity, relation chain) is solvable by composing taught facts hop by hop, with
no lookahead, by the procedure of library/graph/oracle.py: carry every successor of every held
entity from hop to hop. Chains are counted by the widest set that walk holds (width 1: no hop
branches; wider: the TRACE carries sets), among walks that form a tree (no entity reached twice).
``kgr data`` uses chains up to a maximum width (``--max-width``; by default the smallest that
fills the splits, :func:`smallest_width`) and refuses to write a split it cannot fill.

>>> from library.graph.kg import KnowledgeGraph
>>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
...     "entities": [{"id": i, "label": i.lower(), "type": "t"} for i in "ABCD"],
...     "relations": [{"id": "r", "label": "leads to"}],
...     "edges": [{"src": "A", "rel": "r", "dst": "B"}, {"src": "A", "rel": "r", "dst": "C"},
...               {"src": "B", "rel": "r", "dst": "D"}, {"src": "C", "rel": "r", "dst": "D"}]})
>>> report = check_graph(kg, max_hops=2, widths=(1, 2))
>>> report["by_relation"]["r"]["mean_fanout"], report["by_relation"]["r"]["functional_share"]
(1.33, 0.67)
>>> report["chains"]["1"], report["chains"]["2"]   # width <= 1, width <= 2 (A->B,C->D merges: no tree)
({'1': 2, '2': 3}, {'1': 0, '2': 0})
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Iterable, Sequence

import networkx as nx

from library.graph.kg import KnowledgeGraph
from library.graph.oracle import grows_tree, step

#: Frontier widths reported and tried by default (wider sets make longer TRACEs to learn).
WIDTHS = (1, 2, 3, 4)


def count_chains(kg: KnowledgeGraph, max_hops: int, widths: Sequence[int] = WIDTHS) -> dict[int, Counter]:
    """``{hops: Counter(width -> n)}``: (start, relation chain) pairs whose walk
    (library/graph/oracle.py) is a tree, as the generator requires (at width 1: a simple path),
    never holding more than ``w`` entities, for each ``w`` in ``widths`` (cumulative: a width-1
    chain also counts at width 2)."""
    cap = max(widths)
    counts: dict[int, Counter] = {h: Counter() for h in range(1, max_hops + 1)}
    rels = sorted(kg.relations)

    def extend(held: tuple[str, ...], seen: frozenset[str], hops: int, widest: int) -> None:
        for rel in rels:
            hop = step(kg.successors, held, rel)
            if len(hop.held) > cap or not grows_tree(hop, seen):
                continue
            width = max(widest, len(hop.held))
            for w in widths:
                if width <= w:
                    counts[hops + 1][w] += 1
            if hops + 1 < max_hops:
                extend(hop.held, seen | set(hop.held), hops + 1, width)

    for start in kg.entities:
        extend((start,), frozenset([start]), 0, 1)
    return counts


def smallest_width(report: dict[str, Any], per_hop: int, hops: Iterable[int]) -> int | None:
    """The narrowest width at which the graph has ``per_hop`` chains of every length in ``hops``
    (None: not even at the widest counted). A heuristic: the generator's leakage and distractor
    rules reject some chains, so ``kgr data`` tries wider widths where this one falls short."""
    widths = sorted(int(w) for w in next(iter(report["chains"].values()), {}))
    for w in widths:
        if all(report["chains"].get(str(h), {}).get(str(w), 0) >= per_hop for h in hops):
            return w
    return None


def _groups(kg: KnowledgeGraph) -> Counter:
    """(entity, relation) -> its number of successors, for every pair that has one."""
    return Counter((e.src, e.rel) for e in kg.edges)


def fanouts(kg: KnowledgeGraph) -> list[int]:
    """The number of successors of every (entity, relation) pair that has one: all 1 on a
    functional graph, where no hop branches.

    >>> from library.graph.kg import KnowledgeGraph
    >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "toy",
    ...     "entities": [{"id": i, "label": i, "type": "t"} for i in "abc"],
    ...     "relations": [{"id": "r", "label": "r"}],
    ...     "edges": [{"src": "a", "rel": "r", "dst": "b"}, {"src": "a", "rel": "r", "dst": "c"},
    ...               {"src": "b", "rel": "r", "dst": "c"}]})
    >>> sorted(fanouts(kg))
    [1, 2]
    """
    return list(_groups(kg).values())


def check_graph(kg: KnowledgeGraph, *, max_hops: int = 5, widths: Sequence[int] = WIDTHS) -> dict[str, Any]:
    """The figures ``kgr kg check`` prints (JSON-ready)."""
    groups: dict[str, list[int]] = defaultdict(list)  # relation -> fan-out of each (src, rel) group
    signatures: dict[str, Counter] = defaultdict(Counter)
    for (src, rel), n in _groups(kg).items():
        groups[rel].append(n)
    for e in kg.edges:
        signatures[e.rel][f"{kg.type_of(e.src)} -> {kg.type_of(e.dst)}"] += 1
    by_relation = {}
    for rel in kg.relations:
        fan = groups.get(rel, [])
        by_relation[rel] = {
            "label": kg.relations[rel].label, "edges": sum(fan), "groups": len(fan),
            "mean_fanout": round(sum(fan) / len(fan), 2) if fan else 0.0, "max_fanout": max(fan, default=0),
            "functional_share": round(sum(1 for n in fan if n == 1) / len(fan), 2) if fan else 0.0,
            "types": dict(signatures[rel].most_common()),
        }
    all_fan = [n for fan in groups.values() for n in fan]
    touched = {e.src for e in kg.edges} | {e.dst for e in kg.edges}
    graph = nx.DiGraph((e.src, e.dst) for e in kg.edges)
    cyclic = [c for c in nx.strongly_connected_components(graph) if len(c) > 1]
    chains = count_chains(kg, max_hops, widths)
    return {
        "source": kg.source, "domain": kg.domain,
        "entities": len(kg.entities), "edges": len(kg.edges), "relations": len(kg.relations),
        "types": dict(Counter(e.type for e in kg.entities.values()).most_common()),
        "mean_fanout": round(sum(all_fan) / len(all_fan), 2) if all_fan else 0.0,
        "max_fanout": max(all_fan, default=0),
        "functional_share": round(sum(1 for n in all_fan if n == 1) / len(all_fan), 2) if all_fan else 0.0,
        "fanout_histogram": {str(k): v for k, v in sorted(Counter(all_fan).items())},
        "isolated": sorted(set(kg.entities) - touched),
        "cycles": {"strongly_connected_components": len(cyclic), "entities_on_cycles": sum(len(c) for c in cyclic)},
        "by_relation": by_relation,
        "chains": {str(h): {str(w): chains[h][w] for w in widths} for h in chains},
    }


def recommend(report: dict[str, Any], *, n_eval: int, n_train_hard: int, n_dev: int,
              eval_hops: Iterable[int] = (4, 5)) -> list[str]:
    """What to do with this graph, in plain sentences: whether ``kgr data``'s defaults fit, at
    which width, and what to change where they do not."""
    eval_hops = list(eval_hops)
    per_hop = -(-(n_eval + n_train_hard + n_dev) // len(eval_hops))  # held-out questions per hop length
    lines = []
    if report["functional_share"] == 1.0:
        lines.append("every (entity, relation) has one successor: the TRACE holds one entity a hop")
    else:
        lines.append(f"{report['functional_share']:.0%} of (entity, relation) groups have one successor "
                     f"(mean fan-out {report['mean_fanout']}): where a hop branches the TRACE carries every "
                     "successor to the next hop, and the graph prunes the branches that lead nowhere")
    width = smallest_width(report, per_hop, eval_hops)
    hops_text = "/".join(map(str, eval_hops))
    if width is not None:
        lines.append(f"enough {hops_text}-hop chains for the default held-out splits ({per_hop} a hop length) "
                     f"carrying at most {width} entit{'y' if width == 1 else 'ies'} a hop: run "
                     f"`kgr data --kg {report['source']}`" + ("" if width == 1 else f" (it picks --max-width {width})"))
    else:
        widest = max(int(w) for w in next(iter(report["chains"].values())))
        have = ", ".join(f"{report['chains'].get(str(h), {}).get(str(widest), 0)} at {h} hops" for h in eval_hops)
        fits = min(report["chains"].get(str(h), {}).get(str(widest), 0) for h in eval_hops) * len(eval_hops)
        lines.append(f"too few long chains even carrying {widest} entities a hop ({have}; {per_hop} a hop length "
                     f"needed for --n-eval {n_eval}, --n-train-hard {n_train_hard}, --n-dev {n_dev}): ask for at "
                     f"most ~{fits // 2} held-out questions in all (smaller --n-eval, --n-train-hard, --n-dev), "
                     "or give the graph more edges between its relations' types")
    return lines
