"""Fact recall: did the model learn the facts the eval chains need, apart from composing them?

- :func:`fact_recall`: for a set of (entity, relation) groups, is the model's greedy
  continuation of ``"<src label> <relation label>"`` exactly ``" <dst label>."``, where the
  facts were taught (the knowledge rows of library/train/facts.py);
- :func:`trace_recall`: the same inside the gold TRACE of each eval question, where
  composition needs them.

Both are teacher-forced (one forward pass per batch: greedy decoding produces the target iff
every target token is the argmax after the tokens before it), so they cost seconds.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from library.contracts import BLANK_TAG_POOL, PathEdge
from library.graph.oracle import question_walk, walk_edges
from library.model.chat import format_prompt
from library.questions.wording import KNOWLEDGE_PROMPT, blank_tags, fact_groups, object_list, reference_completion


def eval_fact_groups(kg: Any, questions: Sequence[Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    """The (entity, relation) groups the TRACEs of ``questions`` state, each with every successor
    (on a functional graph: the gold paths' facts)."""
    return fact_groups(kg, [PathEdge(src=s, rel=r, dst=d) for q in questions for s, r, d in walk_edges(question_walk(kg, q))])


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
    """Share of ``groups`` whose successors the model recalls exactly, greedy, in a knowledge row.

    The context is the knowledge prompt's assistant turn followed by ``"<src> <relation> [K]"``
    (a tag fixed per group); the target is ``" <dst>"``, or with several successors all of them
    as the knowledge rows state them, ``" <dst> and <dst>"``. This is recall where the facts
    were taught; :func:`trace_recall` is recall where composition needs them. Returns
    ``{"n", "recalled", "recall", "by_relation"}``.
    """
    prefix = format_prompt(tokenizer, KNOWLEDGE_PROMPT)
    items = []  # (context ids, target ids), one per group
    for src, rel, dsts in groups:
        tag = random.Random(f"recall:{src}:{rel}").choice(BLANK_TAG_POOL)
        head = tokenizer(prefix + f"{kg.label(src)} {kg.relation_label(rel)} [{tag}]", add_special_tokens=False).input_ids
        objects = object_list(kg, dsts)
        items.append((head, tokenizer(f" {objects}", add_special_tokens=False).input_ids))
    hit = _greedy_matches(model, tokenizer, items, batch_size)
    by_rel: dict[str, list[int]] = {}
    for (src, rel, _), ok in zip(groups, hit):
        by_rel.setdefault(rel, [0, 0])
        by_rel[rel][0] += ok
        by_rel[rel][1] += 1
    n = len(groups)
    return {"n": n, "recalled": sum(hit), "recall": round(sum(hit) / n, 4) if n else 0.0,
            "by_relation": {rel: round(k / m, 4) for rel, (k, m) in sorted(by_rel.items())}}


def trace_recall(model, tokenizer, kg: Any, questions: Sequence[Any], *, batch_size: int = 16) -> dict[str, Any]:
    """Share of the questions' hop clauses whose objects the model writes, greedy, inside the gold TRACE.

    For each clause of hop *i* (one on a functional graph; one per held entity with successors
    where the TRACE carries a set) the context is the question's prompt and its reference
    completion up to that clause's opening tag; the target is the clause's objects. This is fact recall where composition
    needs it: a model can know a fact as a 1-hop question and still miss it mid-chain (measured:
    docs/FINDINGS.md). Teacher-forced, so one forward pass over prompt + gold completion scores
    every hop of a question. Returns ``{"n", "recalled", "recall", "by_hop", "hits"}`` (0-based
    hops; ``hits``: ``(question id, hop, recalled)`` for every hop, to split recall by fact).
    """
    rows = []  # (question id, token ids, [(hop, target start, target ids)])
    for q in questions:
        completion = reference_completion(q)
        tags = blank_tags(q.path_star.entities[0], [e.rel for e in q.path_star.edges])
        ids = tokenizer(format_prompt(tokenizer, q.prompt), add_special_tokens=False).input_ids
        spans, done = [], 0
        for i, (hop, tag) in enumerate(zip(question_walk(kg, q), tags)):
            for _, dsts in hop.clauses:
                # Tokenized piecewise at each object's leading space, a word boundary either way.
                cut = completion.index(f"[{tag}] ", done) + len(tag) + 2  # the opening tag comes first
                ids += tokenizer(completion[done:cut], add_special_tokens=False).input_ids
                objects = object_list(kg, dsts)
                target = tokenizer(f" {objects}", add_special_tokens=False).input_ids
                spans.append((i, len(ids), target))
                ids += target
                done = cut + 1 + len(objects)
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
