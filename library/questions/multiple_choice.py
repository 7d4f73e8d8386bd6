"""One multiple-choice question from one gold path: make it, verify it from its text, shuffle it.

The wording is library/questions/wording.py, the distractors library/questions/distractors.py; whole splits are
built by library/questions/splits.py.
"""

from __future__ import annotations

import random

from library.scoring.answer_format import render_completion, tag_answer
from library.contracts import LETTERS, GoldPath, Question, Reference
from library.questions.distractors import pick_distractors
from library.graph.kg import KnowledgeGraph
from library.questions.wording import question_text, reference_trace, render_prompt, step_order_of

ID_FORMATS = {"train": "train-{:05d}", "eval": "eval-{:04d}", "train_hard": "hard-{:04d}", "dev": "dev-{:04d}",
              "eval_far": "far-{:04d}", "dev_far": "devfar-{:04d}"}


def question_id(split: str, idx: int) -> str:
    """``question_id("train", 1) == "train-00001"``, ``eval-0001``, ``hard-0001``."""
    return ID_FORMATS[split].format(idx)


def make_question(kg: KnowledgeGraph, path: GoldPath, rng: random.Random, split: str, idx: int, *,
                  seed: int = 0, answer_slot: int | None = None, max_distance: int = 3,
                  step_order: str = "chain") -> Question | None:
    """The question for ``path`` (its end is the answer), or None when the KG has fewer than
    three admissible distractors for it.

    ``answer_slot`` (0-3) fixes the answer's letter, which lets :func:`build_dataset` balance
    letters exactly; by default the rng picks it. The other options are in rng order.

    >>> import json
    >>> from library.graph.kg import KnowledgeGraph
    >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
    ...     "entities": [{"id": "s", "label": "TLS handshake error", "type": "symptom"}]
    ...         + [{"id": f"c{i}", "label": f"cause {i}", "type": "cause"} for i in range(5)],
    ...     "relations": [{"id": "caused_by", "label": "is caused by"},
    ...                   {"id": "leads_to", "label": "leads to"}],
    ...     "edges": [{"src": "s", "rel": "caused_by", "dst": "c0"}]
    ...         + [{"src": f"c{i}", "rel": "leads_to", "dst": f"c{i+1}"} for i in range(4)]})
    >>> q = make_question(kg, kg.path_from_entities(["s", "c0"], ["caused_by"]),
    ...                   random.Random(0), "train", 1, answer_slot=2)
    >>> q.id, q.answer_star, q.options["C"], q.question
    ('train-00001', 'C', 'cause 0', 'Start at TLS handshake error. It is caused by [?]. (1 step)')
    >>> q.ref.completion
    'TRACE: TLS handshake error is caused by [?] cause 0 (C).\\nANSWER: C'
    >>> sorted(d["source"] for d in q.meta["distractors"])
    ['nearby_2', 'nearby_3', 'overshoot']
    >>> verify_unique(kg, q)
    True
    """
    chain = [e.rel for e in path.edges]
    start, answer = path.entities[0], path.entities[-1]
    distractors = pick_distractors(kg, path, rng, max_distance=max_distance)
    if distractors is None:
        return None
    rng.shuffle(distractors)
    slot = rng.randrange(4) if answer_slot is None else answer_slot
    order = [ent for ent, _ in distractors]
    order.insert(slot, answer)
    options = {letter: kg.label(ent) for letter, ent in zip(LETTERS, order)}
    letter = LETTERS[slot]
    text = question_text(kg, start, chain, step_order=step_order)
    trace = reference_trace(kg, path, step_order=step_order)
    return Question(
        id=question_id(split, idx),
        split=split,
        hop_len=len(chain),
        question=text,
        options=options,
        answer_star=letter,
        path_star=path,
        prompt=render_prompt(text, options),
        ref=Reference(trace=trace, completion=render_completion(tag_answer(trace, letter), letter)),
        meta={
            "start": start,
            "chain": chain,
            "answer": answer,
            "option_ids": dict(zip(LETTERS, order)),
            "distractors": [{"id": ent, "source": source} for ent, source in distractors],
            "reach_size": len(kg.reach(start, chain)),
            "seed": seed,
        },
    )


def verify_unique(kg: KnowledgeGraph, question: Question) -> bool:
    """True when exactly one option is reachable by the stated chain, and it is the keyed one.

    Works from the question as written (labels back to ids), so it checks the file, not the
    generator's intentions; it also checks that the question text states exactly this
    start and chain, and that the gold path is a real path of the KG ending at the key.
    """
    start, chain = question.meta["start"], list(question.meta["chain"])
    ids = {letter: kg.entity_by_label(label) for letter, label in question.options.items()}
    if None in ids.values() or len(set(ids.values())) != 4:
        return False
    path = question.path_star
    if (path.entities[0] != start or [e.rel for e in path.edges] != chain
            or ids[question.answer_star] != path.entities[-1] or len(path.edges) != question.hop_len
            or len(set(path.entities)) != len(path.entities)
            or not all(kg.has_edge(e.src, e.rel, e.dst) for e in path.edges)):
        return False
    # the text must state this chain (in either step order, library/questions/dataset.py: STEP_ORDERS)
    if question.question != question_text(kg, start, chain, step_order=step_order_of(question.question)):
        return False
    reach = set(kg.reach(start, chain))
    reachable = [letter for letter in LETTERS if ids[letter] in reach]
    return reachable == [question.answer_star]


def shuffle_question(question: Question, rng: random.Random, answer_slot: int | None = None) -> Question:
    """The same question with its options permuted and the answer letter moved.

    The answer always lands on a different letter (``answer_slot`` if given, else a random
    other one), so the copy measures position bias rather than repeating a quarter of the
    originals; the answer text is unchanged.
    """
    letters = list(LETTERS)
    old = letters.index(question.answer_star)
    new = (old + rng.randint(1, 3)) % 4 if answer_slot is None else answer_slot
    if new == old:
        raise ValueError("a shuffled copy must move the answer to another letter")
    others = [question.options[x] for x in letters if x != question.answer_star]
    rng.shuffle(others)
    order = list(others)
    order.insert(new, question.options[question.answer_star])
    options = dict(zip(LETTERS, order))
    label_to_letter = {label: letter for letter, label in question.options.items()}
    old_ids = question.meta["option_ids"]
    letter = LETTERS[new]
    meta = dict(question.meta)
    meta["option_ids"] = {x: old_ids[label_to_letter[options[x]]] for x in LETTERS}
    meta["shuffled_from"] = question.id
    meta["permutation"] = [label_to_letter[options[x]] for x in LETTERS]  # original letter now at A..D
    return question.model_copy(update={
        "id": f"{question.id}-shuf",
        "split": "eval_shuffled",
        "options": options,
        "answer_star": letter,
        "prompt": render_prompt(question.question, options),
        "ref": Reference(trace=question.ref.trace,
                         completion=render_completion(tag_answer(question.ref.trace, letter), letter)),
        "meta": meta,
    })
