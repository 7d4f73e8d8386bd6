"""Rejection-sampling fine-tuning (RSFT): sample, score with the KG reward, keep the best, train on it.

The public attempt's headline number came from rejection sampling **on the evaluation
questions**. Here the prompts come only from the training splits (``train`` = 1-3 hops,
``train_hard`` = held-out 4-5-hop training questions, of which ``prompt_hops: [next]`` takes the
4-hop ones), and :func:`assert_training_only` raises before any sampling if a prompt is an eval
or dev question (by split, by id, or by the ``-shuf`` copy).

Per prompt we draw K completions from the SFT adapter, score each with the reward model, and
keep the best by ``(total, correctness, path coverage, -trace length)``: the reward decides,
ties go to the correct one, then to the one that covers more of the path, then to the shorter
trace (less room for padding). **Prompts whose best sample is still wrong are dropped**:
training on a wrong answer would teach it, and the gold completion is not used here (that
would just be SFT again); how many were dropped is logged.

Every sample is logged as an Episode (phase ``rsft``, ``kind: "rollout"``, ``sample_idx``,
``selected`` on the winner), so what RSFT trained on can be audited from episodes.jsonl alone.
The winners then continue training the SFT adapter with the same completion-only SFTTrainer.

The selection experiment (research/selection.py, beside the product) asks what the KG reward adds here:
:func:`winners_from_rollouts` picks again from the same logged samples by correctness alone, and
:func:`train_winners` trains either choice the same way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from library.contracts import ROLLOUT_KIND, Episode
from library.model.distributed import gather, is_writer, num_processes, process_index, shard, wait_for_everyone
from library.runs.folder import RunDir
from library.runs.rollouts import log_episodes, score_episodes
from library.scoring.answer_format import clean_completion
from library.train.checkpoints import save_adapter
from library.train.data import assert_training_only
from library.train.finetune import sft_rows, train_lora

# torch and trl are imported inside the functions that sample and train (the CLI starts without
# them). The settings are library.config.RSFTSettings, passed in, not imported: this module stays
# below the config in the import levels.

ROLLOUTS_DONE = "rollouts.done"


#: How a prompt's winner is chosen from its samples: ``reward`` ranks them by the KG reward
#: (:func:`rank_key`; what the RSFT phase trains on), ``correctness`` takes the first right sample
#: in sampling order, blind to the path (what an outcome-only reward could choose).
SELECTION_RULES = ("reward", "correctness")
#: What a kept winner must be (``rsft.winners``): right, or right and grounded.
WINNER_RULES = ("correct", "grounded")


def _trace_len(parsed: Any) -> int:
    return len(getattr(parsed, "trace_text", "") or "")


def rank_key(parsed: Any, reward: Any) -> tuple:
    """Sort key, larger is better: total, then correctness, then coverage, then shorter trace."""
    return (float(reward.total), float(reward.correctness), float(reward.path_coverage), -_trace_len(parsed))


@dataclass
class RSFTResult:
    n_prompts: int
    n_samples: int
    n_winners: int
    n_dropped_wrong: int
    winner_ids: list[str]
    sample_accuracy: float
    train: Any = None  # LoraTrainResult
    seconds_sampling: float = 0.0
    seconds_training: float = 0.0
    reused_rollouts: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    #: every sample as logged (or, when reused, as read back): what the loop's monitor block judges
    episodes: list[Episode] = field(default_factory=list, repr=False)


def score_and_select(questions: Sequence[Any], completions: Sequence[Sequence[str]], reward_model,
                     *, winners_rule: str = "correct", **fields: Any) -> tuple[list[Episode], list[tuple[Any, str]]]:
    """Score every sample; return (episodes, winners as (question, completion)).

    A winner is the best-ranked sample of its prompt, and only if it is correct; with
    ``winners_rule="grounded"``, the best-ranked of its right samples that are also grounded (the
    TRACE states every gold edge in order: the graph checked every hop, not only the letter), if
    any. ``fields`` go on every episode (e.g. ``backend="mlx"``).
    """
    if winners_rule not in WINNER_RULES:
        raise ValueError(f"unknown winners rule {winners_rule!r}; expected one of {', '.join(WINNER_RULES)}")
    episodes, winners = [], []
    for q, samples in zip(questions, completions):
        group = score_episodes(reward_model, [q] * len(samples), samples, phase="rsft", step=0, kind=ROLLOUT_KIND,
                               **fields)
        # "grounded" ranks only the right, grounded samples: a reward without an edge term could
        # rank an ungrounded right answer above a grounded one
        pool = [i for i in range(len(group)) if group[i].correct and group[i].grounded] \
            if winners_rule == "grounded" else range(len(group))
        best = max(pool, key=lambda i: rank_key(group[i].parsed, group[i].reward)) if pool else None
        keep = best is not None and group[best].correct
        episodes += [ep.model_copy(update={"selected": keep and i == best}) for i, ep in enumerate(group)]
        if keep:
            winners.append((q, samples[best]))
    return episodes, winners


def winners_from_rollouts(episodes: Iterable[Episode], questions_by_id: dict[str, Any],
                          rule: str = "reward") -> list[tuple[Any, str]]:
    """The (question, completion) pairs a selection rule trains on, from RSFT's logged rollouts,
    in the order the prompts were sampled.

    ``reward``: the samples the phase marked ``selected`` (its winner under ``rsft.winners``).
    ``correctness``: each prompt's first right sample by ``sample_idx`` (the samples of a group
    are independent draws, so the first right one is a random right one).

    >>> from library.contracts import Episode
    >>> def ep(i, ok, cov):
    ...     return Episode(phase="rsft", step=0, ex_id="q", split="train", prompt="p", completion=f"c{i}",
    ...         parsed={"answer": "A", "trace_text": "", "trace_entities": [], "path_entities": [],
    ...                 "valid_format": True, "claims": []},
    ...         reward={"correctness": 1.0 if ok else -1.0, "path_coverage": cov, "path_reward": cov,
    ...                 "spam_penalty": 0.0, "total": (1.0 if ok else -1.0) + cov},
    ...         kind="rollout", correct=ok, sample_idx=i, selected=(i == 2))
    >>> group = [ep(0, False, 1.0), ep(1, True, 0.0), ep(2, True, 1.0)]
    >>> [c for _, c in winners_from_rollouts(group, {"q": "question"}, "reward")]
    ['c2']
    >>> [c for _, c in winners_from_rollouts(group, {"q": "question"}, "correctness")]
    ['c1']
    """
    if rule not in SELECTION_RULES:
        raise ValueError(f"unknown selection rule {rule!r}; expected one of {', '.join(SELECTION_RULES)}")
    groups: dict[str, list[Episode]] = {}
    for ep in episodes:
        groups.setdefault(ep.ex_id, []).append(ep)
    winners = []
    for ex_id, group in groups.items():
        if rule == "reward":
            chosen = [ep for ep in group if ep.selected]
        else:
            chosen = [ep for ep in sorted(group, key=lambda e: e.sample_idx or 0) if ep.correct][:1]
        winners += [(questions_by_id[ex_id], ep.completion) for ep in chosen]
    return winners


def sample_completions(model, tokenizer, questions: Sequence[Any], *, k: int, temperature: float, top_p: float,
                       max_new_tokens: int, batch_size: int, seed: int) -> list[list[str]]:
    """``k`` sampled completions per question from the current adapter (grouped per question): RSFT's
    samples are drawn here.

    Across N processes (library/model/distributed.py) each samples a contiguous slice of the prompts
    with its own seed (``seed * N + rank``: one process keeps ``seed``), and the groups are
    gathered in prompt order onto every process, so every process picks the same winners.
    """
    from library.model.generate import generate

    mine = shard(questions)
    groups = []
    if mine:
        flat = generate(model, tokenizer, [q.prompt for q in mine], max_new_tokens=max_new_tokens, do_sample=True,
                        temperature=temperature, top_p=top_p, num_return_sequences=k, batch_size=batch_size,
                        seed=seed * num_processes() + process_index())
        flat = [getattr(x, "text", x) for x in flat]
        if flat and isinstance(flat[0], (list, tuple)):
            groups = [list(x) for x in flat]
        elif len(flat) != k * len(mine):
            raise RuntimeError(f"expected {k * len(mine)} samples, got {len(flat)}")
        else:
            groups = [list(flat[i * k:(i + 1) * k]) for i in range(len(mine))]
    out = gather(groups)
    if len(out) != len(questions):
        raise RuntimeError(f"gathered {len(out)} sample groups for {len(questions)} prompts")
    return out


def sample_rsft(model, tokenizer, questions: Sequence[Any], settings: Any, seed: int) -> list[list[str]]:
    """RSFT's K samples per prompt with its settings."""
    return sample_completions(model, tokenizer, questions, k=settings.k_samples, temperature=settings.temperature,
                              top_p=settings.top_p, max_new_tokens=settings.max_new_tokens,
                              batch_size=settings.gen_batch_size, seed=seed)


