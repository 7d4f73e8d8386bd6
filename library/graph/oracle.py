"""The reasoning procedure, and the oracle that executes it: how well could a solver do that
knows exactly the taught facts and follows the trace?

The procedure (demonstrated by the reference TRACE, library/questions/wording.py) carries a *set*
of entities from hop to hop: start with the question's start entity; for each relation of the
chain in order, state every successor of every entity held under that relation ("a leads to x
and y; b leads to z"), and hold those successors next; at the end answer with the one option
in the set held. On a functional graph (one successor per entity and relation) the set always
holds one entity and the procedure is the plain walk "A is caused by B; B leads to C; ...". No
step looks ahead: which branch leads to an option is never chosen, every branch is carried
until the graph prunes it (a held entity with no successor under the next relation drops out).

:func:`set_walk` is that procedure over any ``successors(entity, relation)`` function; the
oracle runs it with *only* the facts a training set teaches, the reward reads a TRACE against
the edges it states (:func:`walk_edges`), and the generator keeps only chains whose walk over
the whole KG is no wider than the width it was given and never comes back to an entity it passed
through (:func:`composable`; where ``merges`` is off, also a tree: no two held entities share a
successor).

If the oracle fails on a split, no model trained on those facts can solve it by composition:
the measurement behind the functional KG (docs/KG.md) and behind ``kgr data``'s refusal to
write splits it cannot solve.

>>> from library.graph.kg import KnowledgeGraph
>>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
...     "entities": [{"id": i, "label": i.lower(), "type": "t"} for i in "SABXYZ"],
...     "relations": [{"id": "r", "label": "leads to"}, {"id": "q", "label": "is fixed by"}],
...     "edges": [{"src": "S", "rel": "r", "dst": "A"}, {"src": "S", "rel": "r", "dst": "B"},
...               {"src": "A", "rel": "q", "dst": "X"}, {"src": "B", "rel": "q", "dst": "Y"},
...               {"src": "B", "rel": "q", "dst": "Z"}]})
>>> hops = set_walk(kg.successors, "S", ["r", "q"])
>>> [(h.rel, h.clauses) for h in hops]
[('r', (('S', ('A', 'B')),)), ('q', (('A', ('X',)), ('B', ('Y', 'Z'))))]
>>> hops[-1].held, tree_width("S", hops)
(('X', 'Y', 'Z'), 3)
>>> walk(taught_facts(kg.edges), "S", ["r", "q"]), walk(taught_facts(kg.edges[:2]), "S", ["r", "q"])
(('X', 'Y', 'Z'), ())
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

#: fact set name -> which facts count as taught (see :func:`oracle_report`)
FACT_SETS = ("train", "kg")

Successors = Callable[[str, str], Sequence[str]]


@dataclass(frozen=True)
class Hop:
    """One hop of the procedure: the relation, and for every held entity that has successors
    under it, ``(entity, its successors)`` in order: the clauses a TRACE states at this hop."""

    rel: str
    clauses: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def held(self) -> tuple[str, ...]:
        """The entities held after this hop, in the order the clauses state them, each once."""
        return tuple(dict.fromkeys(d for _, dsts in self.clauses for d in dsts))

    @property
    def stated(self) -> int:
        """How many successors the clauses state (more than ``len(held)`` where branches merge)."""
        return sum(len(dsts) for _, dsts in self.clauses)


def step(successors: Successors, held: Sequence[str], rel: str) -> Hop:
    """Map the held entities through ``rel``: one hop of the procedure."""
    return Hop(rel, tuple((e, tuple(s)) for e in held if (s := successors(e, rel))))


def set_walk(successors: Successors, start: str, chain: Sequence[str]) -> list[Hop]:
    """The procedure's hops from ``start`` along ``chain``; shorter than the chain where the held
    set runs empty (no taught successor for any held entity: the walk is stuck)."""
    hops: list[Hop] = []
    held: Sequence[str] = (start,)
    for rel in chain:
        hop = step(successors, held, rel)
        hops.append(hop)
        held = hop.held
        if not held:
            break
    return hops


def walk_width(start: str, hops: Sequence[Hop], merges: bool = False) -> int | None:
    """The most entities the walk holds at once, or None where the procedure cannot answer by it:
    it went stuck, or it comes back to an entity it already passed through (a cycle: the set would
    hold that entity at two hops). Where two held entities share a successor (a merge) the set
    holds it once and the TRACE states both facts; ``merges=False`` refuses that walk too (a tree:
    every entity named at most twice, one path to the answer).

    >>> merge = [Hop("r", (("S", ("A", "B")),)), Hop("q", (("A", ("X",)), ("B", ("X",))))]
    >>> walk_width("S", merge), walk_width("S", merge, merges=True)
    (None, 2)
    >>> walk_width("S", merge + [Hop("p", (("X", ("S",)),))], merges=True)   # back to the start
    """
    seen = {start}
    widest = 1
    for hop in hops:
        if not (grows_set(hop, seen) if merges else grows_tree(hop, seen)):
            return None
        seen.update(hop.held)
        widest = max(widest, len(hop.held))
    return widest


def tree_width(start: str, hops: Sequence[Hop]) -> int | None:
    """:func:`walk_width` of a tree: None where the walk goes stuck, merges or comes back."""
    return walk_width(start, hops, merges=False)


def merged(hops: Iterable[Hop]) -> bool:
    """Whether some hop of the walk states more successors than it holds: two held entities
    shared one (the TRACE names it in both clauses; the set holds it once)."""
    return any(hop.stated > len(hop.held) for hop in hops)


def grows_set(hop: Hop, seen: Iterable[str]) -> bool:
    """Whether ``hop`` holds something and none of ``seen`` (the entities the walk passed through)."""
    held = hop.held
    return bool(held) and not set(seen).intersection(held)


def grows_tree(hop: Hop, seen: Iterable[str]) -> bool:
    """Whether ``hop`` holds something, reaches no entity twice and none of ``seen``."""
    return hop.stated == len(hop.held) and grows_set(hop, seen)


def walk_claims(hops: Iterable[Hop]) -> list[tuple[str, str, str, int]]:
    """Every ``(src, rel, dst, hop)`` the procedure states, in TRACE order, hop 1-based.

    >>> walk_claims([Hop("r", (("S", ("A", "B")),)), Hop("q", (("A", ("X",)),))])
    [('S', 'r', 'A', 1), ('S', 'r', 'B', 1), ('A', 'q', 'X', 2)]
    """
    return [(src, hop.rel, dst, i) for i, hop in enumerate(hops, start=1) for src, dsts in hop.clauses for dst in dsts]


def walk_edges(hops: Iterable[Hop]) -> list[tuple[str, str, str]]:
    """Every ``(src, rel, dst)`` the procedure states, in TRACE order (:func:`walk_claims`
    without the hop).

    >>> walk_edges([Hop("r", (("S", ("A", "B")),))])
    [('S', 'r', 'A'), ('S', 'r', 'B')]
    """
    return [(src, rel, dst) for src, rel, dst, _ in walk_claims(hops)]


def fact_successors(facts: Mapping[tuple[str, str], set[str]]) -> Successors:
    """``successors`` over a taught-fact table, sorted like :meth:`KnowledgeGraph.successors`."""
    return lambda entity, rel: sorted(facts.get((entity, rel), ()))


def taught_facts(edges: Iterable[Any]) -> dict[tuple[str, str], set[str]]:
    """``(src, rel) -> {dst, ...}`` from edges (objects with src/rel/dst, or 3-tuples)."""
    facts: dict[tuple[str, str], set[str]] = defaultdict(set)
    for e in edges:
        src, rel, dst = (e.src, e.rel, e.dst) if hasattr(e, "src") else e
        facts[(src, rel)].add(dst)
    return dict(facts)


def walk(facts: Mapping[tuple[str, str], set[str]], start: str, chain: Sequence[str]) -> tuple[str, ...]:
    """The set the procedure holds at the end of ``chain`` knowing only ``facts`` (empty: stuck)."""
    hops = set_walk(fact_successors(facts), start, chain)
    return hops[-1].held if len(hops) == len(chain) else ()


def composable(kg: Any, path: Any, max_width: int = 1, merges: bool = False) -> bool:
    """Whether ``path``'s question is solvable by the procedure with every KG fact taught: the walk
    from its start along its chain never holds more than ``max_width`` entities, never comes back to
    an entity it passed through, merges nowhere unless ``merges`` (:func:`walk_width`), and it ends
    holding ``path``'s end. ``max_width=1``: no branching hop.

    >>> from library.graph.kg import KnowledgeGraph
    >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
    ...     "entities": [{"id": i, "label": i.lower(), "type": "t"} for i in "ABC"],
    ...     "relations": [{"id": "r", "label": "leads to"}],
    ...     "edges": [{"src": "A", "rel": "r", "dst": "B"}, {"src": "A", "rel": "r", "dst": "C"}]})
    >>> path = kg.path_from_entities(["A", "B"], ["r"])
    >>> composable(kg, path), composable(kg, path, max_width=2)
    (False, True)
    """
    start, chain = path.entities[0], [e.rel for e in path.edges]
    hops = set_walk(kg.successors, start, chain)
    width = walk_width(start, hops, merges) if len(hops) == len(chain) else None
    return width is not None and width <= max_width and path.entities[-1] in hops[-1].held


def path_through(start: str, hops: Sequence[Hop], end: str) -> list[str]:
    """The entities of one path the walk took from ``start`` to ``end`` (held at the last hop):
    back from ``end``, each step to the first clause that stated it. Where branches merged, the
    walk reached ``end`` more than one way and this is the first in TRACE order.

    >>> merge = [Hop("r", (("S", ("A", "B")),)), Hop("q", (("A", ("X",)), ("B", ("X",))))]
    >>> path_through("S", merge, "X")
    ['S', 'A', 'X']
    """
    path = [end]
    for hop in reversed(hops):
        path.append(next(src for src, dsts in hop.clauses if path[-1] in dsts))
    if path[-1] != start:
        raise ValueError(f"{end} is not reached from {start} by this walk")
    return path[::-1]


def admissible_walks(successors: Successors, relations: Sequence[str], start: str, length: int, max_width: int,
                     merges: bool) -> Iterator[tuple[tuple[str, ...], list[Hop]]]:
    """Every ``(chain, hops)`` of ``length`` relations from ``start`` whose walk the procedure
    answers by (:func:`walk_width` no more than ``max_width``), depth first in ``relations``' order:
    the candidates ``kgr data`` draws from where random paths do not find enough.

    >>> from library.graph.kg import KnowledgeGraph
    >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
    ...     "entities": [{"id": i, "label": i.lower(), "type": "t"} for i in "SABX"],
    ...     "relations": [{"id": "r", "label": "leads to"}, {"id": "q", "label": "is fixed by"}],
    ...     "edges": [{"src": "S", "rel": "r", "dst": "A"}, {"src": "S", "rel": "r", "dst": "B"},
    ...               {"src": "A", "rel": "q", "dst": "X"}, {"src": "B", "rel": "q", "dst": "X"},
    ...               {"src": "X", "rel": "r", "dst": "S"}]})
    >>> [chain for chain, _ in admissible_walks(kg.successors, ["q", "r"], "S", 2, 2, merges=True)]
    [('r', 'q')]
    >>> list(admissible_walks(kg.successors, ["q", "r"], "S", 2, 2, merges=False))
    []
    """
    def extend(held: Sequence[str], seen: frozenset[str], hops: list[Hop]) -> Iterator[tuple[tuple[str, ...], list[Hop]]]:
        for rel in relations:
            hop = step(successors, held, rel)
            if len(hop.held) > max_width or not (grows_set(hop, seen) if merges else grows_tree(hop, seen)):
                continue
            if len(hops) + 1 == length:
                yield tuple(h.rel for h in hops) + (rel,), hops + [hop]
            else:
                yield from extend(hop.held, seen.union(hop.held), hops + [hop])

    if length > 0:
        yield from extend((start,), frozenset([start]), [])


def question_walk(kg: Any, question: Any) -> list[Hop]:
    """The procedure's hops for a question over the whole KG (what its reference TRACE states)."""
    path = question.path_star
    return set_walk(kg.successors, path.entities[0], [e.rel for e in path.edges])


