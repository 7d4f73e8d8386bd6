"""Evaluation: greedy answers scored by the KG reward, metrics with confidence intervals.

- :func:`wilson_interval` - the 95% interval every accuracy carries (a 2-question difference
  out of 20 is noise; the interval says so).
- :func:`metrics_from_episodes` - a pure function from episodes to one metrics block in the
  layout of docs/CONTRACTS.md (``metrics[split][phase]``). The same function computes what is
  stored and what a reader recomputes, so the two always agree.
- :func:`evaluate` - generate, score, log episodes, return the metrics block; resumable.
- :func:`compare_phases` - paired bootstrap difference in accuracy between two phases on the
  same questions ("GRPO beats SFT by +x points, 95% CI [lo, hi], n=...").

Only :func:`evaluate` needs torch (imported lazily); the rest is cheap and can be used by the
video side.

Eval episodes are ``kind="eval"`` (RSFT/GRPO rollouts are ``kind="rollout"``) with
``eval_split``, the metrics key (``eval``, ``eval_shuffled``, ``train_sample``...). ``split``
itself is that key when it is a contract split, else the question's own split
(``train_sample`` questions are ``train`` questions). Accuracy counts ``Episode.correct``, the
one verdict the reward gave (library/scoring/answer_format.py: a well-formed answer equal to the key).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence, get_args

from library.contracts import EVAL_KIND, Episode, Question, Split
from library.model.distributed import is_writer, num_processes, shard, wait_for_everyone
from library.runs.reader import eval_episodes
from library.runs.rollouts import log_episodes, score_episodes
from library.scoring.answer_format import is_grounded
from library.stats import paired_difference, wilson_interval

REWARD_COMPONENTS: tuple[str, ...] = ("correctness", "path_coverage", "path_reward", "spam_penalty",
                                      "edge_reward", "total")


def _accuracy_block(n: int, correct: int) -> dict[str, Any]:
    lo, hi = wilson_interval(correct, n)
    return {"n": n, "correct": correct, "accuracy": correct / n if n else 0.0, "accuracy_ci": [lo, hi]}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def grounded_episode(ep: Episode) -> bool:
    """The verdict scoring stored with the episode (``Episode.grounded``); for a log older than
    it, :func:`library.scoring.answer_format.is_grounded` on the counts the reward stored."""
    if ep.grounded is not None:
        return ep.grounded
    return is_grounded(ep.parsed.valid_format and ep.parsed.answer is not None, ep.hop_len,
                       (ep.reward.model_extra or {}).get("edge_hits"))


def metrics_from_episodes(episodes: Sequence[Episode]) -> dict[str, Any]:
    """One metrics block (one phase, one split) from its episodes; layout of docs/CONTRACTS.md.

    by_hop groups on the episodes' ``hop_len`` (keys are strings, as in JSON). The reward
    means cover every component present in the breakdowns (extras such as ``edge_reward``
    included), each averaged over the episodes that have it.

    >>> from library.contracts import Episode
    >>> def ep(i, ans, hop, spam=0.0):
    ...     return Episode(phase="sft", step=0, ex_id=f"q{i}", split="eval", prompt="p", completion="c",
    ...         parsed={"answer": ans, "trace_text": "", "trace_entities": [], "path_entities": [],
    ...                 "valid_format": ans is not None, "claims": []},
    ...         reward={"correctness": 1.0 if ans == "A" else -2.0, "path_coverage": 0.5,
    ...                 "path_reward": 0.5, "spam_penalty": spam, "total": 0.0},
    ...         hop_len=hop, answer_star="A", kind="eval", correct=ans == "A")
    >>> m = metrics_from_episodes([ep(0, "A", 4), ep(1, "B", 4), ep(2, None, 5, spam=0.5), ep(3, "A", 5)])
    >>> m["n"], m["correct"], m["accuracy"], m["valid_format_rate"], m["spam_rate"]
    (4, 2, 0.5, 0.75, 0.25)
    >>> m["by_hop"]["4"]["correct"], m["by_hop"]["5"]["n"], m["reward"]["correctness"]
    (1, 2, -0.5)
    >>> m["grounded"]["correct"]   # no TRACE here states its gold path
    0
    """
    n = len(episodes)
    correct_flags = [bool(ep.correct) for ep in episodes]
    block = _accuracy_block(n, sum(correct_flags))
    hops: dict[str, list[bool]] = {}
    for ep, ok in zip(episodes, correct_flags):
        hop = ep.hop_len
        if hop is not None:
            hops.setdefault(str(hop), []).append(ok)
    block["by_hop"] = {h: _accuracy_block(len(v), sum(v)) for h, v in sorted(hops.items(), key=lambda kv: int(kv[0]))}
    # Right for the right reason: the TRACE states every gold edge in path order (grounded_episode).
    grounded = [ok and grounded_episode(ep) for ep, ok in zip(episodes, correct_flags)]
    block["grounded"] = {**_accuracy_block(n, sum(grounded)),
                         "share_of_correct": sum(grounded) / block["correct"] if block["correct"] else 0.0}
    block["valid_format_rate"] = _mean([1.0 if ep.parsed.valid_format else 0.0 for ep in episodes])
    block["path_coverage"] = _mean([ep.reward.path_coverage for ep in episodes])
    block["spam_rate"] = _mean([1.0 if ep.reward.spam_penalty > 0 else 0.0 for ep in episodes])
    components: dict[str, list[float]] = {}
    for ep in episodes:
        for name, value in ep.reward.model_dump().items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                components.setdefault(name, []).append(float(value))
    order = [c for c in REWARD_COMPONENTS if c in components] + sorted(set(components) - set(REWARD_COMPONENTS))
    block["reward"] = {name: _mean(components[name]) for name in order}
    return block


def _episode_split(split: str, question: Question) -> str:
    return split if split in get_args(Split) else question.split


def evaluate(model, tokenizer, questions: Sequence[Question], reward_model, *, phase: str, split: str,
             run=None, step: int = 0, batch_size: int = 16, max_new_tokens: int = 64,
             progress: bool = True, chunk: int | None = None) -> dict[str, Any]:
    """Greedy-answer ``questions``, score them, log episodes and return the metrics block.

    With a ``run`` (:class:`library.runs.folder.RunDir`), one episode per question is appended (in
    chunks of ``chunk`` questions, default ``4 * batch_size``, so an interrupted eval resumes
    where it stopped). Questions that already have an eval episode for (phase, split, step)
    are not generated again; a finished eval is recomputed from its episodes, for free.
    metrics.json is not touched: the caller stores the block (the phase loop, once a phase is
    complete; an experiment, in its section of the main run's).

    Across N processes (library/model/distributed.py) every chunk is split between them: each answers
    its contiguous slice, the episodes are gathered onto every process in question order, and
    the main process alone appends them (one writer, no interleaved lines). Every process then
    returns the same block. Greedy decoding makes the answers the same as one process's.
    """
    from library.model.generate import generate_completions  # torch

    questions = list(questions)
    writer = is_writer()
    done: dict[str, Episode] = {}
    if run is not None:
        wait_for_everyone()  # every process reads the log after the main process's last append
        done = eval_episodes(run.iter_episodes(phase=phase), phase=phase, split=split, step=step)
    todo = [q for q in questions if q.id not in done]
    # A chunk is what all processes answer between two appends to the log.
    chunk = chunk or max(1, 4 * batch_size) * num_processes()
    fresh: dict[str, Episode] = {}
    for start in range(0, len(todo), chunk):
        mine = shard(todo[start : start + chunk])
        outs = generate_completions(model, tokenizer, [q.prompt for q in mine], max_new_tokens=max_new_tokens,
                                    do_sample=False, batch_size=batch_size, progress=progress and writer) if mine else []
        local = score_episodes(reward_model, mine, [group[0].text for group in outs], phase=phase, step=step,
                               kind=EVAL_KIND, eval_split=split,
                               per_item=[{"split": _episode_split(split, q), "finished": group[0].finished}
                                         for q, group in zip(mine, outs)])
        episodes = log_episodes(run, local)
        fresh.update((ep.ex_id, ep) for ep in episodes)
    ordered = [fresh.get(q.id) or done[q.id] for q in questions]
    return metrics_from_episodes(ordered)


def metrics_from_run(run, *, phase: str, split: str, step: int | None = None,
                     ex_ids: Iterable[str] | None = None) -> dict[str, Any]:
    """Recompute a stored metrics block from the run's episodes (what a reader can check)."""
    found = eval_episodes(run.iter_episodes(phase=phase), phase=phase, split=split, step=step)
    if ex_ids is not None:
        wanted = list(ex_ids)
        missing = [i for i in wanted if i not in found]
        if missing:
            raise KeyError(f"{len(missing)} questions have no {phase}/{split} episode, e.g. {missing[0]}")
        return metrics_from_episodes([found[i] for i in wanted])
    return metrics_from_episodes(list(found.values()))


def _outcomes(source, split: str, phase: str) -> dict[str, bool]:
    episodes = source.iter_episodes(phase=phase) if hasattr(source, "iter_episodes") else source
    return {ex: bool(ep.correct) for ex, ep in eval_episodes(episodes, phase=phase, split=split).items()}


def compare_phases(source, split: str, phase_a: str, phase_b: str, *, n_boot: int = 2000, seed: int = 0,
                   confidence: float = 0.95) -> dict[str, Any]:
    """Accuracy of ``phase_b`` minus ``phase_a`` on the questions both answered, with a paired
    bootstrap interval (questions resampled with replacement, seeded).

    ``source`` is a RunDir or a list of episodes (per-question outcomes are needed for pairing,
    which metrics.json does not hold). ``p_not_better`` is the share of bootstrap differences
    <= 0: small means phase_b reliably beats phase_a on this split.

    >>> from library.contracts import Episode
    >>> def ep(phase, i, ok):
    ...     return Episode(phase=phase, step=0, ex_id=f"q{i}", split="eval", prompt="p", completion="c",
    ...         parsed={"answer": "A" if ok else "B", "trace_text": "", "trace_entities": [],
    ...                 "path_entities": [], "valid_format": True, "claims": []},
    ...         reward={"correctness": 0.0, "path_coverage": 0.0, "path_reward": 0.0, "spam_penalty": 0.0,
    ...                 "total": 0.0}, answer_star="A", kind="eval", eval_split="eval", correct=ok)
    >>> eps = [ep("sft", i, i < 5) for i in range(20)] + [ep("grpo", i, i < 15) for i in range(20)]
    >>> r = compare_phases(eps, "eval", "sft", "grpo")
    >>> r["n"], r["accuracy_a"], r["accuracy_b"], r["diff"], r["ci"][0] > 0
    (20, 0.25, 0.75, 0.5, True)
    """
    a, b = _outcomes(source, split, phase_a), _outcomes(source, split, phase_b)
    ids = sorted(set(a) & set(b))
    n = len(ids)
    result: dict[str, Any] = {"split": split, "phase_a": phase_a, "phase_b": phase_b, "n": n,
                              "n_boot": n_boot, "seed": seed, "confidence": confidence}
    if n == 0:
        result.update(accuracy_a=None, accuracy_b=None, diff=None, ci=[None, None], p_not_better=None)
        return result
    result.update(paired_difference([a[i] for i in ids], [b[i] for i in ids], n_boot=n_boot, seed=seed,
                                    confidence=confidence))
    return result


