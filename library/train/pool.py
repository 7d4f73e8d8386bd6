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

**Re-estimated as it learns** (``pool.refresh``): every GRPO group is ``num_generations`` fresh
samples of its prompt from the current policy, so it is a new estimate of that prompt's pass rate
at no extra cost. :class:`LivePoolSampler` draws each step's prompts from those still mixed by
their latest estimate (least drawn first), and the phase ends early once none is left:

>>> s = LivePoolSampler(["a", "b", "c"], {"a": 4, "b": 8, "c": 2}, k=8, prompts_per_step=1, group=2, repeat=1,
...                     max_steps=3, seed=0)
>>> s.prompts_for(1), s.prompts_for(2)       # "b" was 8/8 before RL: not drawn
(['c'], ['a'])
>>> s.observe(1, {"c": (2, 2)})               # step 1's group of "c": both right, so "c" is learned
>>> s.prompts_for(3), s.learned_after(3)      # step 3 sees step 1 (two steps back): only "a" is left
(['a'], False)
>>> s.observe(2, {"a": (0, 2)})               # step 2's group of "a": none right
>>> s.learned_after(3)                        # step 4 would see steps 1-2: nothing is mixed
True
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
               "right_kept": {q.id: right[q.id] for q in pool},  # the start's counts (grpo.pool.refresh begins there)
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



class LivePoolSampler:
    """GRPO's prompt order with pass rates re-estimated from its own groups (``grpo.pool.refresh``).

    A prompt's estimate is its latest group's right count (or the starting policy's ``first``
    count of ``k`` before it is drawn; unknown counts as mixed). Step ``t`` draws
    ``prompts_per_step`` prompts whose estimate is strictly between 0 and 1, the least drawn
    first (ties: a seeded order), filled with the least-drawn others when too few are mixed (a
    step keeps its shape). Step ``t`` reads only the groups of steps up to ``t - 2``: the data
    loader fetches a step's prompts up to one step ahead, so this is the rule that a fresh and a
    resumed phase both keep. It yields TRL's RepeatSampler layout: each prompt ``group`` times
    in a row, each step's block ``repeat`` times (TRL's steps per generation).
    """

    def __init__(self, ids: Sequence[str], first: dict[str, int] | None, *, k: int, prompts_per_step: int,
                 group: int, repeat: int, max_steps: int, seed: int):
        import random

        self.ids = list(ids)
        self.first = {i: (int(first[i]), k) for i in self.ids if first and i in first}
        self.group, self.max_steps = group, max_steps
        self.shape(prompts_per_step, repeat)
        order = list(range(len(self.ids)))
        random.Random(f"{seed}:live_pool").shuffle(order)
        self.tiebreak = {self.ids[j]: rank for rank, j in enumerate(order)}
        self.observed: dict[int, dict[str, tuple[int, int]]] = {}

    def shape(self, prompts_per_step: int, repeat: int) -> None:
        """Prompts a step (over all processes) and TRL's repeats of a step's block, as the trainer has them."""
        if prompts_per_step > len(self.ids):
            raise ValueError(f"grpo.pool.refresh: {prompts_per_step} prompts a step from a pool of {len(self.ids)}")
        self.prompts_per_step, self.repeat = prompts_per_step, repeat
        self._chosen = {}

    def observe(self, step: int, groups: dict[str, tuple[int, int]]) -> None:
        """Step ``step``'s groups: ``{prompt id: (right, samples)}``."""
        self.observed[int(step)] = dict(groups)

    def observe_episodes(self, episodes: Iterable[Any]) -> None:
        """The groups of logged GRPO rollouts (a step's, or a resumed phase's whole log)."""
        steps: dict[int, dict[str, list[int]]] = {}
        for ep in episodes:
            tally = steps.setdefault(int(ep.step), {}).setdefault(ep.ex_id, [0, 0])
            tally[0] += int(bool(ep.correct))
            tally[1] += 1
        for step, groups in steps.items():
            self.observe(step, {i: (r, n) for i, (r, n) in groups.items()})

    def estimates(self, step: int) -> dict[str, tuple[int, int] | None]:
        """Each prompt's latest ``(right, samples)`` as step ``step`` sees it (groups up to ``step - 2``)."""
        est: dict[str, tuple[int, int] | None] = {i: self.first.get(i) for i in self.ids}
        for s in sorted(t for t in self.observed if t <= step - 2):
            for i, rn in self.observed[s].items():
                if i in est:
                    est[i] = rn
        return est

    def mixed(self, step: int) -> list[str]:
        """The prompts still worth a group at ``step``: estimate strictly between 0 and 1, or none yet."""
        return [i for i, rn in self.estimates(step).items() if rn is None or 0 < rn[0] < rn[1]]

    def learned_after(self, step: int) -> bool:
        """Whether no prompt is left mixed for the step after ``step``: the phase has nothing to learn."""
        return not self.mixed(step + 1)

    def draws(self, upto: int) -> Counter:
        """How many groups of each prompt steps 1..``upto`` draw."""
        return Counter(i for t in range(1, upto + 1) for i in self.prompts_for(t))

    def prompts_for(self, step: int) -> list[str]:
        """The prompt ids of step ``step`` (1-based; the same on every process and on a resumed run)."""
        if step not in self._chosen:
            drawn = self.draws(step - 1)
            mixed = set(self.mixed(step))
            rank = sorted(self.ids, key=lambda i: (i not in mixed, drawn[i], self.tiebreak[i]))
            self._chosen[step] = rank[:self.prompts_per_step]
        return self._chosen[step]

    def sampler(self, index_of: dict[str, int]):
        """A torch Sampler over the phase's dataset rows (``index_of``: prompt id -> row)."""
        from torch.utils.data import Sampler

        live = self

        class _Live(Sampler):
            def __len__(self):
                return live.max_steps * live.prompts_per_step * live.group * live.repeat

            def __iter__(self):
                for step in range(1, live.max_steps + 1):
                    rows = [index_of[i] for i in live.prompts_for(step)]
                    for _ in range(live.repeat):
                        for row in rows:
                            yield from [row] * live.group

        return _Live()
