"""GRPO with TRL's ``GRPOTrainer`` on the SFT (or RSFT) LoRA adapter, the KG as the reward model.

- **One reward function per component** (``correctness``, ``path``, ``spam``, ``edge``), so TRL
  logs each one (``rewards/<name>/mean``). ``reward_weights`` make their weighted sum equal the
  preset's total exactly: ``total = correctness + path_reward - spam_penalty + edge_reward``
  (edge weight 0 without ``+edges``; path/spam/edge weight 0 for a correctness-only preset, which
  is the ablation). The sum is checked against ``RewardModel``'s total for every completion.
- **Every sampled completion is an Episode** (phase ``grpo``, ``split`` the question's training
  split, ``step`` = the optimizer step the rollout feeds, ``sample_idx`` within its group,
  ``kind: "rollout"``). The reward functions share one scoring of each batch and write
  nothing (:class:`RolloutScorer`); a trainer callback writes the episodes at the end of each
  optimizer step (:class:`RolloutLog`).
- **KL to the starting policy** (paper: beta 0.05): the trainer receives a PeftModel whose
  trainable "default" adapter is the SFT/RSFT one; TRL then copies it into a frozen "ref"
  adapter and computes reference log-probs with that adapter active, so beta > 0 costs one
  extra forward pass, not a second model in memory.
- **CPU-safe** (``library.train.checkpoints.cpu_training_args``: bf16 autocast only on AMX), prompts are the chat-formatted strings from
  ``library.model.chat.format_prompt`` (TRL leaves string prompts untouched), sampling at the paper's
  temperature 0.6 / top_p 0.9.
- **Only training prompts**: :func:`library.train.data.assert_training_only` runs before the trainer
  is built and again on every batch the trainer scores.
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from library.config import GRPOSettings
from library.contracts import Episode
from library.contracts import ROLLOUT_KIND
from library.runs.reader import rollout_curve
from library.runs.rollouts import log_episodes, to_episodes
from library.train.data import assert_training_only

#: (TRL reward-function name, RewardModel component it returns)
COMPONENT_FUNCS: tuple[tuple[str, str], ...] = (
    ("correctness", "correctness"),
    ("path", "path_reward"),
    ("spam", "spam_penalty"),
    ("edge", "edge_reward"),
)


def component_weights(reward_config) -> dict[str, float]:
    """Weights that make ``sum(w * component) == total`` for ``reward_config`` (see library/scoring/reward.py).

    >>> from library.scoring.reward import RewardConfig
    >>> component_weights(RewardConfig.preset_named("paper+edges"))
    {'correctness': 1.0, 'path': 1.0, 'spam': -1.0, 'edge': 1.0}
    >>> component_weights(RewardConfig.preset_named("correctness"))
    {'correctness': 1.0, 'path': 0.0, 'spam': 0.0, 'edge': 0.0}
    """
    if reward_config.correctness_only:
        return {"correctness": 1.0, "path": 0.0, "spam": 0.0, "edge": 0.0}
    return {"correctness": 1.0, "path": 1.0, "spam": -1.0, "edge": 1.0 if reward_config.edge_verified else 0.0}


@dataclass
class ScoredBatch:
    """One batch of rollouts as TRL handed it to the reward functions, scored once."""

    step: int
    questions: list[Any]
    completions: list[str]
    scored: list[Any]

    def episodes(self) -> list[Episode]:
        return to_episodes(self.questions, self.completions, self.scored, phase="grpo", step=self.step,
                           kind=ROLLOUT_KIND)


class RolloutScorer:
    """Scores a batch once and hands each component to its reward function; writes nothing.

    TRL calls the reward functions one after another on the same batch, and gives them no
    scored batch to read; so the first call scores every completion (``RewardModel.score``) and
    checks that the weighted components sum to the total, and the others read that scoring.
    Each scored batch waits until :class:`RolloutLog` takes it at the end of the optimizer step.
    """

    def __init__(self, questions: Sequence[Any], reward_model, *, forbidden_ids: Iterable[str] = ()):
        self.by_id = {q.id: q for q in questions}
        self.reward_model = reward_model
        self.forbidden_ids = set(forbidden_ids)
        self.weights = component_weights(reward_model.config)
        self._key: tuple | None = None
        self._last: ScoredBatch | None = None
        self._pending: list[ScoredBatch] = []

    def scored_batch(self, ex_ids: Sequence[str], completions: Sequence[str], step: int) -> ScoredBatch:
        """The batch scored for these completions: scored on the first request, looked up after."""
        key = (step, tuple(ex_ids), tuple(completions))
        if key == self._key:
            return self._last
        questions = [self.by_id[i] for i in ex_ids]
        assert_training_only(questions, self.forbidden_ids)
        scored = [self.reward_model.score(q, c) for q, c in zip(questions, completions)]
        for s in scored:
            parts = s.reward.model_dump()
            weighted = sum(self.weights[name] * float(parts[comp]) for name, comp in COMPONENT_FUNCS)
            if not math.isclose(weighted, float(s.reward.total), rel_tol=1e-9, abs_tol=1e-9):
                raise RuntimeError(f"reward components do not sum to the total: {weighted} != {s.reward.total}")
        batch = ScoredBatch(step, questions, list(completions), scored)
        self._key, self._last = key, batch
        self._pending.append(batch)
        return batch

    def take_batches(self) -> list[ScoredBatch]:
        """The batches scored since the last call, oldest first (handed over, not kept)."""
        batches, self._pending = self._pending, []
        return batches

    def reward_function(self, name: str, component: str) -> Callable[..., list[float]]:
        def fn(prompts, completions, ex_id, trainer_state=None, **kwargs) -> list[float]:
            step = int(trainer_state.global_step) + 1 if trainer_state is not None else 0
            texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
            batch = self.scored_batch(list(ex_id), texts, step)
            return [float(getattr(s.reward, component)) for s in batch.scored]

        fn.__name__ = name
        return fn

    def reward_functions(self) -> tuple[list[Callable], list[float]]:
        funcs = [self.reward_function(name, comp) for name, comp in COMPONENT_FUNCS]
        return funcs, [self.weights[name] for name, _ in COMPONENT_FUNCS]


class RolloutLog:
    """The one place GRPO rollouts become episodes: :meth:`end_step`, which the trainer calls
    through :meth:`callback` at the end of every optimizer step, before any checkpoint of that
    step is saved (a checkpoint never covers a step whose rollouts are not in the log).

    Across N processes TRL hands each process its own slice of the step's completions, so each
    process scored only its slice. At the end of the step (which every process reaches at the
    same point) each batch's episodes are gathered in rank order (TRL's order of the global
    batch) onto every process, numbered per question over the whole step, and appended by the
    main process alone, so the log holds each rollout once and the monitor judges the same step
    everywhere.
    """

    def __init__(self, scorer: RolloutScorer, run, *, keep_steps: bool = False, live: Any = None):
        self.scorer = scorer
        self.run = run
        self.live = live  # a LivePoolSampler that re-estimates pass rates from each step's groups
        # keep_steps: hold each step's episodes until take_step() hands them to the monitor
        self.steps: dict[int, list[Episode]] | None = {} if keep_steps else None

    def end_step(self) -> list[Episode]:
        """Log the rollouts scored since the last call; returns their episodes (every process
        gets the whole step's, the main process alone writes them)."""
        logged: list[Episode] = []
        for batch in self.scorer.take_batches():
            episodes = log_episodes(self.run, batch.episodes())
            if self.steps is not None:
                self.steps.setdefault(batch.step, []).extend(episodes)
            logged.extend(episodes)
        if self.live is not None:
            self.live.observe_episodes(logged)
        return logged

    def take_step(self, step: int) -> list[Episode]:
        """The episodes logged for ``step`` (once: they are handed over, not kept)."""
        return (self.steps or {}).pop(step, [])

    def callback(self):
        from transformers import TrainerCallback

        log = self

        class _EndOfStep(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                log.end_step()

        return _EndOfStep()


@dataclass
class GRPOResult:
    adapter_dir: Path
    steps: int
    n_prompts: int
    n_episodes: int
    curve: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0
    resumed_from: str | None = None
    reward_weights: dict[str, float] = field(default_factory=dict)
    stopped_by_monitor: dict[str, Any] | None = None  # {"step", "rule"} when the monitor ended the phase
    learned_at: int | None = None  # grpo.pool.refresh: the step after which no prompt was left mixed
    draws: dict[str, int] = field(default_factory=dict)  # grpo.pool.refresh: groups drawn per prompt


def pipeline_rollout_func(tokenizer, settings: GRPOSettings, seed: int):
    """TRL ``rollout_func`` that samples GRPO's groups with :mod:`library.model.generate` instead of
    ``model.generate``: each distinct prompt is prefilled once and its KV cache shared by its
    group (benchmarks/generation.py: ~3.6x plain ``generate`` for groups on this CPU).

    TRL hands over its per-process batch, where every prompt appears ``num_generations`` times,
    and takes back one ``prompt_ids``/``completion_ids`` pair per entry in the same order.
    ``logprobs`` is None, as in TRL's own transformers path (no importance-sampling correction).
    Under a bfloat16 sampling precision (``generation.sampling_precision``; fp32 by default) the samples come from a bf16 copy of the current
    weights while the loss is computed in the training precision (fp32, or bf16 autocast), so
    sampler and trainer differ only by rounding (as with vLLM rollouts on GPU). Sampling is seeded per optimizer step and,
    across processes, per process (each samples its own slice of the step's groups).
    """
    from library.model.generate import generate_completions

    def rollout(prompts: list[str], trainer) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for p in prompts:
            counts[p] = counts.get(p, 0) + 1
        if len(set(counts.values())) != 1:
            raise ValueError(f"GRPO batch with uneven groups: {sorted(set(counts.values()))}")
        unique = list(counts)
        groups = generate_completions(
            trainer.model, tokenizer, unique, max_new_tokens=settings.max_completion_length, do_sample=True,
            temperature=settings.temperature, top_p=settings.top_p, num_return_sequences=counts[unique[0]],
            batch_size=len(prompts), progress=False,
            seed=seed * 100_003 + int(trainer.state.global_step) + 7_919 * trainer.accelerator.process_index,
            chat=False)
        taken = {p: iter(group) for p, group in zip(unique, groups)}
        prompt_ids, completion_ids = [], []
        for p in prompts:
            c = next(taken[p])
            prompt_ids.append(list(c.prompt_ids))
            completion_ids.append(list(c.token_ids))
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}

    return rollout


def _trainer_log_callback(sink: list[dict[str, Any]]):
    from transformers import TrainerCallback

    class _Sink(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs:
                sink.append({"step": int(state.global_step), **{k: v for k, v in logs.items() if isinstance(v, (int, float))}})

    return _Sink()


def _monitor_callback(monitor, rollout_log: RolloutLog):
    """Judges each optimizer step when the trainer logs it (``logging_steps=1``: every step, with
    the step's KL), and ends training with a checkpoint when the monitor stops the phase."""
    from transformers import TrainerCallback

    class _Monitor(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            step = int(state.global_step)
            episodes = rollout_log.take_step(step)  # empty for the run summary logged after the last step
            if not episodes:
                return
            kl = (logs or {}).get("kl")
            monitor.observe(step, episodes, kl if isinstance(kl, (int, float)) else None)
            if monitor.stop_report is not None:
                # the Trainer saves right after on_log when should_save is set, then leaves its loop
                control.should_save = True
                control.should_training_stop = True

    return _Monitor()


def _seed_monitor(monitor, run, resume_from: Path | None) -> None:
    """A resumed phase: judge the steps its checkpoint covers again, so the warm-up (and any
    stop) is the one the interrupted process saw; their KL is in the checkpoint's trainer state."""
    from library.evaluation.monitor import kl_by_step

    kl: dict[int, float] = {}
    state = Path(resume_from) / "trainer_state.json" if resume_from else None
    if state is not None and state.exists():
        kl = kl_by_step(json.loads(state.read_text(encoding="utf-8")).get("log_history", []))
    by_step: dict[int, list[Any]] = defaultdict(list)
    for ep in run.iter_episodes(phase="grpo"):
        by_step[ep.step].append(ep)
    for step in sorted(by_step):
        monitor.observe(step, by_step[step], kl.get(step))


def curve_from_episodes(episodes: Iterable[Any], log_history: list[dict[str, Any]] = ()) -> list[dict[str, float]]:
    """One point per step from the logged rollouts: means over that step's rollouts of the
    stored reward, verdict and format, plus the trainer's loss and KL from ``log_history``."""
    logs: dict[int, dict[str, Any]] = defaultdict(dict)
    for entry in log_history:  # several entries can share a step (the step's log, the run summary)
        if "step" in entry:
            logs[int(entry["step"])].update({k: v for k, v in entry.items() if k not in logs[int(entry["step"])]})
    curve = []
    for rollouts in rollout_curve(episodes):
        step = rollouts["step"]
        point: dict[str, float] = {k: rollouts[k] for k in ("step", "n", "reward_total", "path_coverage",
                                                              "valid_format", "accuracy")}
        log = logs.get(step, {})
        for src, dst in (("loss", "loss"), ("kl", "kl"), ("reward_std", "reward_std"),
                         ("frac_reward_zero_std", "frac_reward_zero_std"), ("learning_rate", "learning_rate")):
            value = log.get(src)
            if isinstance(value, (int, float)) and math.isfinite(value):
                point[dst] = float(value)
        curve.append(point)
    return curve


def micro_batches(completions_per_step: int, micro_batch: int | None) -> tuple[int, int]:
    """(completions per forward/backward, micro-batches per step) for a GRPO step.

    The micro-batch must divide the step's completions (TRL slices one generation batch into
    equal parts); otherwise the largest divisor not above it is used.

    >>> micro_batches(16, 4)
    (4, 4)
    >>> micro_batches(8, None)
    (8, 1)
    >>> micro_batches(12, 5)
    (4, 3)
    """
    if not micro_batch or micro_batch >= completions_per_step:
        return completions_per_step, 1
    size = max(d for d in range(1, micro_batch + 1) if completions_per_step % d == 0)
    return size, completions_per_step // size


def _learned_callback(live):
    """Ends the phase with a checkpoint once no prompt is left mixed (``grpo.pool.refresh``)."""
    from transformers import TrainerCallback

    class _Learned(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            step = int(state.global_step)
            if step < args.max_steps and live.learned_after(step):
                control.should_save = True
                control.should_training_stop = True

    return _Learned()


def run_grpo(model, tokenizer, questions: Sequence[Any], settings: GRPOSettings, reward_model, run, *,
             ckpt_dir: Path, adapter_dir: Path, seed: int, forbidden_ids: Iterable[str] = (),
             resume: bool = True, callbacks: list | None = None, monitor: Any = None,
             pass_rates: dict[str, int] | None = None):
    """Phase 4 on ``model`` (a PeftModel with a trainable "default" adapter). Returns ``(model, GRPOResult)``.

    ``questions`` is the RL pool (training questions held out of SFT). Rollouts already logged
    for steps after the checkpoint we resume from are dropped first (they are regenerated).

    ``monitor`` (a :class:`library.evaluation.monitor.PhaseMonitor`) judges every step from its rollouts
    and the trainer's KL; a stop saves a checkpoint at that step and ends training there (the
    adapter saved as the phase's result is the policy of that step).

    With ``settings.pool.refresh`` each step's prompts are drawn by :class:`library.train.pool.LivePoolSampler`
    from the pass rates of the phase's own groups, starting from ``pass_rates`` (the starting
    policy's right counts of ``settings.pool.k_samples``, if sampled); the phase ends when no
    prompt is left mixed.
    """
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from library.model.chat import format_prompt
    from library.runs.folder import RunDir
    from library.train.checkpoints import checkpoint_step, cpu_training_args, last_checkpoint, save_adapter, trainable_report

    questions = list(questions)
    forbidden_ids = set(forbidden_ids)
    assert_training_only(questions, forbidden_ids)
    run = run if isinstance(run, RunDir) else RunDir(run)
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    resume_from = last_checkpoint(ckpt_dir) if resume else None
    keep_upto = checkpoint_step(resume_from)
    from library.model.distributed import is_writer, wait_for_everyone

    if is_writer():
        filter_episodes(run, lambda ep: not (ep.get("phase") == "grpo" and int(ep.get("step", 0)) > keep_upto))
    wait_for_everyone()  # every process seeds the monitor from the log as cut

    max_steps = settings.max_steps
    if monitor is not None:
        _seed_monitor(monitor, run, resume_from)
        if monitor.stop_report is not None:  # the interrupted process had stopped here: go no further
            max_steps = min(max_steps, monitor.stop_report.step)
    live = None
    if settings.pool.refresh:
        from library.train.pool import LivePoolSampler

        live = LivePoolSampler([q.id for q in questions], pass_rates, k=settings.pool.k_samples,
                               prompts_per_step=min(settings.prompts_per_step, len(questions)),
                               group=settings.num_generations, repeat=1, max_steps=max_steps, seed=seed)
        live.observe_episodes(ep for ep in run.iter_episodes(phase="grpo") if ep.kind == ROLLOUT_KIND)
        if keep_upto and live.learned_after(keep_upto):  # the interrupted process had ended here
            max_steps = min(max_steps, keep_upto)
        live.max_steps = max_steps
    scorer = RolloutScorer(questions, reward_model, forbidden_ids=forbidden_ids)
    rollout_log = RolloutLog(scorer, run, keep_steps=monitor is not None, live=live)
    funcs, weights = scorer.reward_functions()
    rows = [{"prompt": format_prompt(tokenizer, q.prompt), "ex_id": q.id} for q in questions]
    completions_per_step = settings.prompts_per_step * settings.num_generations
    micro_batch, accumulation = micro_batches(completions_per_step, settings.micro_batch_completions)
    args = GRPOConfig(
        **cpu_training_args(
            output_dir=str(ckpt_dir),
            max_steps=max_steps,
            # One generation of completions_per_step a step, trained on in `accumulation`
            # micro-batches (TRL: steps_per_generation = gradient_accumulation_steps; its "dapo"
            # loss normalises by the whole generation batch's tokens, so the gradient is the same).
            per_device_train_batch_size=micro_batch,
            gradient_accumulation_steps=accumulation,
            num_generations=settings.num_generations,
            learning_rate=settings.learning_rate,
            beta=settings.beta,
            temperature=settings.temperature,
            top_p=settings.top_p,
            max_completion_length=settings.max_completion_length,
            loss_type=settings.loss_type,
            scale_rewards=settings.scale_rewards,
            reward_weights=weights,
            logging_steps=1,
            save_steps=settings.save_steps,
            seed=seed,
            data_seed=seed,
            remove_unused_columns=False,
            log_completions=False,
        )
    )
    trainer_logs: list[dict[str, Any]] = []
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL 1.x; we test it
    trainer_class = GRPOTrainer
    if live is not None:
        index_of = {q.id: i for i, q in enumerate(questions)}

        class _LivePoolTrainer(GRPOTrainer):
            def _get_train_sampler(self, dataset=None):
                live.shape(self.args.generation_batch_size // self.num_generations,
                           self.num_iterations * self.args.steps_per_generation)
                return live.sampler(index_of)

        trainer_class = _LivePoolTrainer
    trainer = trainer_class(
        model=model,
        reward_funcs=funcs,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[_trainer_log_callback(trainer_logs), rollout_log.callback(),
                   *([_monitor_callback(monitor, rollout_log)] if monitor is not None else []),
                   *([_learned_callback(live)] if live is not None else []), *(callbacks or [])],
        rollout_func=pipeline_rollout_func(tokenizer, settings, seed) if settings.pipeline_generator else None,
    )
    report = trainable_report(trainer.model)
    if report["non_lora_trainable"]:
        raise RuntimeError(f"base weights are not frozen: {report['non_lora_trainable'][:5]}")

    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    seconds = time.perf_counter() - start

    peft_model = trainer.model
    save_adapter(peft_model, Path(adapter_dir))
    stop = monitor.stop_report if monitor is not None else None
    if stop is not None:
        monitor.announce_stop(f"{ckpt_dir}/checkpoint-{stop.step}, {adapter_dir}")
    history = list(trainer.state.log_history)
    curve = curve_from_episodes(run.iter_episodes(phase="grpo"), history)
    peft_model.eval()
    steps = int(trainer.state.global_step)
    return peft_model, GRPOResult(
        adapter_dir=Path(adapter_dir), steps=steps, n_prompts=len(questions),
        n_episodes=sum(1 for ep in run.iter_episodes(phase="grpo") if ep.kind == ROLLOUT_KIND),
        curve=curve, seconds=seconds, resumed_from=str(resume_from) if resume_from else None,
        reward_weights=dict(scorer.weights),
        stopped_by_monitor={"step": stop.step, "rule": stop.rule} if stop is not None else None,
        # ended here by the learned callback, or by the interrupted process it resumes
        learned_at=steps if live is not None and steps < settings.max_steps and live.learned_after(steps) else None,
        draws=dict(live.draws(steps)) if live is not None else {},
    )


def filter_episodes(run, keep: Callable[[dict[str, Any]], bool]) -> int:
    """Rewrite episodes.jsonl keeping the lines ``keep`` accepts (atomic); returns how many were dropped.

    ``RunDir.drop_episodes`` drops a whole phase; a resumed phase needs finer cuts (GRPO keeps the
    rollouts up to its checkpoint, RSFT keeps its finished rollouts but not a half-done eval).
    """
    from library.jsonl import atomic_write_text, dumps_line, iter_jsonl

    path = run.episodes_path
    if not path.exists():
        return 0
    run._repair_tail()  # a line half-written by a kill would otherwise fail to parse
    kept, dropped = [], 0
    for _, obj in iter_jsonl(path):
        if keep(obj):
            kept.append(dumps_line(obj))
        else:
            dropped += 1
    if dropped:
        atomic_write_text(path, "".join(kept))
    return dropped
