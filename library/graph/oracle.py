"""The oracle: how well could a solver do that knows exactly the taught facts and follows the trace?

The reference TRACE demonstrates one procedure: start at the question's start entity and, for
each relation of the chain in order, state the successor of the current entity under that
relation ("A is caused by B; B leads to C; ..."), then answer with the option that names the
last entity. The oracle executes that procedure with *only* the facts a training set teaches,
with no lookahead and no use of the options until the end:

- a hop whose current entity has exactly one taught successor for the relation is followed;
- a hop with no taught successor, or several (a branching hop: which one leads to an option
  is only visible by looking ahead), stops the walk, and the question counts as failed;
- the last entity must be one of the options.

If the oracle fails on a split, no model trained on those facts can solve it by composition:
the measurement behind the functional KG (docs/KG.md; the first version's eval had a branching
hop on 149 of 150 chains, and this oracle scored under 50% on it).

>>> from library.graph.kg import KnowledgeGraph
>>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
...     "entities": [{"id": "s", "label": "disk full", "type": "symptom"},
...                  {"id": "c", "label": "unrotated logs", "type": "cause"},
...                  {"id": "f", "label": "enable logrotate", "type": "fix"}],
...     "relations": [{"id": "caused_by", "label": "is caused by"}, {"id": "fixed_by", "label": "is fixed by"}],
...     "edges": [{"src": "s", "rel": "caused_by", "dst": "c"}, {"src": "c", "rel": "fixed_by", "dst": "f"}]})
>>> facts = taught_facts(kg.edges)
>>> walk(facts, "s", ["caused_by", "fixed_by"])
'f'
>>> walk(taught_facts(kg.edges[:1]), "s", ["caused_by", "fixed_by"]) is None   # second fact never taught
True
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Mapping, Sequence

#: fact set name -> which facts count as taught (see :func:`oracle_report`)
FACT_SETS = ("train", "kg")


def taught_facts(edges: Iterable[Any]) -> dict[tuple[str, str], set[str]]:
    """``(src, rel) -> {dst, ...}`` from edges (objects with src/rel/dst, or 3-tuples)."""
    facts: dict[tuple[str, str], set[str]] = defaultdict(set)
    for e in edges:
        src, rel, dst = (e.src, e.rel, e.dst) if hasattr(e, "src") else e
        facts[(src, rel)].add(dst)
    return dict(facts)


def walk(facts: Mapping[tuple[str, str], set[str]], start: str, chain: Sequence[str]) -> str | None:
    """The entity the trace procedure reaches, or None where a hop has no single taught successor."""
    current = start
    for rel in chain:
        successors = facts.get((current, rel), ())
        if len(successors) != 1:
            return None
        (current,) = successors
    return current


def composable(kg: Any, path: Any) -> bool:
    """Whether the trace procedure reaches ``path``'s end with every KG fact taught: every hop's
    entity has exactly one successor under its relation (no branching hop on the way).

    >>> from library.graph.kg import KnowledgeGraph
    >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
    ...     "entities": [{"id": i, "label": i.lower(), "type": "t"} for i in "ABC"],
    ...     "relations": [{"id": "r", "label": "leads to"}],
    ...     "edges": [{"src": "A", "rel": "r", "dst": "B"}, {"src": "A", "rel": "r", "dst": "C"}]})
    >>> composable(kg, kg.path_from_entities(["A", "B"], ["r"]))
    False
    """
    return all(len(kg.successors(e.src, e.rel)) == 1 for e in path.edges)


def oracle_answer(facts: Mapping[tuple[str, str], set[str]], question: Any) -> str | None:
    """The letter the oracle answers ``question`` with, or None when the procedure gets stuck
    or ends on an entity that is not an option."""
    end = walk(facts, question.meta["start"], question.meta["chain"])
    for letter, entity in question.meta["option_ids"].items():
        if entity == end:
            return letter
    return None


def oracle_accuracy(facts: Mapping[tuple[str, str], set[str]], questions: Sequence[Any]) -> float:
    if not questions:
        return 0.0
    return sum(oracle_answer(facts, q) == q.answer_star for q in questions) / len(questions)


def oracle_report(kg: Any, splits: Mapping[str, Sequence[Any]]) -> dict[str, dict[str, float]]:
    """Oracle accuracy for every split under two taught-fact sets (rounded, for stats.json):

    - ``train``: only the edges on train.jsonl's gold paths (what question SFT demonstrates);
    - ``kg``: every KG fact (what the knowledge stage of the pipeline teaches, one
      "entity relation successor" line per fact; no eval *path* is ever taught whole).
    """
    train_edges = [e for q in splits.get("train", ()) for e in q.path_star.edges]
    fact_sets = {"train": taught_facts(train_edges), "kg": taught_facts(kg.edges)}
    return {name: {split: round(oracle_accuracy(facts, qs), 4) for split, qs in splits.items()}
            for name, facts in fact_sets.items()}
