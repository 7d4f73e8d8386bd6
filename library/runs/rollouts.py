"""The one writer of scored completions: (question, completion, score) -> Episode -> gathered
across processes -> appended to the run's episodes.jsonl.

Evaluation (one greedy answer per question), RSFT (a group of samples per prompt) and GRPO (a
step's groups, scored by the trainer's reward functions), on every backend, log through here, so
an episode line is built one way and written by one process.

>>> from library.contracts import ParsedCompletion, RewardBreakdown, Scored
>>> from types import SimpleNamespace as Q
>>> q = Q(id="q1", split="train", prompt="p", hop_len=1, answer_star="A")
>>> s = Scored(ParsedCompletion(answer="A", trace_text="t", trace_entities=[], path_entities=[],
...                             valid_format=True, claims=[]),
...            RewardBreakdown(correctness=1, path_coverage=0, path_reward=0, spam_penalty=0, total=1), True)
>>> [e.sample_idx for e in to_episodes([q, q], ["a", "b"], [s, s], phase="grpo", step=1, kind="rollout")]
[0, 1]
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

from library.contracts import ROLLOUT_KIND, Episode, Scored


def to_episodes(questions: Sequence[Any], completions: Sequence[str], scored: Sequence[Scored], *, phase: str,
                step: int, kind: str, per_item: Sequence[dict[str, Any]] | None = None,
                **fields: Any) -> list[Episode]:
    """One episode per (question, completion, score), in order. Rollouts are numbered per
    question (``sample_idx``) in the order given; ``per_item`` adds fields to single episodes
    (``finished``, ``selected``), ``fields`` to all (``backend``, ``eval_split``, ``split``)."""
    seen: dict[str, int] = defaultdict(int)
    out = []
    for i, (q, c, s) in enumerate(zip(questions, completions, scored)):
        extra = dict(fields)
        if kind == ROLLOUT_KIND:
            extra["sample_idx"] = seen[q.id]
            seen[q.id] += 1
        if per_item is not None:
            extra.update(per_item[i])
        out.append(Episode.from_scored(s, q, c, phase=phase, step=step, kind=kind, **extra))
    return out


def score_episodes(reward_model, questions: Sequence[Any], completions: Sequence[str], **kwargs: Any) -> list[Episode]:
    """:func:`to_episodes` of completions scored here by ``reward_model`` (the KG reward)."""
    scored = [reward_model.score(q, c) for q, c in zip(questions, completions)]
    return to_episodes(questions, completions, scored, **kwargs)


def number_samples(episodes: Sequence[Episode]) -> list[Episode]:
    """``sample_idx`` counted per question over ``episodes`` in order: one step's rollouts
    gathered from several processes, where each process had counted only its own slice."""
    seen: dict[str, int] = defaultdict(int)
    out = []
    for ep in episodes:
        out.append(ep if ep.sample_idx == seen[ep.ex_id] else ep.model_copy(update={"sample_idx": seen[ep.ex_id]}))
        seen[ep.ex_id] += 1
    return out


def log_episodes(run, episodes: Sequence[Episode], *, gathered: bool = False) -> list[Episode]:
    """Gather this process's ``episodes`` with the others' (in rank order; skipped when they are
    ``gathered`` already), renumber rollouts over the whole set, and append them to ``run``'s log
    from the main process alone. Returns every process's episodes, on every process."""
    from library.model.distributed import gather, is_writer

    everyone = list(episodes) if gathered else gather(list(episodes))
    if any(ep.kind == ROLLOUT_KIND for ep in everyone):
        everyone = number_samples(everyone)
    if run is not None and is_writer() and everyone:
        run.append_episodes(everyone)
    return everyone
