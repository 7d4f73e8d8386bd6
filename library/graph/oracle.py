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
the whole KG is a tree no wider than the width it was given (:func:`composable`).

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
from typing import Any, Callable, Iterable, Mapping, Sequence

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


def tree_width(start: str, hops: Sequence[Hop]) -> int | None:
    """The most entities the walk holds at once, or None where it is not a clean tree: it went
    stuck, or it reaches an entity twice (a merge of two branches, or a revisit), which would
    make a TRACE name that entity more than twice and give the answer more than one path."""
    seen = {start}
    widest = 1
    for hop in hops:
        if not grows_tree(hop, seen):
            return None
        seen.update(hop.held)
        widest = max(widest, len(hop.held))
    return widest


def grows_tree(hop: Hop, seen: Iterable[str]) -> bool:
    """Whether ``hop`` holds something, reaches no entity twice and none of ``seen``."""
    held = hop.held
    return bool(held) and hop.stated == len(held) and not set(seen).intersection(held)


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


def composable(kg: Any, path: Any, max_width: int = 1) -> bool:
    """Whether ``path``'s question is solvable by the procedure with every KG fact taught: the walk
    from its start along its chain is a tree (no entity reached twice) that never holds more than
    ``max_width`` entities, and it ends holding ``path``'s end. ``max_width=1``: no branching hop.

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
    width = tree_width(start, hops) if len(hops) == len(chain) else None
    return width is not None and width <= max_width and path.entities[-1] in hops[-1].held


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
