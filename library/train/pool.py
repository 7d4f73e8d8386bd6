"""GRPO's prompts by pass rate: train on what the starting policy gets right sometimes, not always.

A GRPO group is ``num_generations`` samples of one prompt, and each sample's advantage is its
reward against the group's: a group whose samples are all right or all wrong (and whose path
rewards tie) teaches nothing. At pass rate ``p`` a group of ``g`` is mixed with probability
``1 - p**g - (1-p)**g``:

>>> round(mixed_group_chance(0.95, 4), 2), round(mixed_group_chance(0.95, 16), 2), mixed_group_chance(1.0, 8)
(0.19, 0.56, 0.0)

so a pool the policy already solves (90% of the full profile's groups, docs/FINDINGS.md finding
20) gives GRPO nothing to follow. Here the starting policy samples ``k`` answers to each
candidate with GRPO's own temperature, top-p and window; the candidates it answers right 1 to
k-1 times are kept, those nearest a pass rate of 1/2 first (the largest spread p(1-p) of a
group's correctness), at most ``pool.max_prompts``:

>>> from types import SimpleNamespace as Q
>>> qs = [Q(id=i) for i in "abcde"]
>>> [q.id for q in keep_learnable(qs, {"a": 8, "b": 4, "c": 0, "d": 1, "e": 6}, k=8, n=2)]
['b', 'e']
>>> histogram({"a": 8, "b": 4, "c": 0}, k=4)
{'0/4': 1, '1/4': 0, '2/4': 0, '3/4': 0, '4/4': 1, 'over': 1}

(a count above ``k`` cannot happen; ``over`` shows that the histogram was asked for the wrong
``k``). Correctness is the one rule of library.scoring (``reward_model.score(q, c).correct``).

The estimates are cached beside GRPO's checkpoints (``pool.json``): a resumed phase and the
reward ablation train on the same prompts without sampling again.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Sequence

POOL_FILE = "pool.json"


def mixed_group_chance(p: float, g: int) -> float:
    """The chance that ``g`` samples at pass rate ``p`` are neither all right nor all wrong."""
    return 1.0 - p ** g - (1.0 - p) ** g


def count_right(model, tokenizer, questions: Sequence[Any], settings, reward_model, seed: int) -> dict[str, int]:
    """How many of ``settings.pool.k_samples`` samples of each question are right, sampled as GRPO
    samples (its temperature, top-p and completion window)."""
    from library.train.rsft import sample_completions

    model.eval()
    groups = sample_completions(model, tokenizer, questions, k=settings.pool.k_samples, temperature=settings.temperature,
                                top_p=settings.top_p, max_new_tokens=settings.max_completion_length,
                                batch_size=settings.pool.gen_batch_size, seed=seed)
    return {q.id: sum(1 for c in samples if reward_model.score(q, c).correct) for q, samples in zip(questions, groups)}


def keep_learnable(questions: Sequence[Any], right: dict[str, int], *, k: int, n: int) -> list:
    """The questions right 1..k-1 times of ``k``, nearest half right first (ties: input order), at most ``n``."""
    mixed = [(i, q) for i, q in enumerate(questions) if 0 < right[q.id] < k]
    mixed.sort(key=lambda iq: (abs(2 * right[iq[1].id] - k), iq[0]))
    return [q for _, q in mixed[:n]]


def histogram(right: dict[str, int], *, k: int) -> dict[str, int]:
    """Questions by how many of ``k`` samples were right: ``{"0/k": n0, ..., "k/k": nk}``."""
    out = {f"{i}/{k}": 0 for i in range(k + 1)}
    for count in right.values():
        key = f"{count}/{k}"
        if key in out:
            out[key] += 1
        else:
            out["over"] = out.get("over", 0) + 1
    return out


def choose_pool(model, tokenizer, candidates: Sequence[Any], settings, reward_model, *, seed: int,
                cache: Path, forbidden_ids: Iterable[str] = ()) -> tuple[list, dict[str, Any]]:
    """GRPO's prompts from ``candidates`` by the starting policy ``model``'s pass rates:
    ``(pool, summary)``. Read from ``cache`` when it holds the same candidates, ``k`` and sampling
    settings (precision included); else sampled and written there (by the writing process)."""
    from library.model.distributed import is_writer, wait_for_everyone
    from library.model.precision import sampling_precision
    from library.train.data import assert_training_only
    from library.jsonl import atomic_write_text

    candidates = list(candidates)
    assert_training_only(candidates, forbidden_ids)
    if not candidates:
        raise ValueError("grpo.pool.by_pass_rate: no candidate prompts (grpo.pool.candidates, hops, splits)")
    k = settings.pool.k_samples
    key = {"candidates": [q.id for q in candidates], "k": k, "temperature": settings.temperature,
           "top_p": settings.top_p, "max_new_tokens": settings.max_completion_length, "seed": seed,
           "precision": sampling_precision(),  # a bf16 draw is another draw (finding 54)
           "batch_size": settings.pool.gen_batch_size}  # random numbers are drawn per batch
    # The process count is not in the key: a phase resumed on another count reads the draw it began with.
    cache = Path(cache)
    right = None
    if cache.exists():
        stored = json.loads(cache.read_text(encoding="utf-8"))
        if stored.get("key") == key:
            right = {i: int(c) for i, c in stored["right"].items()}
    if right is None:
        right = count_right(model, tokenizer, candidates, settings, reward_model, seed)
        if is_writer():
            cache.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(cache, json.dumps({"key": key, "right": right}, indent=1) + "\n")
        wait_for_everyone()
    pool = keep_learnable(candidates, right, k=k, n=settings.pool.max_prompts)
    if not pool:
        raise ValueError(f"grpo.pool.by_pass_rate: the starting policy answered each of the {len(candidates)} "
                         f"candidates right in all or none of {k} samples; nothing for GRPO to learn from "
                         f"(histogram {histogram(right, k=k)}): try other grpo.pool.hops or splits")
    summary = {"candidates": len(candidates), "k": k, "kept": len(pool), "ids": [q.id for q in pool],
               "hops": dict(sorted(Counter(q.hop_len for q in pool).items())),
               "before": histogram(right, k=k),
               "kept_before": histogram({q.id: right[q.id] for q in pool}, k=k),
               "mean_pass_rate_kept_before": round(sum(right[q.id] for q in pool) / (k * len(pool)), 4),
               "mixed_groups_expected_before": _mixed_share([right[q.id] for q in pool], k, settings.num_generations)}
    return pool, summary


def grpo_prompts(model, tokenizer, selection, settings, reward_model, *, seed: int,
                 cache: Path) -> tuple[list, dict[str, Any] | None]:
    """The prompts a GRPO phase trains on: ``selection.grpo_pool`` (held out of SFT), or with
    ``settings.pool.by_pass_rate`` those of ``selection.grpo_candidates`` that ``model`` (the
    phase's starting policy) answers right sometimes: ``(pool, summary or None)``."""
    if not settings.pool.by_pass_rate:
        return list(selection.grpo_pool), None
    return choose_pool(model, tokenizer, selection.grpo_candidates, settings, reward_model, seed=seed, cache=cache,
                       forbidden_ids=selection.forbidden_ids)


def pool_pass_rates(model, tokenizer, pool: Sequence[Any], settings, reward_model, seed: int, *,
                    when: str = "after") -> dict[str, Any]:
    """``model``'s pass rates on the kept prompts with the same ``k`` and sampling, keyed by
    ``when`` (``kept_<when>``, ``mean_pass_rate_kept_<when>``, ``mixed_groups_expected_<when>``):
    after training (did RL move what it trained on?) or a fresh draw of the start's."""
    k = settings.pool.k_samples
    right = count_right(model, tokenizer, pool, settings, reward_model, seed)
    return {f"kept_{when}": histogram(right, k=k),
            f"mean_pass_rate_kept_{when}": round(sum(right.values()) / (k * len(pool)), 4) if pool else None,
            f"mixed_groups_expected_{when}": _mixed_share(list(right.values()), k, settings.num_generations)}


def _mixed_share(rights: Sequence[int], k: int, group: int) -> float | None:
    """The share of GRPO groups of ``group`` samples expected to mix right and wrong answers, at
    the estimated pass rates (what TRL's ``frac_reward_zero_std`` is, less, under a right/wrong reward)."""
    return round(sum(mixed_group_chance(r / k, group) for r in rights) / len(rights), 4) if rights else None