def run_rsft(model, tokenizer, questions: Sequence[Any], settings: Any, reward_model, run, *,
             ckpt_dir: Path, adapter_dir: Path, seed: int, forbidden_ids: Iterable[str] = (),
             resume: bool = True, callbacks: list | None = None, monitor: Any = None):
    """Phase 3 on ``model`` (a PeftModel whose "default" adapter is the trainable SFT adapter).

    Rollouts are written to the run's episodes once and marked done (``<ckpt_dir>/rollouts.done``);
    a resumed run rebuilds the winners from those episodes instead of sampling again, so a
    kill during training never logs a second, different set of samples.

    ``monitor`` (a :class:`library.evaluation.monitor.PhaseMonitor`) judges the round's rollouts before
    any training; when it stops the phase, the winners are not trained on: the policy that
    sampled them is saved as the phase's adapter, as when no sample was correct.
    """
    questions = list(questions)
    assert_training_only(questions, forbidden_ids)
    by_id = {q.id: q for q in questions}
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    done = ckpt_dir / ROLLOUTS_DONE
    run = run if isinstance(run, RunDir) else RunDir(run)

    t0 = time.perf_counter()
    reused = False
    if resume and done.exists():
        episodes = [ep for ep in run.iter_episodes(phase="rsft") if ep.kind == ROLLOUT_KIND]
        winners = winners_from_rollouts(episodes, by_id, "reward")
        reused = True
    else:
        # Anything of this phase already in the log is from an interrupted attempt: start clean.
        if is_writer():
            run.drop_episodes("rsft")
        model.eval()
        # every process holds every sample group (gathered), so each scores and picks the same winners
        completions = sample_rsft(model, tokenizer, questions, settings, seed)
        episodes, winners = score_and_select(questions, completions, reward_model, winners_rule=settings.winners)
        episodes = log_episodes(run, episodes, gathered=True)  # as logged: what the result hands on
        if is_writer():
            done.write_text(f"{len(episodes)}\n", encoding="utf-8")
        wait_for_everyone()
    t_sample = time.perf_counter() - t0

    n_samples = len(episodes)
    n_correct = sum(1 for ep in episodes if ep.correct)
    winner_qs = [q for q, _ in winners]
    result = RSFTResult(
        n_prompts=len(questions), n_samples=n_samples, n_winners=len(winners),
        n_dropped_wrong=len(questions) - len(winners), winner_ids=[q.id for q in winner_qs],
        sample_accuracy=n_correct / n_samples if n_samples else 0.0,
        seconds_sampling=t_sample, reused_rollouts=reused, episodes=episodes,
    )
    stop = None
    if monitor is not None:
        monitor.observe(0, episodes)  # RSFT is one round of samples: step 0, as its episodes say
        stop = monitor.stop_report
    if stop is not None or not winners:
        # Nothing to learn from (nothing correct, or samples that game the reward): the adapter
        # stays the one that sampled them, saved as this phase's result.
        save_adapter(model, Path(adapter_dir))
        if stop is not None:
            monitor.announce_stop(adapter_dir)
            result.extra["stopped_by_monitor"] = {"step": stop.step, "rule": stop.rule}
        result.extra["skipped_training"] = "stopped by the monitor" if stop is not None else "no correct samples"
        return model, result

    t1 = time.perf_counter()
    model, result.train = train_winners(model, tokenizer, winners, settings, ckpt_dir=ckpt_dir, adapter_dir=adapter_dir,
                                        seed=seed, forbidden_ids=forbidden_ids, resume=resume, callbacks=callbacks)
    result.seconds_training = time.perf_counter() - t1
    return model, result


def train_winners(model, tokenizer, winners: Sequence[tuple[Any, str]], settings: Any, *,
                  ckpt_dir: Path, adapter_dir: Path, seed: int, forbidden_ids: Iterable[str] = (),
                  resume: bool = True, callbacks: list | None = None):
    """Train the adapter of ``model`` on the winners with the completion-only SFTTrainer; returns
    ``(model, LoraTrainResult)``. The RSFT phase and the selection experiment both train here, and
    both are checked here: a winner that is an eval question (by split, id or ``-shuf`` copy) raises."""
    assert_training_only([q for q, _ in winners], forbidden_ids)  # what we train on, not only what we sampled

    rows = sft_rows(tokenizer, ((q.prompt, clean_completion(c)) for q, c in winners))
    return train_lora(
        model, tokenizer, rows, ckpt_dir=ckpt_dir, adapter_dir=adapter_dir,
        learning_rate=settings.learning_rate, max_steps=settings.max_steps, batch_size=settings.batch_size,
        max_length=settings.max_length, seed=seed, save_steps=settings.save_steps, resume=resume,
        callbacks=callbacks,
    )
