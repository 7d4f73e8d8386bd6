"""The KG's single facts as training rows (the knowledge stage of SFT) and fact recall as a metric.

Composition needs knowledge: a 4-hop chain is answered only if all four facts are recalled. The
first version taught facts only through 1-3-hop questions (~1 epoch at lr 2e-4) and the model
learned none of them, so a run could not tell "did not learn the facts" from "cannot compose".
This module separates the two:

- :func:`knowledge_rows` turns every KG fact into the exact clause a TRACE uses
  (``"<src label> <relation label> [K] <dst label> [K]."`` with a random tag, the same words as
  first clause of :func:`library.questions.reference_trace`), several facts per row in a shuffled order, inside
  the assistant turn of a fixed short prompt. Several facts per row is packing at the data level:
  the chat-template overhead (~30 tokens) is paid once per row instead of once per fact. Single
  facts only: no eval path is ever taught whole (a fact is one edge; eval paths are 4-5 edges).
- :func:`fact_recall` measures, for a set of (entity, relation) groups, whether the model's
  greedy continuation of ``"<src label> <relation label>"`` is exactly ``" <dst label>."``.
  It is computed teacher-forced (one forward pass per batch: greedy decoding produces the
  target iff every target token is the argmax after the tokens before it), so it costs seconds.

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
from typing import Any, Iterable, Sequence

from library.contracts import BLANK_TAG_POOL
# fact_clause lives with the TRACE wording it belongs to; imported here for the knowledge rows.
from library.questions.wording import blank_tags, fact_clause

def fact_groups(kg: Any, edges: Iterable[Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    """``[(src, rel, (dst, ...)), ...]`` sorted, one group per (entity, relation) of ``edges``."""
    groups: dict[tuple[str, str], set[str]] = {}
    for e in edges:
        groups.setdefault((e.src, e.rel), set()).add(e.dst)
    return [(src, rel, tuple(sorted(dsts))) for (src, rel), dsts in sorted(groups.items())]


#: The user turn of a knowledge row. Short: it is paid once per row.
KNOWLEDGE_PROMPT = "State facts."


def knowledge_rows(kg: Any, *, epochs: int, facts_per_row: int, seed: int,
                   path_traces: Sequence[str] = (), path_passes: float = 0.0) -> list[tuple[str, str]]:
    """``(user_text, completion)`` pairs teaching every KG fact ``epochs`` times.

    A fact is written as the TRACE clause that uses it (:func:`fact_clause`, under a fresh
    random tag each time: the tag carries no information, so the model learns to recall the
    object past it). Each epoch shuffles the facts (seeded) and cuts them into rows of
    ``facts_per_row`` newline-separated clauses under :data:`KNOWLEDGE_PROMPT`, so a fact
    meets different neighbours every epoch and the chat-template overhead is paid once a row.

    Facts are recalled best in the context they were learned in (docs/FINDINGS.md: 86% after
    this prompt, 52% for the same clause inside a question's TRACE), so the recipe's question
    rows, not these, are what teaches recall inside a TRACE; these rows are the cheap way
    (~13 tokens a fact against ~150 for a question row) to reach every fact of the KG.
    Measured worse and removed: the same facts as packed 1-hop questions (docs/FINDINGS.md).

    ``path_traces`` (the reference traces of training questions) and ``path_passes`` add
    ``round(path_passes * len(path_traces))`` of them as more lines: a fact that many training
    paths use is repeated more, like a word common in a corpus. Only training questions count;
    the eval split never weights anything.

    >>> from library.graph.kg import KnowledgeGraph
    >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
    ...     "entities": [{"id": x, "label": x, "type": "symptom"} for x in "abc"],
    ...     "relations": [{"id": "leads_to", "label": "leads to"}],
    ...     "edges": [{"src": "a", "rel": "leads_to", "dst": "b"}, {"src": "b", "rel": "leads_to", "dst": "c"}]})
    >>> knowledge_rows(kg, epochs=1, facts_per_row=2, seed=0)
    [('State facts.', 'b leads to [J] c [J].\\na leads to [W] b [W].')]
    """
    edges = sorted((e.src, e.rel, e.dst) for e in kg.edges)
    rng = random.Random(f"{seed}:knowledge")
    pool = sorted(path_traces)
    extra = rng.sample(pool * (int(path_passes) + 1), round(path_passes * len(pool))) if pool and path_passes else []
    per_epoch = [extra[i::epochs] for i in range(epochs)] if epochs else [extra]
    rows = []
    for chunk in per_epoch:
        order = [f"{fact_clause(kg, src, rel, dst, rng.choice(BLANK_TAG_POOL))}." for src, rel, dst in edges] if epochs else []
        order += chunk
        rng.shuffle(order)
        for i in range(0, len(order), facts_per_row):
            rows.append((KNOWLEDGE_PROMPT, "\n".join(order[i:i + facts_per_row])))
    return rows


def eval_fact_groups(kg: Any, questions: Sequence[Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    """The (entity, relation) groups that the gold paths of ``questions`` use."""
    return fact_groups(kg, [e for q in questions for e in q.path_star.edges])


def _teacher_forced_argmax(model, tokenizer, rows: Sequence[tuple[list[int], list[tuple[int, int]]]],
                           batch_size: int) -> list[list[list[int]]]:
    """Greedy next-token predictions at chosen positions, one forward pass per batch.

    ``rows``: ``(token ids, spans)``; a span ``(start, length)`` asks for the argmax at
    positions ``start .. start + length - 1`` (each predicting the token after it). Returns, per
    row, one list of predicted ids per span. Only those positions go through the LM head
    (``logits_to_keep`` as a boolean mask): a full ``(batch, length, 49,152)`` logits tensor
    was ~0.8 GB a batch and the head ~21% of the forward's FLOPs, for the few positions a
    recall check reads.

    >>> from library.model.load import build_tiny_model, load_tokenizer
    >>> tok = load_tokenizer("tiny"); model = build_tiny_model(tok)
    >>> out = _teacher_forced_argmax(model, tok, [([1, 2, 3, 4], [(0, 2), (3, 1)]), ([5, 6], [(1, 1)])], 8)
    >>> [[len(span) for span in row] for row in out]
    [[2, 1], [1]]
    """
    import torch

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out: list[list[list[int]]] = []
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for first in range(0, len(rows), batch_size):
            batch = rows[first:first + batch_size]
            width = max(len(ids) for ids, _ in batch)
            x = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros_like(x)
            keep = torch.zeros((len(batch), width), dtype=torch.bool)
            for r, (ids, spans) in enumerate(batch):  # right padding: positions stay 0..n-1
                x[r, :len(ids)] = torch.tensor(ids)
                mask[r, :len(ids)] = 1
                for start, length in spans:
                    keep[r, start:start + length] = True
            # (number of kept positions, vocab), in row-major order of the kept positions
            pred = model(input_ids=x, attention_mask=mask, logits_to_keep=keep).logits.argmax(-1).tolist()
            at = 0
            for r, (_, spans) in enumerate(batch):
                row_pred, kept = [], keep[r].nonzero().flatten().tolist()
                flat = dict(zip(kept, pred[at:at + len(kept)]))
                at += len(kept)
                for start, length in spans:
                    row_pred.append([flat[i] for i in range(start, start + length)])
                out.append(row_pred)
    if was_training:
        model.train()
    return out


def _greedy_matches(model, tokenizer, items: Sequence[tuple[list[int], list[int]]], batch_size: int = 64) -> list[bool]:
    """For each ``(context ids, target ids)``: would greedy decoding after the context produce the
    target? Teacher-forced (greedy yields the target iff every target token is the argmax after
    the tokens before it)."""
    rows = [(head + tgt, [(len(head) - 1, len(tgt))]) for head, tgt in items]
    preds = _teacher_forced_argmax(model, tokenizer, rows, batch_size)
    return [row[0] == tgt for row, (_, tgt) in zip(preds, items)]


def fact_recall(model, tokenizer, kg: Any, groups: Sequence[tuple[str, str, tuple[str, ...]]], *,
                batch_size: int = 64) -> dict[str, Any]:
    """Share of ``groups`` whose successor the model recalls exactly, greedy, in a knowledge row.

    The context is the knowledge prompt's assistant turn followed by ``"<src> <relation> [K]"``
    (a tag fixed per group); the target is ``" <dst>"``. With several successors a group counts
    as recalled when any of them is (the functional KG has one). This is recall where the facts
    were taught; :func:`trace_recall` is recall where composition needs them. Returns
    ``{"n", "recalled", "recall", "by_relation"}``.
    """
    from library.model.load import format_prompt

    prefix = format_prompt(tokenizer, KNOWLEDGE_PROMPT)
    owners, items = [], []  # group index per item; (context ids, target ids)
    for gi, (src, rel, dsts) in enumerate(groups):
        tag = random.Random(f"recall:{src}:{rel}").choice(BLANK_TAG_POOL)
        head = tokenizer(prefix + f"{kg.label(src)} {kg.relation_label(rel)} [{tag}]", add_special_tokens=False).input_ids
        for dst in dsts:
            owners.append(gi)
            items.append((head, tokenizer(f" {kg.label(dst)}", add_special_tokens=False).input_ids))
    hit = [False] * len(groups)
    for gi, ok in zip(owners, _greedy_matches(model, tokenizer, items, batch_size)):
        hit[gi] = hit[gi] or ok
    by_rel: dict[str, list[int]] = {}
    for (src, rel, _), ok in zip(groups, hit):
        by_rel.setdefault(rel, [0, 0])
        by_rel[rel][0] += ok
        by_rel[rel][1] += 1
    n = len(groups)
    return {"n": n, "recalled": sum(hit), "recall": round(sum(hit) / n, 4) if n else 0.0,
            "by_relation": {rel: round(k / m, 4) for rel, (k, m) in sorted(by_rel.items())}}


def trace_recall(model, tokenizer, kg: Any, questions: Sequence[Any], *, batch_size: int = 16,
                 style: str | None = None) -> dict[str, Any]:
    """Share of the questions' hops whose object the model writes, greedy, inside the gold TRACE.

    For hop *i* the context is the question's prompt and its reference completion up to hop
    *i*'s opening tag; the target is the object's label. This is fact recall where composition
    needs it: a model can know a fact as a 1-hop question and still miss it mid-chain (measured:
    docs/FINDINGS.md). Teacher-forced, so one forward pass over prompt + gold completion scores
    every hop of a question. Returns ``{"n", "recalled", "recall", "by_hop", "hits"}`` (0-based
    hops; ``hits``: ``(question id, hop, recalled)`` for every hop, to split recall by fact).
    ``style``: the TRACE wording the model was taught (``sft.trace_style``; None: the data's).
    """
    from library.questions.wording import reference_completion

    from library.model.load import format_prompt

    rows = []  # (question id, token ids, [(hop, target start, target ids)])
    for q in questions:
        completion = reference_completion(q, kg=kg, style=style)
        tags = blank_tags(q.path_star.entities[0], [e.rel for e in q.path_star.edges])
        ids = tokenizer(format_prompt(tokenizer, q.prompt), add_special_tokens=False).input_ids
        spans, done = [], 0
        for i, (edge, tag) in enumerate(zip(q.path_star.edges, tags)):
            # Tokenized piecewise at each object's leading space, a word boundary either way.
            cut = completion.index(f"[{tag}] ", done) + len(tag) + 2  # the opening tag comes first
            ids += tokenizer(completion[done:cut], add_special_tokens=False).input_ids
            target = tokenizer(f" {kg.label(edge.dst)}", add_special_tokens=False).input_ids
            spans.append((i, len(ids), target))
            ids += target
            done = cut + 1 + len(kg.label(edge.dst))
        rows.append((q.id, ids, spans))
    by_hop: dict[int, list[int]] = {}
    hits = []
    preds = _teacher_forced_argmax(model, tokenizer,
                                   [(ids, [(at - 1, len(target)) for _, at, target in spans]) for _, ids, spans in rows],
                                   batch_size)
    for (qid, _, spans), row in zip(rows, preds):
        for (hop, _, target), got in zip(spans, row):
            ok = got == target
            hits.append((qid, hop, ok))
            by_hop.setdefault(hop, [0, 0])
            by_hop[hop][0] += ok
            by_hop[hop][1] += 1
    n = sum(m for _, m in by_hop.values())
    recalled = sum(k for k, _ in by_hop.values())
    return {"n": n, "recalled": recalled, "recall": round(recalled / n, 4) if n else 0.0,
            "by_hop": {str(i): round(k / m, 4) for i, (k, m) in sorted(by_hop.items())}, "hits": hits}
