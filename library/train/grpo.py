"""GRPO, the whole loop in one file: TRL's ``GRPOTrainer`` optimises the SFT (or RSFT) LoRA
adapter, the KG is the reward model, and every sampled completion becomes an episode of the run.

Read it in the order one optimizer step runs; :func:`run_grpo` at the end wires the parts:

1. **Sampling** (:func:`pipeline_rollout_func`): TRL hands over the step's prompts, each one
   ``num_generations`` times; the pipeline's batched generator samples each group from one
   shared prefill (temperature 0.6, top_p 0.9; seeded per step and per process).
2. **Scoring** (:class:`RolloutScorer`): the step's completions are scored once, through
   ``library.runs.rollouts.score_episodes`` as every evaluation is, into episodes (phase ``grpo``,
   ``split`` the question's training split, ``step`` the optimizer step they feed,
   ``sample_idx`` within the group, ``kind: "rollout"``). Each reward component reaches TRL as
   its own reward function (``correctness``, ``path``, ``spam``, ``edge``: TRL logs each as
   ``rewards/<name>/mean``); their ``reward_weights`` make the weighted sum the preset's total,
   ``correctness + path_reward - spam_penalty + edge_reward`` (edge weight 0 without ``+edges``;
   path, spam and edge 0 for a correctness-only preset, the ablation), checked per completion.
3. **Advantages** (TRL; :func:`grpo_config`): TRL sums the weighted components into one reward
   per completion and normalises it within its group, ``A = (r - mean(group)) / (std(group) +
   1e-4)`` (``scale_rewards="group"``, ``multi_objective_aggregation`` left at
   ``"sum_then_normalize"``). Nothing here re-implements it.
4. **Loss** (TRL): the clipped policy-gradient loss per token (one update per generation, so
   the probability ratio is 1 and it is the plain policy gradient of ``A``) plus ``beta`` times
   the KL to the starting adapter (paper: beta 0.05), with ``loss_type="dapo"``: summed over every
   completion token of the step's generation batch and divided by their number, so the gradient
   does not depend on how the step is cut into micro-batches (:func:`micro_batches`). The KL costs one extra
   forward pass, not a second model: the trainer receives a PeftModel whose trainable "default"
   adapter is the SFT/RSFT one, and TRL copies it into a frozen "ref" adapter.
5. **End of the step** (:class:`EndOfStep`): the step's episodes are appended to the run's log
   before any checkpoint of that step is saved (a checkpoint never covers a step whose rollouts
   are not in the log), then the reward-hacking monitor judges the step with its KL and may end
   the phase there, with a checkpoint.

Also: **CPU-safe** (``library.train.checkpoints.cpu_training_args``: bf16 autocast only when the run's precision is bf16);
prompts are the chat-formatted strings from ``library.model.chat.format_prompt`` (TRL leaves
string prompts untouched); **only training prompts**: :func:`library.train.data.assert_training_only`
runs before the trainer is built and again on every batch scored. A resumed phase reads the log
once, for the rollouts its checkpoint covers; the others stay in memory.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from library.contracts import ROLLOUT_KIND, Episode
from library.model.chat import format_prompt
from library.model.distributed import is_writer, wait_for_everyone
from library.runs.folder import RunDir
from library.runs.reader import rollout_curve
from library.runs.rollouts import log_episodes, score_episodes
from library.train.checkpoints import checkpoint_step, cpu_training_args, last_checkpoint, save_adapter, trainable_report
from library.train.data import assert_training_only

# torch, transformers, trl and datasets are imported inside the functions that use them (the CLI
# starts without them). The settings are library.config.GRPOSettings, passed in, not imported:
# this module stays below the config in the import levels.


# ============================================================================ 1. sampling
def pipeline_rollout_func(tokenizer, settings: Any, seed: int):
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
    ``settings.pipeline_generator: false`` leaves the sampling to TRL's own ``generate``.
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


# ============================================================================ 2. scoring
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


class RolloutScorer:
    """Scores a batch once and hands each component to its reward function; writes nothing.

    TRL calls the reward functions one after another on the same batch, and gives them no
    scored batch to read; so the first call scores every completion into episodes
    (``score_episodes``) and checks that the weighted components sum to the total, and the
    others read that scoring. Each batch's episodes wait until :class:`EndOfStep` takes them at
    the end of the optimizer step.
    """

    def __init__(self, questions: Sequence[Any], reward_model, *, forbidden_ids: Iterable[str] = ()):
        self.by_id = {q.id: q for q in questions}
        self.reward_model = reward_model
        self.forbidden_ids = set(forbidden_ids)
        self.weights = component_weights(reward_model.config)
        self._key: tuple | None = None
        self._last: list[Episode] = []
        self._pending: list[tuple[int, list[Episode]]] = []

    def scored_batch(self, ex_ids: Sequence[str], completions: Sequence[str], step: int) -> list[Episode]:
        """The episodes of these completions: scored on the first request, looked up after."""
        key = (step, tuple(ex_ids), tuple(completions))
        if key == self._key:
            return self._last
        questions = [self.by_id[i] for i in ex_ids]
        assert_training_only(questions, self.forbidden_ids)
        episodes = score_episodes(self.reward_model, questions, list(completions), phase="grpo", step=step,
                                  kind=ROLLOUT_KIND)
        for ep in episodes:
            parts = ep.reward.model_dump()
            weighted = sum(self.weights[name] * float(parts[comp]) for name, comp in COMPONENT_FUNCS)
            if not math.isclose(weighted, float(ep.reward.total), rel_tol=1e-9, abs_tol=1e-9):
                raise RuntimeError(f"reward components do not sum to the total: {weighted} != {ep.reward.total}")
        self._key, self._last = key, episodes
        self._pending.append((step, episodes))
        return episodes

    def take_batches(self) -> list[tuple[int, list[Episode]]]:
        """``(step, episodes)`` of the batches scored since the last call, oldest first (handed over, not kept)."""
        batches, self._pending = self._pending, []
        return batches

    def reward_function(self, name: str, component: str) -> Callable[..., list[float]]:
        def fn(prompts, completions, ex_id, trainer_state=None, **kwargs) -> list[float]:
            step = int(trainer_state.global_step) + 1 if trainer_state is not None else 0
            texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
            return [float(getattr(ep.reward, component)) for ep in self.scored_batch(list(ex_id), texts, step)]

        fn.__name__ = name
        return fn

    def reward_functions(self) -> tuple[list[Callable], list[float]]:
        funcs = [self.reward_function(name, comp) for name, comp in COMPONENT_FUNCS]
        return funcs, [self.weights[name] for name, _ in COMPONENT_FUNCS]


# ============================================================================ 3-4. advantages and loss (TRL)
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


def grpo_config(settings: Any, *, ckpt_dir: Path, max_steps: int, reward_weights: list[float], seed: int):
    """TRL's ``GRPOConfig``: where the advantages and the loss are decided (steps 3 and 4 of the
    module doc; TRL computes both). With the profiles' settings: ``scale_rewards="group"`` (the
    weighted reward normalised within each prompt's group) and ``loss_type="dapo"`` (normalised
    by the tokens of the whole generation batch), ``beta`` 0.05 (KL to the starting adapter).

    One generation of ``prompts_per_step * num_generations`` completions a step, trained on in
    ``accumulation`` micro-batches (TRL: ``steps_per_generation = gradient_accumulation_steps``;
    the "dapo" loss divides by the whole generation batch's tokens, so the gradient is the same).
    ``logging_steps=1``: the trainer logs every step, with its KL, which the monitor reads.
    """
    from trl import GRPOConfig

    micro_batch, accumulation = micro_batches(settings.prompts_per_step * settings.num_generations,
                                              settings.micro_batch_completions)
    return GRPOConfig(**cpu_training_args(
        output_dir=str(ckpt_dir),
        max_steps=max_steps,
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
        reward_weights=reward_weights,
        logging_steps=1,
        save_steps=settings.save_steps,
        seed=seed,
        data_seed=seed,
        remove_unused_columns=False,
        log_completions=False,
    ))


# ============================================================================ 5. end of the step
class EndOfStep:
    """What happens at the end of every optimizer step besides the update, as one trainer hook
    (:meth:`callback`), in the Trainer's order:

    - ``on_step_end`` (:meth:`log_rollouts`): the step's episodes go to the run's log. Across N
      processes TRL hands each process its own slice of the step's completions, so each process
      scored only its slice; every process reaches this point together, each batch's episodes
      are gathered in rank order (TRL's order of the global batch) onto every process, numbered
      per question over the whole step, and appended by the main process alone, so the log holds
      each rollout once and the monitor judges the same step everywhere.
    - ``on_log`` (:meth:`judge`; ``logging_steps=1``: every step, with the step's KL): the
      monitor judges the step; on a stop the trainer saves a checkpoint at that step (it saves
      right after ``on_log`` when ``should_save`` is set) and leaves its loop.

    Every episode logged stays in :attr:`logged`: the phase's curve and counts are read from
    memory, not from the log again.
    """

    def __init__(self, scorer: RolloutScorer, run, monitor: Any = None):
        self.scorer = scorer
        self.run = run
        self.monitor = monitor  # a library.evaluation.monitor.PhaseMonitor, or None
        self.logged: list[Episode] = []
        self._unjudged: dict[int, list[Episode]] = {}

    def log_rollouts(self) -> list[Episode]:
        """Log the rollouts scored since the last call; returns their episodes (every process
        gets the whole step's, the main process alone writes them)."""
        logged: list[Episode] = []
        for step, batch in self.scorer.take_batches():
            episodes = log_episodes(self.run, batch)
            if self.monitor is not None:
                self._unjudged.setdefault(step, []).extend(episodes)
            logged.extend(episodes)
        self.logged.extend(logged)
        return logged

    def judge(self, step: int, kl: float | None) -> bool:
        """The monitor's verdict on ``step`` from its logged rollouts and KL; True when it stops
        the phase. A step without rollouts (the run summary logged after the last step) is not judged."""
        episodes = self._unjudged.pop(step, [])
        if self.monitor is None or not episodes:
            return False
        self.monitor.observe(step, episodes, kl)
        return self.monitor.stop_report is not None

    def callback(self):
        from transformers import TrainerCallback

        hook = self

        class _EndOfStep(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                hook.log_rollouts()

            def on_log(self, args, state, control, logs=None, **kwargs):
                kl = (logs or {}).get("kl")
                if hook.judge(int(state.global_step), kl if isinstance(kl, (int, float)) else None):
                    control.should_save = True
                    control.should_training_stop = True

        return _EndOfStep()


# ============================================================================ the phase
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
    #: every rollout of the phase (those its checkpoint covered, then this process's), as logged
    episodes: list[Episode] = field(default_factory=list, repr=False)


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


def resume_rollouts(run: RunDir, resume_from: Path | None) -> list[Episode]:
    """Cut the log's GRPO rollouts back to what the checkpoint we resume from covers (later ones
    are regenerated) and return those it keeps: the one time the phase reads its log."""
    keep_upto = checkpoint_step(resume_from)
    if is_writer():
        run.keep_episodes(lambda ep: not (ep.get("phase") == "grpo" and int(ep.get("step", 0)) > keep_upto))
    wait_for_everyone()  # every process reads the log as cut
    if resume_from is None:
        return []  # nothing covered: every rollout (step >= 1) was cut
    return [ep for ep in run.iter_episodes(phase="grpo") if ep.kind == ROLLOUT_KIND]


def replay_monitor(monitor, earlier: Sequence[Episode], resume_from: Path | None) -> None:
    """A resumed phase: the monitor judges again the steps its checkpoint covers, with the KL of
    the checkpoint's trainer state, so the warm-up (and any stop) is the one the interrupted
    process saw. The KL is read as the phase's curve reads it (as the stored monitor block does)."""
    state = Path(resume_from) / "trainer_state.json" if resume_from else None
    history = json.loads(state.read_text(encoding="utf-8")).get("log_history", []) if state and state.exists() else []
    kl = {int(p["step"]): p["kl"] for p in curve_from_episodes(earlier, history) if "kl" in p}
    by_step: dict[int, list[Episode]] = defaultdict(list)
    for ep in earlier:
        by_step[ep.step].append(ep)
    for step in sorted(by_step):
        monitor.observe(step, by_step[step], kl.get(step))


def run_grpo(model, tokenizer, questions: Sequence[Any], settings: Any, reward_model, run, *,
             ckpt_dir: Path, adapter_dir: Path, seed: int, forbidden_ids: Iterable[str] = (),
             resume: bool = True, callbacks: list | None = None, monitor: Any = None):
    """Phase 4 on ``model`` (a PeftModel with a trainable "default" adapter). Returns ``(model, GRPOResult)``.

    ``questions`` is the RL pool (training questions held out of SFT). Rollouts already logged
    for steps after the checkpoint we resume from are dropped first (they are regenerated).

    ``monitor`` (a :class:`library.evaluation.monitor.PhaseMonitor`) judges every step from its rollouts
    and the trainer's KL; a stop saves a checkpoint at that step and ends training there (the
    adapter saved as the phase's result is the policy of that step).
    """
    from datasets import Dataset
    from trl import GRPOTrainer

    questions = list(questions)
    forbidden_ids = set(forbidden_ids)
    assert_training_only(questions, forbidden_ids)
    run = run if isinstance(run, RunDir) else RunDir(run)
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    resume_from = last_checkpoint(ckpt_dir) if resume else None
    earlier = resume_rollouts(run, resume_from)
    max_steps = settings.max_steps
    if monitor is not None:
        replay_monitor(monitor, earlier, resume_from)
        if monitor.stop_report is not None:  # the interrupted process had stopped here: go no further
            max_steps = min(max_steps, monitor.stop_report.step)

    scorer = RolloutScorer(questions, reward_model, forbidden_ids=forbidden_ids)  # 2. scoring
    end_of_step = EndOfStep(scorer, run, monitor)                                 # 5. end of the step
    funcs, weights = scorer.reward_functions()
    rows = [{"prompt": format_prompt(tokenizer, q.prompt), "ex_id": q.id} for q in questions]
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL 1.x; we test it
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=grpo_config(settings, ckpt_dir=ckpt_dir, max_steps=max_steps, reward_weights=weights, seed=seed),  # 3-4
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[end_of_step.callback(), *(callbacks or [])],
        rollout_func=pipeline_rollout_func(tokenizer, settings, seed) if settings.pipeline_generator else None,  # 1.
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
    episodes = earlier + end_of_step.logged
    peft_model.eval()
    return peft_model, GRPOResult(
        adapter_dir=Path(adapter_dir), steps=int(trainer.state.global_step), n_prompts=len(questions),
        n_episodes=len(episodes), curve=curve_from_episodes(episodes, list(trainer.state.log_history)),
        seconds=seconds, resumed_from=str(resume_from) if resume_from else None,
        reward_weights=dict(scorer.weights), episodes=episodes,
        stopped_by_monitor={"step": stop.step, "rule": stop.rule} if stop is not None else None,
    )
