"""The KG's single facts as training rows (the knowledge stage of SFT) and fact recall as a metric.

Composition needs knowledge: a 4-hop chain is answered only if all four facts are recalled. The
first version taught facts only through 1-3-hop questions (~1 epoch at lr 2e-4) and the model
learned none of them, so a run could not tell "did not learn the facts" from "cannot compose".
This module separates the two:

- :func:`knowledge_rows` turns every KG fact into the exact clause a TRACE uses
  (``"<src label> <relation label> <dst label>."``, the same words as
  first clause of :func:`library.questions.reference_trace`), several facts per row in a shuffled order, inside
  the assistant turn of a fixed short prompt. Several facts per row is packing at the data level:
  the chat-template overhead (~30 tokens) is paid once per row instead of once per fact. Single
  facts only: no eval path is ever taught whole (a fact is one edge; eval paths are 4-5 edges).
- :func:`fact_recall` measures, for a set of (entity, relation) groups, whether the model's
  greedy continuation of ``"<src label> <relation label>"`` is exactly ``" <dst label>."``.
  It is computed teacher-forced (one forward pass per batch: greedy decoding produces the
  target iff every target token is the argmax after the tokens before it), so it costs seconds.

>>> from library.kg import KnowledgeGraph
>>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
...     "entities": [{"id": "s", "label": "disk full", "type": "symptom"},
...                  {"id": "c", "label": "unrotated logs", "type": "cause"}],
...     "relations": [{"id": "caused_by", "label": "is caused by"}],
...     "edges": [{"src": "s", "rel": "caused_by", "dst": "c"}]})
>>> fact_clause(kg, "s", "caused_by", "c")
'disk full is caused by unrotated logs'
>>> fact_groups(kg, kg.edges)
[('s', 'caused_by', ('c',))]
"""

from __future__ import annotations

import random
from typing import Any, Iterable, Sequence

#: The user turn of a knowledge row. Short: it is paid once per row.
KNOWLEDGE_PROMPT = "State facts."


def fact_clause(kg: Any, src: str, rel: str, dst: str) -> str:
    """One hop in the words of a TRACE clause (the single wording of a fact in this project)."""
    return f"{kg.label(src)} {kg.relation_label(rel)} {kg.label(dst)}"


def fact_groups(kg: Any, edges: Iterable[Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    """``[(src, rel, (dst, ...)), ...]`` sorted, one group per (entity, relation) of ``edges``."""
    groups: dict[tuple[str, str], set[str]] = {}
    for e in edges:
        groups.setdefault((e.src, e.rel), set()).add(e.dst)
    return [(src, rel, tuple(sorted(dsts))) for (src, rel), dsts in sorted(groups.items())]


def knowledge_rows(kg: Any, *, epochs: int, facts_per_row: int, seed: int,
                   path_traces: Sequence[str] = (), path_passes: float = 0.0) -> list[tuple[str, str]]:
    """``(user_text, completion)`` pairs teaching every KG fact ``epochs`` times.

    Each epoch shuffles the facts (seeded) and cuts them into rows of ``facts_per_row``
    newline-separated clauses, so a fact meets different neighbours every epoch.

    ``path_traces`` (the reference traces of training questions, "A is caused by B, which
    leads to C.") and ``path_passes`` add ``round(path_passes * len(path_traces))`` of them as
    more lines: a fact that many training paths use is repeated more, like a word common in a
    corpus, and facts are also seen in the ", which <relation>" context a TRACE recalls them
    in. Only training questions count; the eval split never weights anything.

    >>> from library.kg import KnowledgeGraph
    >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
    ...     "entities": [{"id": x, "label": x, "type": "symptom"} for x in "abc"],
    ...     "relations": [{"id": "leads_to", "label": "leads to"}],
    ...     "edges": [{"src": "a", "rel": "leads_to", "dst": "b"}, {"src": "b", "rel": "leads_to", "dst": "c"}]})
    >>> knowledge_rows(kg, epochs=1, facts_per_row=2, seed=0)
    [('State facts.', 'b leads to c.\\na leads to b.')]
    """
    clauses = sorted(f"{fact_clause(kg, e.src, e.rel, e.dst)}." for e in kg.edges)
    rng = random.Random(f"{seed}:knowledge")
    pool = sorted(path_traces)
    extra = rng.sample(pool * (int(path_passes) + 1), round(path_passes * len(pool))) if pool and path_passes else []
    per_epoch = [extra[i::epochs] for i in range(epochs)] if epochs else [extra]
    rows = []
    for chunk in per_epoch:
        order = (list(clauses) if epochs else []) + chunk
        rng.shuffle(order)
        for i in range(0, len(order), facts_per_row):
            rows.append((KNOWLEDGE_PROMPT, "\n".join(order[i:i + facts_per_row])))
    return rows


def eval_fact_groups(kg: Any, questions: Sequence[Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    """The (entity, relation) groups that the gold paths of ``questions`` use."""
    return fact_groups(kg, [e for q in questions for e in q.path_star.edges])


def fact_recall(model, tokenizer, kg: Any, groups: Sequence[tuple[str, str, tuple[str, ...]]], *,
                batch_size: int = 64) -> dict[str, Any]:
    """Share of ``groups`` whose successor the model recalls exactly, greedy, in a knowledge row.

    The context is the knowledge prompt's assistant turn followed by ``"<src> <relation>"``;
    the target is ``" <dst>."``. With several successors a group counts as recalled when any
    of them is (the functional KG has one). Returns ``{"n", "recalled", "recall", "by_relation"}``.
    """
    import torch

    from library.model import format_prompt

    prefix = format_prompt(tokenizer, KNOWLEDGE_PROMPT)
    items = []  # (group index, context ids, target ids)
    for gi, (src, rel, dsts) in enumerate(groups):
        head = tokenizer(prefix + f"{kg.label(src)} {kg.relation_label(rel)}", add_special_tokens=False).input_ids
        for dst in dsts:
            items.append((gi, head, tokenizer(f" {kg.label(dst)}.", add_special_tokens=False).input_ids))
    hit = [False] * len(groups)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(items), batch_size):
            batch = items[start:start + batch_size]
            width = max(len(h) + len(t) for _, h, t in batch)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, (_, head, tgt) in enumerate(batch):  # right padding: positions stay 0..n-1
                seq = head + tgt
                ids[row, :len(seq)] = torch.tensor(seq)
                mask[row, :len(seq)] = 1
            pred = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)
            for row, (gi, head, tgt) in enumerate(batch):
                got = pred[row, len(head) - 1:len(head) + len(tgt) - 1].tolist()
                hit[gi] = hit[gi] or got == tgt
    if was_training:
        model.train()
    by_rel: dict[str, list[int]] = {}
    for (src, rel, _), ok in zip(groups, hit):
        by_rel.setdefault(rel, [0, 0])
        by_rel[rel][0] += ok
        by_rel[rel][1] += 1
    n = len(groups)
    return {"n": n, "recalled": sum(hit), "recall": round(sum(hit) / n, 4) if n else 0.0,
            "by_relation": {rel: round(k / m, 4) for rel, (k, m) in sorted(by_rel.items())}}
