"""Know a graph before generating from it (``kgr kg check KG``): its size, how its relations
branch, and how many questions it can give that are solvable by composition.

A question (start entity, relation chain) is solvable by composing taught facts hop by hop, with
no lookahead, by the procedure of library/graph/oracle.py: carry every successor of every held
entity from hop to hop. Chains are counted by the widest set that walk holds (width 1: no hop
branches; wider: the TRACE carries sets), among walks that form a tree (no entity reached twice)
and, with ``merges``, among every walk that never comes back to an entity (two held entities may
share a successor, held once). These counts are the graph's; what ``kgr data`` makes of them (its
leakage, distractor and uniqueness rules reject some) ``kgr kg check`` learns by running it dry
(library/questions/plan.py), which also starts its search of widths at the first these counts allow.

Counting is exact on graphs of the size the product is built for; on a big graph
(``kgr kg check``'s ``--budget``) the long chains are estimated from a random sample of starts,
and the report says which hop lengths were, from how many starts and how precisely
(:func:`chain_counts`, :func:`counting_note`). ``kgr data`` always counts exactly.

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

import math
import random
import shlex
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import networkx as nx

from library.graph.kg import KnowledgeGraph

#: Frontier widths reported and tried by default (wider sets make longer TRACEs to learn).
WIDTHS = (1, 2, 3, 4)

#: Hops tried (one relation applied to one held set) that ``kgr kg check`` spends on counting
#: chains: ~18 s of a 2-core Xeon, so a 50k-entity graph is checked in well under a minute
#: (benchmarks/big_graph.py).
BUDGET = 12_000_000

#: The fewest starts an estimate is drawn from, however slowly each is counted: fewer give
#: no interval worth printing.
MIN_SAMPLE = 30


@dataclass
class ChainCount:
    """Chains counted by :func:`chain_counts`: exact at every hop length in ``exact_hops``,
    elsewhere estimated from the starts in ``sample`` (drawn uniformly without replacement),
    with ``ci95[h][w]`` the half-width of the estimate's 95% interval. ``counts`` are tree walks;
    ``merging`` (counted where asked) every walk that may merge, with its own ``merging_ci95``."""

    counts: dict[int, Counter]
    starts: int
    sample: int
    exact_hops: list[int]
    ci95: dict[int, dict[int, int]] = field(default_factory=dict)
    merging: dict[int, Counter] | None = None
    merging_ci95: dict[int, dict[int, int]] = field(default_factory=dict)


class _Walker:
    """The depth-first walk behind :func:`chain_counts`: every (start, relation chain) whose
    set walk (library/graph/oracle.py's :func:`step`, :func:`grows_tree` and :func:`grows_set`)
    is no wider than ``cap`` and never comes back to an entity, tallied by hop length and widest
    set, without building a Hop per try: tree walks, and with ``merges`` also walks that merge."""

    def __init__(self, kg: KnowledgeGraph, cap: int, merges: bool = False):
        out: dict[str, dict[str, list[str]]] = defaultdict(dict)
        for e in kg.edges:
            out[e.src].setdefault(e.rel, []).append(e.dst)
        # Successors in kg.successors' order, so a held set's order (and so nothing) changes.
        self.out = {src: {rel: tuple(sorted(dsts)) for rel, dsts in rels.items()} for src, rels in out.items()}
        self.cap = cap
        self.merges = merges

    def walk(self, start: str, depth: int) -> tuple[list[list[list[int]]], list[int]]:
        """``(tallies, work)`` for chains from ``start`` of at most ``depth`` hops: ``tallies[0][h][w]``
        tree chains of ``h`` hops whose widest set holds exactly ``w`` entities (with ``merges``,
        ``tallies[1]`` the same of every walk, merging or not); ``work[h]`` the hops tried from
        ``h``-hop chains (what a deeper count costs)."""
        tally = [[0] * (self.cap + 1) for _ in range(depth + 1)]
        merging = [[0] * (self.cap + 1) for _ in range(depth + 1)]
        work = [0] * (depth + 1)
        out, cap, empty, merges = self.out, self.cap, {}, self.merges

        def extend(held: tuple[str, ...], seen: frozenset[str], hops: int, widest: int, tree: bool) -> None:
            if len(held) == 1:
                rels = out.get(held[0], empty)
            else:  # only a relation some held entity has can give a non-empty hop
                rels = {rel for e in held for rel in out.get(e, empty)}
            work[hops] += len(rels)
            for rel in rels:
                nxt: list[str] = []
                for e in held:
                    dsts = out.get(e, empty).get(rel)
                    if dsts:
                        nxt.extend(dsts)
                # More stated than held is a merge (no tree; a set holds the entity once), and an
                # entity already passed through a cycle (no walk of either kind).
                if not merges:
                    if len(nxt) > cap or len(set(nxt)) != len(nxt) or not seen.isdisjoint(nxt):
                        continue
                    grows = True
                else:
                    grows = tree
                    if len(set(nxt)) != len(nxt):
                        nxt, grows = list(dict.fromkeys(nxt)), False
                    if len(nxt) > cap or not seen.isdisjoint(nxt):
                        continue
                width = max(widest, len(nxt))
                if grows:
                    tally[hops + 1][width] += 1
                merging[hops + 1][width] += 1
                if hops + 1 < depth:
                    extend(tuple(nxt), seen.union(nxt), hops + 1, width, grows)

        if depth:
            extend((start,), frozenset([start]), 0, 1, True)
        return ([tally, merging] if merges else [tally]), work


def chain_counts(kg: KnowledgeGraph, max_hops: int, widths: Sequence[int] = WIDTHS, *, budget: int | None = None,
                 seed: int = 0, progress: Callable[[int], None] | None = None, merges: bool = False) -> ChainCount:
    """Count (start, relation chain) pairs as :func:`count_chains` does, within ``budget`` hops
    tried (None or 0: no limit, always exact); with ``merges``, walks that merge too (``merging``).

    Starts are walked in a random order (``seed``), so those walked at any point are a uniform
    sample. Once half the budget is spent, if walking every start would overrun it, the deepest
    hop length whose exact count over the starts left still fits is fixed; sampling goes on
    while it leaves room for that, then the starts left are walked to that depth only. Longer
    chains are estimated from the sample (starts x the sample's mean), with a 95% interval from
    its variance (finite-population corrected). ``progress(n)`` is told of every ``n`` hops tried."""
    cap = max(widths)
    walker = _Walker(kg, cap, merges)
    rules = 2 if merges else 1  # tree walks, and walks that may merge
    order = sorted(kg.entities)
    random.Random(seed).shuffle(order)
    total, sample = len(order), 0
    tallies = [[[0] * (cap + 1) for _ in range(max_hops + 1)] for _ in range(rules)]
    squares = [[[0] * (cap + 1) for _ in range(max_hops + 1)] for _ in range(rules)]  # per width <= w
    work_by_depth = [0] * (max_hops + 1)
    spent = 0
    depth: int | None = None  # how deep the starts not sampled will be counted, once decided

    def cost_to(d: int) -> float:
        """What walking one more start to depth ``d`` costs, by the sample's mean."""
        return sum(work_by_depth[:d]) / sample

    for start in order:
        if budget and sample >= MIN_SAMPLE and spent >= budget / 2:
            if depth is None:  # the deepest exact count of every start that what is left affords
                depth = max(d for d in range(max_hops + 1) if spent + cost_to(d) * (total - sample) <= budget)
            # Sample on while one more whole walk leaves room to count the rest to that depth.
            if spent + cost_to(max_hops) + cost_to(depth) * (total - sample - 1) > budget:
                break
        ones, work = walker.walk(start, max_hops)
        for one, tally, square in zip(ones, tallies, squares):
            for h in range(1, max_hops + 1):
                running = 0
                for w in range(1, cap + 1):
                    tally[h][w] += one[h][w]
                    running += one[h][w]
                    square[h][w] += running * running
        for h, n in enumerate(work):
            work_by_depth[h] += n
        spent += sum(work)
        sample += 1
        if progress:
            progress(sum(work))
    exact_depth = max_hops if sample == total or depth is None else depth
    # the exact hop lengths' starts not sampled
    rests = [[[0] * (cap + 1) for _ in range(max_hops + 1)] for _ in range(rules)]
    if sample < total:
        for start in order[sample:] if exact_depth else ():
            ones, work = walker.walk(start, exact_depth)
            for one, rest in zip(ones, rests):
                for h in range(1, exact_depth + 1):
                    for w in range(1, cap + 1):
                        rest[h][w] += one[h][w]
            if progress:
                progress(sum(work))
    found = []
    for tally, square, rest in zip(tallies, squares, rests):
        counts: dict[int, Counter] = {h: Counter() for h in range(1, max_hops + 1)}
        ci95: dict[int, dict[int, int]] = {}
        for h in range(1, max_hops + 1):
            running = 0
            for w in range(1, cap + 1):
                running += tally[h][w] + rest[h][w]
                cum = running
                if h > exact_depth:
                    mean = cum / sample
                    var = (square[h][w] - sample * mean * mean) / (sample - 1) if sample > 1 else float("inf")
                    half = 1.96 * total * math.sqrt(max(var, 0.0) * (1 - sample / total) / sample)
                    ci95.setdefault(h, {})[w] = int(math.ceil(half)) if math.isfinite(half) else total
                    cum = round(mean * total)
                if w in widths and cum:
                    counts[h][w] = int(cum)
        found.append((counts, ci95))
    (counts, ci95), merging = found[0], (found[1] if merges else (None, {}))
    return ChainCount(counts=counts, starts=total, sample=sample, exact_hops=list(range(1, exact_depth + 1)),
                      ci95=ci95, merging=merging[0], merging_ci95=merging[1])


def count_chains(kg: KnowledgeGraph, max_hops: int, widths: Sequence[int] = WIDTHS,
                 merges: bool = False) -> dict[int, Counter]:
    """``{hops: Counter(width -> n)}``: (start, relation chain) pairs whose walk
    (library/graph/oracle.py) is a tree (at width 1: a simple path), or with ``merges`` any walk
    that never comes back to an entity, never holding more than ``w`` entities, for each ``w`` in
    ``widths`` (cumulative: a width-1 chain also counts at width 2). Always exact (``kgr data``
    starts its search by it); see :func:`chain_counts` for a count within a budget."""
    counted = chain_counts(kg, max_hops, widths, merges=merges)
    return counted.merging if merges and counted.merging is not None else counted.counts


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


def check_graph(kg: KnowledgeGraph, *, max_hops: int = 5, widths: Sequence[int] = WIDTHS, budget: int | None = None,
                seed: int = 0, progress: Callable[[int], None] | None = None, merges: bool = True) -> dict[str, Any]:
    """The figures ``kgr kg check`` prints (JSON-ready). Chains are counted exactly unless a
    ``budget`` is given (:func:`chain_counts`); ``report["counting"]`` says which hop lengths
    were estimated, from how many starts, and each estimate's 95% interval (``ci95``).
    ``chains`` counts tree walks; with ``merges``, ``chains_merging`` counts every walk that
    never comes back to an entity (``ci95_merging`` its intervals)."""
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
    counted = chain_counts(kg, max_hops, widths, budget=budget, seed=seed, progress=progress, merges=merges)
    chains = counted.counts
    merging = {} if counted.merging is None else {
        "chains_merging": {str(h): {str(w): counted.merging[h][w] for w in widths} for h in counted.merging}}
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
        **merging,
        "counting": {"max_hops": max_hops, "exact_hops": counted.exact_hops, "starts": counted.starts,
                     "sample": counted.sample, "budget": budget or None, "seed": seed,
                     "ci95": {str(h): {str(w): ci[w] for w in widths} for h, ci in counted.ci95.items()},
                     "ci95_merging": {str(h): {str(w): ci[w] for w in widths} for h, ci in counted.merging_ci95.items()}},
    }


def _span(hops: Sequence[int]) -> str:
    """``[4, 5]`` -> ``"4-5"``, ``[3]`` -> ``"3"``: hop lengths as the notes name them."""
    return f"{hops[0]}-{hops[-1]}" if len(hops) > 1 else str(hops[0])


def estimated_hops(report: dict[str, Any]) -> list[int]:
    """The hop lengths whose counts in ``report`` are estimates (none in a report without a
    ``counting`` section: those were always exact)."""
    exact = set(report.get("counting", {}).get("exact_hops", map(int, report["chains"])))
    return [int(h) for h in report["chains"] if int(h) not in exact]


def counting_note(report: dict[str, Any]) -> str:
    """One sentence on how the chains were counted: exactly, or which hop lengths were
    estimated from how large a sample of starts (and how to count them exactly).

    >>> counting_note({"chains": {"1": {}, "2": {}}, "counting": {"exact_hops": [1, 2], "starts": 9, "sample": 9}})
    'chain counts exact: every start walked, 1-2 hops'
    >>> note = counting_note({"chains": {"1": {}, "2": {}, "3": {}}, "source": "my kg.json",
    ...     "counting": {"exact_hops": [1], "starts": 5000, "sample": 120, "max_hops": 3}})
    >>> note[:91]
    'chain counts exact at 1 hop; at 2-3 hops estimated from a sample of 120 of 5,000 starts (± '
    >>> note[note.index("`"):]
    "`kgr kg check 'my kg.json' --max-hops 3 --budget 0` counts them exactly, however long it takes"
    """
    counting = report.get("counting", {})
    hops = sorted(int(h) for h in report["chains"])
    guessed = estimated_hops(report)
    if not guessed:
        return f"chain counts exact: every start walked, {_span(hops)} hop{'s' if hops[-1] > 1 else ''}"
    exact = [h for h in hops if h not in guessed]
    head = "chain counts " + (f"exact at {_span(exact)} hop{'s' if exact[-1] > 1 else ''}; " if exact else "") + "at "
    head += f"{_span(guessed)} hop{'s' if guessed[-1] > 1 else ''}"
    return (f"{head} estimated from a sample of {counting['sample']:,} of {counting['starts']:,} "
            f"starts (± a 95% interval); `kgr kg check {shlex.quote(str(report.get('source', 'KG')))} --max-hops "
            f"{counting['max_hops']} --budget 0` counts them exactly, however long it takes")


def recommend(report: dict[str, Any], *, n_eval: int, n_train_hard: int, n_dev: int,
              eval_hops: Iterable[int] = (4, 5)) -> list[str]:
    """What the counts alone say of this graph, in plain sentences: how it branches, and whether
    ``kgr data``'s defaults may fit, at which width (tree walks). ``kgr kg check`` keeps only the
    first sentence where it runs ``kgr data`` dry; the rest is its word on a graph too big to run
    it within the budget. Hop lengths the report did not count (``--max-hops`` below them) are
    never judged, and estimated counts are said to be."""
    eval_hops = list(eval_hops)
    per_hop = -(-(n_eval + n_train_hard + n_dev) // len(eval_hops))  # held-out questions per hop length
    source = shlex.quote(str(report["source"]))  # pasted into a shell: a path with spaces stays one word
    lines = []
    if report["functional_share"] == 1.0:
        lines.append("every (entity, relation) has one successor: the TRACE holds one entity a hop")
    else:
        lines.append(f"{report['functional_share']:.0%} of (entity, relation) groups have one successor "
                     f"(mean fan-out {report['mean_fanout']}): where a hop branches the TRACE carries every "
                     "successor to the next hop, and the graph prunes the branches that lead nowhere")
    hops_text = "/".join(map(str, eval_hops))
    counted = sorted(int(h) for h in report["chains"])
    if any(h not in counted for h in eval_hops):
        lines.append(f"{hops_text}-hop chains, which the held-out splits (eval, train_hard, dev) are made of, were not "
                     f"counted (--max-hops {max(counted, default=0)}): run `kgr kg check {source} --max-hops "
                     f"{max(eval_hops)}` to see whether the graph gives {per_hop} a hop length")
        return lines
    guessed = [h for h in eval_hops if h in estimated_hops(report)]
    ci95 = report.get("counting", {}).get("ci95", {})

    def have(h: int, w: int) -> str:
        n = report["chains"].get(str(h), {}).get(str(w), 0)
        return f"~{n} ±{ci95[str(h)][str(w)]}" if h in guessed else str(n)

    width = smallest_width(report, per_hop, eval_hops)
    if width is not None:
        short = [h for h in guessed if report["chains"][str(h)][str(width)] - ci95[str(h)][str(width)] < per_hop]
        enough = (f"probably enough {hops_text}-hop chains (estimated: " + ", ".join(
            f"{have(h, width)} at {h} hops" for h in eval_hops) + "; the interval reaches below the need)") if short \
            else f"enough {hops_text}-hop chains" + (" (estimated)" if guessed else "")
        lines.append(f"{enough} for the default held-out splits ({per_hop} a hop length) "
                     f"carrying at most {width} entit{'y' if width == 1 else 'ies'} a hop: run "
                     f"`kgr data --kg {source}`" + ("" if width == 1 else f" (it picks --max-width {width})"))
    else:
        widest = max(int(w) for w in next(iter(report["chains"].values())))
        fits = min(report["chains"].get(str(h), {}).get(str(widest), 0) for h in eval_hops) * len(eval_hops)
        lines.append(f"too few long chains even carrying {widest} entities a hop ("
                     + ", ".join(f"{have(h, widest)} at {h} hops" for h in eval_hops)
                     + (" estimated" if guessed else "") + f"; {per_hop} a hop length "
                     f"needed for --n-eval {n_eval}, --n-train-hard {n_train_hard}, --n-dev {n_dev}): ask for at "
                     f"most ~{fits // 2} held-out questions in all (smaller --n-eval, --n-train-hard, --n-dev), "
                     "or give the graph more edges between its relations' types")
    return lines
