"""The leakage audit: which held-out paths (or their windows) a training split contains."""

from __future__ import annotations

from typing import Iterable, Sequence

from library.contracts import GoldPath, Question


def entity_seq(question_or_path: Question | GoldPath) -> tuple[str, ...]:
    path = question_or_path.path_star if isinstance(question_or_path, Question) else question_or_path
    return tuple(path.entities)


def windows(seq: Sequence[str], min_len: int) -> list[tuple[str, ...]]:
    """Every contiguous sub-sequence of ``seq`` with at least ``min_len`` items.

    >>> windows(("a", "b", "c"), 2)
    [('a', 'b'), ('a', 'b', 'c'), ('b', 'c')]
    """
    return [tuple(seq[i:j]) for i in range(len(seq)) for j in range(i + min_len, len(seq) + 1)]


def path_edges(questions: Iterable[Question]) -> set[tuple[str, str, str]]:
    return {(e.src, e.rel, e.dst) for q in questions for e in q.path_star.edges}


#: The checks that keep the far splits (one hop past eval) apart, reported where they exist.
FAR_CHECKS = ("far_shares_hard", "dev_far_shares_eval", "eval_far_shares_dev", "far_shared_question_text")


def leakage_report(train: list[Question], eval_: list[Question], hard: list[Question],
                   dev: list[Question] = (), eval_far: list[Question] = (), dev_far: list[Question] = ()
                   ) -> dict[str, int]:
    """Counts of every kind of eval leakage we rule out; all must be zero.

    - ``eval_path_in_train``: an eval path (entity sequence) inside a train path;
    - ``eval_path_in_hard`` / ``hard_path_in_eval``: an eval path contiguously inside a
      train_hard path, or the other way round;
    - ``hard_eval_same_question``: train_hard and eval sharing (start, chain, answer);
    - ``shared_question_text``: an eval question text that a training split (or dev) also asks;
    - ``eval_path_in_dev`` / ``dev_path_in_eval`` / ``hard_path_in_dev``: the same containment
      checks between dev and the held-out 4-5-hop splits;
    - where far splits are given (one hop past eval; splits.py: build_far): ``far_shares_hard``
      (a far path holding a train_hard path or inside one), ``dev_far_shares_eval`` (dev_far
      against eval and eval_far), ``eval_far_shares_dev`` (eval_far against dev), and
      ``far_shared_question_text`` (a far question text another split asks).
    """
    eval_seqs = {entity_seq(q) for q in eval_}
    min_eval = min((len(s) for s in eval_seqs), default=2)
    eval_windows = {w for s in eval_seqs for w in windows(s, 2)}
    hard_seqs = {entity_seq(q) for q in hard}

    def contains_eval(q: Question) -> bool:
        return any(w in eval_seqs for w in windows(entity_seq(q), min_eval))

    def key(q: Question) -> tuple:
        return q.meta["start"], tuple(q.meta["chain"]), q.meta["answer"]

    eval_texts = {q.question for q in eval_}
    report = {
        "eval_path_in_train": sum(contains_eval(q) for q in train),
        "eval_path_in_hard": sum(contains_eval(q) for q in hard),
        "hard_path_in_eval": sum(s in eval_windows for s in hard_seqs),
        "hard_eval_same_question": len({key(q) for q in hard} & {key(q) for q in eval_}),
        "shared_question_text": len(eval_texts & {q.question for q in list(train) + list(hard) + list(dev)}),
        "eval_path_in_dev": sum(contains_eval(q) for q in dev),
        "dev_path_in_eval": sum(entity_seq(q) in eval_windows for q in dev),
        "hard_path_in_dev": sum(any(w in hard_seqs for w in windows(entity_seq(q), min_eval)) for q in dev),
    }
    if eval_far or dev_far:
        def shares(qs: Iterable[Question], others: Iterable[Question]) -> int:
            seqs = {entity_seq(q) for q in others}
            inside = {w for s in seqs for w in windows(s, min_eval)}
            return sum(entity_seq(q) in inside or any(w in seqs for w in windows(entity_seq(q), min_eval)) for q in qs)

        far = list(eval_far) + list(dev_far)
        others = [q.question for q in [*train, *eval_, *hard, *dev]]
        report |= dict(zip(FAR_CHECKS, (
            shares(far, hard),
            shares(dev_far, [*eval_, *eval_far]),
            shares(eval_far, dev),
            len({q.question for q in far} & set(others)) + len({q.question for q in eval_far} & {q.question for q in dev_far}),
        )))
    return report
