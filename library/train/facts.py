"""The KG's single facts as training rows: the knowledge stage of SFT.

Composition needs knowledge: a 4-hop chain is answered only if all four facts are recalled, and
1-3-hop questions alone taught none of them (docs/FINDINGS.md). :func:`knowledge_rows` turns
every KG fact into the exact clause a TRACE uses (``"<src label> <relation label> [K] <dst
label> [K]."`` with a random tag, the same words as the first clause of
:func:`library.questions.wording.reference_trace`), several facts per row in a shuffled order,
inside the assistant turn of a fixed short prompt. Several facts per row is packing at the data
level: the chat-template overhead is paid once per row instead of once per fact. Single facts
only: no eval path is ever taught whole (a fact is one edge; eval paths are 4-5 edges). Whether
they were learned is measured by library/evaluation/recall.py.

>>> from library.graph.kg import KnowledgeGraph
>>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
...     "entities": [{"id": "s", "label": "disk full", "type": "symptom"},
...                  {"id": "c", "label": "unrotated logs", "type": "cause"}],
...     "relations": [{"id": "caused_by", "label": "is caused by"}],
...     "edges": [{"src": "s", "rel": "caused_by", "dst": "c"}]})
>>> fact_clause(kg, "s", "caused_by", "c", "K")
'disk full is caused by [K] unrotated logs [K]'
>>> fact_groups(kg, kg.edges)
[('s', 'caused_by', ('c',))]
"""

from __future__ import annotations

import random
from typing import Any

from library.contracts import BLANK_TAG_POOL
from library.questions.wording import KNOWLEDGE_PROMPT, fact_clause, fact_groups


def knowledge_rows(kg: Any, *, epochs: int, facts_per_row: int, seed: int) -> list[tuple[str, str]]:
    """``(user_text, completion)`` pairs teaching every KG fact ``epochs`` times.

    A fact group (an entity's successors under one relation) is written as the TRACE clause that uses it (:func:`fact_clause`, under a fresh
    random tag each time: the tag carries no information, so the model learns to recall the
    object past it). Each epoch shuffles the facts (seeded) and cuts them into rows of
    ``facts_per_row`` newline-separated clauses under :data:`KNOWLEDGE_PROMPT`, so a fact
    meets different neighbours every epoch and the chat-template overhead is paid once a row.

    Facts are recalled best in the context they were learned in (docs/FINDINGS.md: 86% after
    this prompt, 52% for the same clause inside a question's TRACE), so the recipe's question
    rows, not these, are what teaches recall inside a TRACE; these rows are the cheap way
    (~13 tokens a fact against ~150 for a question row) to reach every fact of the KG.
    Measured worse and removed: the same facts as packed 1-hop questions, and training paths'
    whole traces as more knowledge lines (docs/FINDINGS.md).

    >>> from library.graph.kg import KnowledgeGraph
    >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
    ...     "entities": [{"id": x, "label": x, "type": "symptom"} for x in "abc"],
    ...     "relations": [{"id": "leads_to", "label": "leads to"}],
    ...     "edges": [{"src": "a", "rel": "leads_to", "dst": "b"}, {"src": "b", "rel": "leads_to", "dst": "c"}]})
    >>> knowledge_rows(kg, epochs=1, facts_per_row=2, seed=0)
    [('State facts.', 'b leads to [J] c [J].\\na leads to [W] b [W].')]
    """
    # One clause per (entity, relation) naming all its successors: the clause a TRACE states at a
    # hop (on a functional graph, one fact a clause).
    groups = fact_groups(kg, kg.edges)
    rng = random.Random(f"{seed}:knowledge")
    rows = []
    for _ in range(epochs):
        order = [f"{fact_clause(kg, src, rel, dsts, rng.choice(BLANK_TAG_POOL))}." for src, rel, dsts in groups]
        rng.shuffle(order)
        for i in range(0, len(order), facts_per_row):
            rows.append((KNOWLEDGE_PROMPT, "\n".join(order[i:i + facts_per_row])))
    return rows


