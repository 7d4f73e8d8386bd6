"""Know a graph before generating from it (``kgr kg check KG``): its size, how its relations
branch, and how many questions it can give that are solvable by composition.

A question (start entity, relation chain) is solvable by composing taught facts hop by hop, with
no lookahead, when the walk of library/graph/oracle.py never has to choose: every entity it
holds has one successor under the next relation. Where a hop branches the walk would have to
carry the set of successors; ``frontier`` counts chains by the widest set such a set-carrying
walk holds (width 1: today's procedure; wider: what set-valued traces would need). The
questions ``kgr data`` writes use width-1 chains only, and it refuses to write a split it cannot
fill with them.

>>> from library.graph.kg import KnowledgeGraph
>>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
...     "entities": [{"id": i, "label": i.lower(), "type": "t"} for i in "ABCD"],
...     "relations": [{"id": "r", "label": "leads to"}],
...     "edges": [{"src": "A", "rel": "r", "dst": "B"}, {"src": "A", "rel": "r", "dst": "C"},
...               {"src": "B", "rel": "r", "dst": "D"}, {"src": "C", "rel": "r", "dst": "D"}]})
>>> report = check_graph(kg, max_hops=2, widths=(1, 2))
>>> report["by_relation"]["r"]["mean_fanout"], report["by_relation"]["r"]["functional_share"]
(1.33, 0.67)
>>> report["chains"]["1"], report["chains"]["2"]   # width <= 1, width <= 2
({'1': 2, '2': 3}, {'1': 0, '2': 1})
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Iterable, Sequence

import networkx as nx

from library.graph.kg import KnowledgeGraph

#: Frontier widths reported by default: 1 is what the generator uses.
WIDTHS = (1, 2, 4)


def count_chains(kg: KnowledgeGraph, max_hops: int, widths: Sequence[int] = WIDTHS) -> dict[int, Counter]:
    """``{hops: Counter(width -> n)}``: (start, relation chain) pairs whose set-carrying walk
    stays non-empty, never holds an entity it held before (at width 1: a simple path, as the
    generator samples) and never holds more than ``w`` entities, for each ``w`` in ``widths``
    (cumulative: a width-1 chain also counts at width 2)."""
    cap = max(widths)
    counts: dict[int, Counter] = {h: Counter() for h in range(1, max_hops + 1)}
    rels = sorted(kg.relations)

    def extend(held: frozenset[str], seen: frozenset[str], hops: int, widest: int) -> None:
        for rel in rels:
            nxt = frozenset(d for e in held for d in kg.successors(e, rel))
            if not nxt or len(nxt) > cap or nxt & seen:
                continue
            width = max(widest, len(nxt))
            for w in widths:
                if width <= w:
                    counts[hops + 1][w] += 1
            if hops + 1 < max_hops:
                extend(nxt, seen | nxt, hops + 1, width)

    for start in kg.entities:
        extend(frozenset([start]), frozenset([start]), 0, 1)
    return counts


def check_graph(kg: KnowledgeGraph, *, max_hops: int = 5, widths: Sequence[int] = WIDTHS) -> dict[str, Any]:
    """The figures ``kgr kg check`` prints (JSON-ready)."""
    groups: dict[str, list[int]] = defaultdict(list)  # relation -> fan-out of each (src, rel) group
    signatures: dict[str, Counter] = defaultdict(Counter)
    for (src, rel), n in Counter((e.src, e.rel) for e in kg.edges).items():
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
    """What to do with this graph, in plain sentences: whether ``kgr data``'s defaults fit, and
    what to change where they do not."""
    eval_hops = list(eval_hops)
    per_hop = -(-(n_eval + n_train_hard + n_dev) // len(eval_hops))  # held-out questions per hop length
    short = {h: report["chains"].get(str(h), {}).get("1", 0) for h in eval_hops}
    lacking = {h: n for h, n in short.items() if n < per_hop}
    lines = []
    if report["functional_share"] == 1.0:
        lines.append("every (entity, relation) has one successor: the default procedure (one entity a hop) "
                     "solves every chain")
    else:
        lines.append(f"{report['functional_share']:.0%} of (entity, relation) groups have one successor "
                     f"(mean fan-out {report['mean_fanout']}): only chains that never branch are solvable by "
                     "the trace procedure, and kgr data uses only those")
    if not lacking:
        lines.append(f"enough non-branching {'/'.join(map(str, eval_hops))}-hop chains for the default held-out "
                     f"splits ({per_hop} a hop length needed): run `kgr data --kg {report['source']}`")
    else:
        have = ", ".join(f"{n} at {h} hops" for h, n in sorted(short.items()))
        fits = min(short.values()) * len(eval_hops)
        lines.append(f"too few non-branching long chains ({have}; {per_hop} a hop length needed for "
                     f"--n-eval {n_eval}, --n-train-hard {n_train_hard}, --n-dev {n_dev}): ask for at most "
                     f"~{fits // 2} eval questions in all with smaller held-out splits, or make the graph's "
                     "relations functional where the facts allow")
        wide = {h: report["chains"].get(str(h), {}) for h in eval_hops}
        widest = max((int(w) for counts in wide.values() for w in counts), default=1)
        if all(counts.get(str(widest), 0) >= per_hop for counts in wide.values()):
            lines.append(f"with sets of up to {widest} entities carried through a branching hop the graph would "
                         "give enough chains; set-valued traces are not supported yet")
    return lines
