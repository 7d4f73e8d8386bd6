"""What a training backend supplies to the one phase loop, ``library.train.pipeline.run_training``.

The loop owns everything the backends share, so it is written once: the run folder,
meta.json and its resume checks, which episodes an unfinished phase keeps, the
``trained.json`` markers, metrics.json, the evaluation after every phase and the end of the run.
A backend supplies two things:

- :meth:`PhaseBackend.train_phase`: train SFT, RSFT or GRPO and save the result under
  ``adapter_dir`` (a peft adapter; on torch with ``sft.method: full``, the whole SFT model),
  returning the ``training`` record metrics.json keeps for the phase (:func:`sft_info`,
  :func:`rsft_info`, :func:`grpo_info`);
- :meth:`PhaseBackend.eval_model`: the transformers model the phase's evaluation generates with.
  Every backend is evaluated by the same torch code on the same base weights, so the numbers of
  a torch, an mlx and an unsloth run compare in one table; the default puts the phase's saved
  adapter on that base.

:func:`start_backend` sets a backend up on a run's data, selection, rewards and model: the phase
loop does it before the first phase, an experiment on a finished run before it trains.

The backends: ``library.train.backends.torch_phases`` (the portable default), ``library.train.backends.mlx_phases``
and ``library.train.backends.unsloth_phases``.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from rich.console import Console

from library.evaluation.monitor import live_monitor
from library.model.distributed import main_process_first
from library.runs.folder import RunDir
from library.train.checkpoints import load_adapter
from library.train.data import DataBundle, Selection, fit_generation_lengths, load_data, make_selection
from library.train.rewards import RunRewards, run_rewards

# torch and transformers (the evaluation model) are imported inside the functions that load it
# (the CLI starts without them). The run's settings are a library.config.TrainConfig, passed in.


@dataclass
class RunContext:
    """What the loop has set up before the first phase, handed to the backend once."""

    config: Any  # library.config.TrainConfig, with the phases' generation windows
    run: RunDir
    data: DataBundle
    selection: Selection
    tokenizer: Any  # the evaluation model's tokenizer
    console: Console
    rewards: RunRewards

    @property
    def adapter_root(self) -> Path:
        return self.run.path / "adapters"


def start_backend(config: Any, run: RunDir, backend: "PhaseBackend", console: Console) -> tuple[RunContext, list[str]]:
    """Start ``backend`` on ``run``: the data and each phase's questions, the evaluation model
    (loaded once, on the main process first: a model converted and cached on first use is
    written once), the config with every generation window raised to the data's longest
    reference completion (and a line for each window raised), the run's rewards. Returns the
    context handed to the backend, and those lines. The data is read first: bad data stops
    before any model is loaded."""
    from library.model.load import load_model

    data = load_data(config)
    selection = make_selection(config, data)
    with main_process_first():
        base, tokenizer = load_model(config.model, device=backend.eval_device)
    config, raised = fit_generation_lengths(config, data.kg, selection, tokenizer)
    context = RunContext(config=config, run=run, data=data, selection=selection, tokenizer=tokenizer,
                         console=console, rewards=run_rewards(config, data.kg))
    backend.start(context, base)
    return context, raised


class PhaseBackend:
    """The interface ``run_training`` drives, with the defaults the non-torch backends share."""

    name = ""

    def __init__(self, *, eval_device: str = "cpu"):
        self.eval_device = eval_device  # where the evaluation model is loaded
        self.base: Any = None           # the evaluation model without any adapter
        self.ctx: RunContext | None = None

    def options(self) -> dict[str, Any]:
        """Backend settings recorded in meta.json (``backend_options``) when there are any."""
        return {}

    def keep_rollouts_on_redo(self, phase: str) -> bool:
        """Whether an unfinished phase's rollouts survive its redo (the phase reuses what its
        checkpoint covers); otherwise they are cut before the phase trains again."""
        return phase in ("rsft", "grpo")

    def start(self, ctx: RunContext, base) -> None:
        """Called once, before the first phase, with the loaded evaluation model."""
        self.ctx, self.base = ctx, base

    def train_phase(self, phase: str, ckpt_dir: Path, adapter_dir: Path) -> dict[str, Any]:
        """Train ``phase``, save its result under ``adapter_dir``, and return its ``training``
        record; an RL phase's record also carries ``rollouts`` (its episodes, as logged), which
        the loop's monitor block judges and takes out before the record is stored."""
        raise NotImplementedError

    def phase_monitor(self, phase: str, questions: Any):
        """The live reward-hacking monitor of an RL phase over its prompts (``questions``), printing
        to the run's console; None when ``monitor.enabled`` is off (library/evaluation/monitor.py)."""
        return live_monitor(phase, self.ctx.config.monitor, questions, self.ctx.data.kg, self.ctx.console)

    @contextmanager
    def eval_model(self, phase: str, adapter_dir: Path) -> Iterator[Any]:
        """The model ``phase``'s evaluation generates with: the base for ``base``, else the base
        with the phase's saved adapter (frozen), which is taken off again afterwards (unmerged)
        so that the next phase starts from the untouched base."""
        if phase == "base":
            yield self.base
            return
        model = load_adapter(self.base, adapter_dir, trainable=False)
        yield model
        self.base = model.unload()

    def policy(self, init_from: str):
        """A trainable policy starting from phase ``init_from``'s result (the distribution
        experiment's RSFT runs need one); only the torch backend has one."""
        raise NotImplementedError(f"the {self.name} backend has no torch policy for the distribution experiment")


# The ``training`` records of the phase functions' results (library.train.sft.run_sft,
# library.train.rsft.run_rsft, library.train.grpo.run_grpo), as the torch and unsloth backends return them.
def sft_info(res, selection) -> dict[str, Any]:
    return {"steps": res.steps, "n_examples": res.n_examples, "curve": res.curve,
            "seconds": res.seconds, "resumed_from": res.resumed_from,
            "trainable_params": res.trainable_params, "total_params": res.total_params,
            "ex_ids": [q.id for q in selection.sft]}  # what SFT trained on, for audits


def rsft_info(res, config, **overrides: Any) -> dict[str, Any]:
    info = {"n_prompts": res.n_prompts, "n_samples": res.n_samples, "n_winners": res.n_winners,
            "n_dropped_wrong": res.n_dropped_wrong, "sample_accuracy": res.sample_accuracy,
            "seconds_sampling": res.seconds_sampling, "seconds_training": res.seconds_training,
            "reused_rollouts": res.reused_rollouts, "distribution": config.rsft.distribution,
            "winner_ids": res.winner_ids,
            "curve": res.train.curve if res.train else [], "steps": res.train.steps if res.train else 0}
    info.update(overrides)
    info.update(res.extra)
    info["rollouts"] = res.episodes
    return info


def grpo_info(res) -> dict[str, Any]:
    return {"steps": res.steps, "n_prompts": res.n_prompts, "n_episodes": res.n_episodes,
            "curve": res.curve, "seconds": res.seconds, "resumed_from": res.resumed_from,
            "reward_weights": res.reward_weights,
            **({"stopped_by_monitor": res.stopped_by_monitor} if res.stopped_by_monitor else {}),
            "rollouts": res.episodes}