def oracle_answer(facts: Mapping[tuple[str, str], set[str]], question: Any) -> str | None:
    """The letter the oracle answers ``question`` with: the one option in the set the procedure
    ends holding, or None when it gets stuck or holds no option, or several."""
    held = set(walk(facts, question.meta["start"], question.meta["chain"]))
    letters = [letter for letter, entity in question.meta["option_ids"].items() if entity in held]
    return letters[0] if len(letters) == 1 else None


def oracle_accuracy(facts: Mapping[tuple[str, str], set[str]], questions: Sequence[Any]) -> float:
    if not questions:
        return 0.0
    return sum(oracle_answer(facts, q) == q.answer_star for q in questions) / len(questions)


def oracle_report(kg: Any, splits: Mapping[str, Sequence[Any]]) -> dict[str, dict[str, float]]:
    """Oracle accuracy for every split under two taught-fact sets (rounded, for stats.json):

    - ``train``: only the edges on train.jsonl's gold paths (what question SFT demonstrates);
    - ``kg``: every KG fact (what the knowledge stage of the pipeline teaches, one
      "entity relation successors" line per fact group; no eval *path* is ever taught whole).
    """
    train_edges = [e for q in splits.get("train", ()) for e in q.path_star.edges]
    fact_sets = {"train": taught_facts(train_edges), "kg": taught_facts(kg.edges)}
    return {name: {split: round(oracle_accuracy(facts, qs), 4) for split, qs in splits.items()}
            for name, facts in fact_sets.items()}
