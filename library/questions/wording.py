"""The wording of a question: its text, the prompt around it and the reference TRACE.

A question names the start entity and the whole relation chain, with a tagged blank for
every entity on the way, so exactly one option is reachable (docs/CONTRACTS.md).

>>> from library.graph.kg import KnowledgeGraph
>>> kg = KnowledgeGraph.from_dict({
...     "version": "1", "domain": "toy",
...     "entities": [{"id": "S", "label": "TLS handshake error", "type": "symptom"},
...                  {"id": "C", "label": "clock skew", "type": "cause"},
...                  {"id": "F", "label": "sync clocks with NTP", "type": "fix"}],
...     "relations": [{"id": "caused_by", "label": "is caused by"},
...                   {"id": "fixed_by", "label": "is fixed by"}],
...     "edges": [{"src": "S", "rel": "caused_by", "dst": "C"},
...               {"src": "C", "rel": "fixed_by", "dst": "F"}]})
>>> path = kg.path_from_entities(["S", "C", "F"], ["caused_by", "fixed_by"])
>>> question_text(kg, "S", ["caused_by", "fixed_by"])
'Start at TLS handshake error. It is caused by [L], which is fixed by [?]. (2 steps)'
>>> reference_trace(kg, path)
'TLS handshake error is caused by [L] clock skew [L], which is fixed by [?]: clock skew is fixed by [?] sync clocks with NTP.'

Where a hop branches, the TRACE carries every successor (library/graph/oracle.py) and ends by
naming the one it answers with:

>>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "toy",
...     "entities": [{"id": i, "label": i, "type": "t"} for i in ("flour", "bread", "pasta", "oven", "pot")],
...     "relations": [{"id": "makes", "label": "makes"}, {"id": "cooked_in", "label": "is cooked in"}],
...     "edges": [{"src": "flour", "rel": "makes", "dst": "bread"}, {"src": "flour", "rel": "makes", "dst": "pasta"},
...               {"src": "bread", "rel": "cooked_in", "dst": "oven"}, {"src": "pasta", "rel": "cooked_in", "dst": "pot"}]})
>>> reference_trace(kg, kg.path_from_entities(["flour", "pasta", "pot"], ["makes", "cooked_in"]))
'flour makes [Q] bread and pasta [Q], which is cooked in [?]: bread is cooked in [?] oven, pasta is cooked in [?] pot; so pot.'

"""

from __future__ import annotations

import random
import re
from typing import Any, Iterable, Sequence

from library.scoring.answer_format import FORMAT_INSTRUCTIONS, render_completion
from library.contracts import BLANK_TAG_POOL, FINAL_TAG, LETTERS, GoldPath
from library.graph.kg import KnowledgeGraph
from library.graph.oracle import Hop, set_walk
from library.questions.dataset import STEP_ORDERS  # chain | keyed, with what each means
_KEYED_STEP_RE = re.compile(r"\]; \[")


def blank_tags(start: str, chain: Sequence[str]) -> list[str]:
    """The tags of a question's blanks: random capitals for the inner blanks, ``?`` for the last.

    Drawn from a generator seeded by the question's start and chain, so a question's wording
    is a function of its path alone (the demo page reads typed questions back the same way)
    and no tag says where in the chain its blank is.

    >>> blank_tags("s", ["caused_by"])
    ['?']
    >>> len(set(blank_tags("s", ["leads_to"] * 5))), blank_tags("s", ["leads_to"] * 5)[-1]
    (5, '?')
    """
    rng = random.Random("blank-tags:" + start + ":" + ",".join(chain))
    return rng.sample(BLANK_TAG_POOL, len(chain) - 1) + [FINAL_TAG]


def question_text(kg: KnowledgeGraph, start: str, chain: Sequence[str], tags: Sequence[str] | None = None,
                  step_order: str = "chain") -> str:
    """The question: the start entity, then every relation of the chain in order, each blank tagged.

    The step count is stated too, so the question can only be read one way (the public
    attempt named only the first relation, leaving most questions with several answers).
    Every blank carries a tag (:func:`blank_tags`), the last one ``[?]``: chains repeat
    relations ("leads to ..., which leads to ..."), and measured on dev, a model trained on
    1-3 hops that copied untagged relations lost its place on 4-5 hops and never stopped
    (docs/FINDINGS.md). A tag is a unique anchor: the TRACE copies the text after it. ``tags``
    overrides the tags (the knowledge rows state single facts under random tags).

    >>> from library.graph.kg import KnowledgeGraph
    >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
    ...     "entities": [{"id": "s", "label": "disk full", "type": "symptom"}],
    ...     "relations": [{"id": "caused_by", "label": "is caused by"},
    ...                   {"id": "leads_to", "label": "leads to"},
    ...                   {"id": "uses_tool", "label": "uses tool"}], "edges": []})
    >>> question_text(kg, "s", ["caused_by"])
    'Start at disk full. It is caused by [?]. (1 step)'
    >>> question_text(kg, "s", ["caused_by", "leads_to", "uses_tool"])
    'Start at disk full. It is caused by [R], which leads to [Q], which uses tool [?]. (3 steps)'

    ``step_order="keyed"`` writes every step after the first with the tag it starts from, and
    those steps in a shuffled order (seeded by the path, like the tags), so the next step can
    only be found by the tag just written, never by its position (:data:`STEP_ORDERS`):

    >>> question_text(kg, "s", ["leads_to", "caused_by", "uses_tool"], step_order="keyed")
    'Start at disk full. It leads to [Z]; [J] uses tool [?]; [Z] is caused by [J]. (3 steps)'
    """
    tags = blank_tags(start, chain) if tags is None else tags
    steps = f"{len(chain)} step" + ("s" if len(chain) != 1 else "")
    if step_order == "keyed":
        later = keyed_steps(kg, chain, tags)
        random.Random("step-order:" + start + ":" + ",".join(chain)).shuffle(later)
        first = f"It {kg.relation_label(chain[0])} [{tags[0]}]"
        return f"Start at {kg.label(start)}. " + "; ".join([first] + later) + f". ({steps})"
    if step_order != "chain":
        raise ValueError(f"step order {step_order!r}: expected one of {STEP_ORDERS}")
    parts = [f"{kg.relation_label(rel)} [{tag}]" for rel, tag in zip(chain, tags)]
    return f"Start at {kg.label(start)}. It " + ", which ".join(parts) + f". ({steps})"


def keyed_steps(kg: Any, chain: Sequence[str], tags: Sequence[str]) -> list[str]:
    """``"[<tag before>] <relation> [<tag>]"`` for every step after the first, in chain order:
    the keyed wording's steps, which the question shuffles and the TRACE copies in order."""
    return [f"[{tags[i - 1]}] {kg.relation_label(chain[i])} [{tags[i]}]" for i in range(1, len(chain))]


def step_order_of(question: str) -> str:
    """The step order a question text is written in (``"keyed"`` or ``"chain"``).

    >>> step_order_of("Start at a. It leads to [K]; [K] is caused by [?]. (2 steps)")
    'keyed'
    >>> step_order_of("Start at a. It leads to [K], which is caused by [?]. (2 steps)")
    'chain'
    """
    return "keyed" if _KEYED_STEP_RE.search(question) else "chain"


def fact_clause(kg: Any, src: str, rel: str, dst: str | Sequence[str], tag: str) -> str:
    """One hop from one entity in the words of a TRACE clause (the single wording of a fact in
    this project).

    ``"<src> <relation> [tag] <dst> [tag]"``; a hop into the last blank (``tag == "?"``) has no
    closing tag (the TRACE puts the option's letter there). Where the entity has several
    successors under the relation (``dst`` a sequence), the clause names them all, joined by
    "and" (the reward reads each as a claim of its own). The subject is restated next to the
    relation in every clause, exactly as knowledge rows teach the fact: measured on dev with
    ``", which <relation> [tag] <dst>"`` clauses, the same model recalled 84% of the chains'
    facts in this form but only 42% inside the TRACE (docs/FINDINGS.md).

    >>> from library.graph.kg import KnowledgeGraph
    >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
    ...     "entities": [{"id": "s", "label": "disk full", "type": "symptom"},
    ...                  {"id": "c", "label": "unrotated logs", "type": "cause"},
    ...                  {"id": "d", "label": "debug logging", "type": "cause"}],
    ...     "relations": [{"id": "caused_by", "label": "is caused by"}], "edges": []})
    >>> fact_clause(kg, "s", "caused_by", "c", "K"), fact_clause(kg, "s", "caused_by", "c", "?")
    ('disk full is caused by [K] unrotated logs [K]', 'disk full is caused by [?] unrotated logs')
    >>> fact_clause(kg, "s", "caused_by", ["c", "d"], "K")
    'disk full is caused by [K] unrotated logs and debug logging [K]'
    """
    objects = object_list(kg, [dst] if isinstance(dst, str) else dst)
    closing = f" [{tag}]" if tag != FINAL_TAG else ""
    return f"{kg.label(src)} {kg.relation_label(rel)} [{tag}] {objects}{closing}"


def object_list(kg: Any, dsts: Sequence[str]) -> str:
    """The objects of one clause as a TRACE writes them: labels joined by "and" (which the reward
    reads as one list, library/scoring/matching.py)."""
    return " and ".join(kg.label(d) for d in dsts)


def hop_clauses(kg: Any, hop: Hop, tag: str) -> str:
    """Everything a TRACE states at one hop of the procedure (library/graph/oracle.py): one
    :func:`fact_clause` for each held entity with successors, joined by commas."""
    return ", ".join(fact_clause(kg, src, hop.rel, dsts, tag) for src, dsts in hop.clauses)


def reference_trace(kg: KnowledgeGraph, path: GoldPath, step_order: str = "chain") -> str:
    """The canonical trace (docs/CONTRACTS.md): one fact clause per hop, in the question's order.

    Hop 1 is :func:`fact_clause`, ``"<src> <rel> [K] <dst> [K]"``, the exact words the
    knowledge rows teach the fact in. Every later hop first copies the question's next step
    word for word, ``", which <rel> [T]:"`` (the text that follows ``[K]`` in the question), then
    states the fact as a clause of its own, ``" <src> <rel> [T] <dst> [T]"``. The copy makes the
    next step a lookup keyed on the tag just written, wherever the step is: measured on the
    committed runs, a model trained on 1-3 hops that had to find the next relation *after*
    restating an entity followed 139 of 150 4-hop chains but only 48 of 150 5-hop chains, most
    of the rest looping back after the fourth tag (docs/FINDINGS.md). The clause keeps the fact in
    its taught words (a trace of ``", which <rel> [T] <dst>"`` alone halved in-TRACE recall).
    The last hop's tag is ``[?]``, after which the TRACE ends on the answer's letter. The reward
    reads the trace with the tags removed (:data:`library.contracts.BLANK_TAG_RE`); the copied
    step has no object before its colon, so it claims nothing.

    The one wording kept (docs/FINDINGS.md findings 22-28): without the copied steps
    (``"<hop 1 clause>, <hop 2 clause>, ..."``, data/experiments/reference-chain) 600 3-hop training
    rows scored 40% on eval against 57% with them, the rows both profiles train on; copying the
    whole rest of the chain after each tag did worse on dev (46% against 60%, finding 28).

    For a question in the keyed step order (``step_order="keyed"``, :data:`STEP_ORDERS`) the
    copied step is the question's keyed step, ``"; [K] <rel> [T]: "``: after ``<dst> [K]`` the
    TRACE writes ``; [K]`` and copies what follows it in the question, which occurs once.
    """
    chain = [e.rel for e in path.edges]
    tags = blank_tags(path.entities[0], chain)
    if step_order not in STEP_ORDERS:
        raise ValueError(f"step order {step_order!r}: expected one of {STEP_ORDERS}")
    hops = set_walk(kg.successors, path.entities[0], chain)
    if len(hops) != len(chain) or path.entities[-1] not in hops[-1].held:
        raise ValueError(f"the procedure cannot walk {path.entities[0]} along {chain} to {path.entities[-1]} in this KG")
    clauses = [hop_clauses(kg, hop, tag) for hop, tag in zip(hops, tags)]
    # Where the last hop holds several entities, the TRACE names the one it answers with.
    choice = f"; so {kg.label(path.entities[-1])}" if len(hops[-1].held) > 1 else ""
    if step_order == "keyed":
        steps = [""] + ["; " + step + ": " for step in keyed_steps(kg, chain, tags)]
    else:
        steps = [""] + [f", which {kg.relation_label(rel)} [{tag}]: " for rel, tag in zip(chain[1:], tags[1:])]
    return "".join(step + clause for step, clause in zip(steps, clauses)) + choice + "."


def render_prompt(question: str, options: dict[str, str]) -> str:
    """The user message: question, the four options, the answer format. No chat template.

    Each option is written ``<label> (<letter>)``, letter after the label: the reference
    completion ends its TRACE on the answer's label followed by its letter, which the model can
    then copy from the prompt right after the label it has just written. Measured on dev with
    ``A) <label>`` options: after 192 training questions the model answered one constant letter
    for every question (docs/FINDINGS.md), as finding the letter *before* a label is a lookup it
    had not learned.

    >>> print(render_prompt("Start at a. It is caused by what? (1 step)",
    ...                     {"A": "b", "B": "c", "C": "d", "D": "e"}))
    Start at a. It is caused by what? (1 step)
    b (A)
    c (B)
    d (C)
    e (D)
    Answer in two lines:
    TRACE: <the path, naming each entity>
    ANSWER: <letter>
    """
    lines = [question] + [f"{options[letter]} ({letter})" for letter in LETTERS] + [FORMAT_INSTRUCTIONS]
    return "\n".join(lines)


def reference_completion(question: Any) -> str:
    """The gold completion of a question: ``ref.completion`` when the data has it (the
    question builder writes it), else rendered from ``ref.trace`` and the answer letter."""
    ref = question.ref
    completion = getattr(ref, "completion", None)
    if completion is None and isinstance(getattr(ref, "model_extra", None), dict):
        completion = ref.model_extra.get("completion")
    if completion:
        return str(completion).strip()
    return render_completion(ref.trace, question.answer_star)


def fact_groups(kg: Any, edges: Iterable[Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    """``[(src, rel, (dst, ...)), ...]`` sorted, one group per (entity, relation) of ``edges``."""
    groups: dict[tuple[str, str], set[str]] = {}
    for e in edges:
        groups.setdefault((e.src, e.rel), set()).add(e.dst)
    return [(src, rel, tuple(sorted(dsts))) for (src, rel), dsts in sorted(groups.items())]


#: The user turn of a knowledge row. Short: it is paid once per row.
KNOWLEDGE_PROMPT = "State facts."
