"""What a training backend supplies to the one phase loop, ``library.train.pipeline.run_training``.

The loop owns everything the backends share, so it is written once: the run folder,
meta.json and its resume checks, which episodes an unfinished phase keeps, the
``trained.json`` markers, metrics.json, the evaluation after every phase and the end of the run.
A backend supplies two things:

- :meth:`PhaseBackend.train_phase`: train SFT, RSFT or GRPO and save the result under
  ``adapter_dir`` (a peft adapter; on torch with ``sft.method: full``, the whole SFT model),
  returning the ``training`` record metrics.json keeps for the phase;
- :meth:`PhaseBackend.eval_model`: the transformers model the phase's evaluation generates with.
  Every backend is evaluated by the same torch code on the same base weights, so the numbers of
  a torch, an mlx and an unsloth run compare in one table; the default puts the phase's saved
  adapter on that base.

The backends: ``library.train.backends.torch_phases`` (the portable default), ``library.train.backends.mlx_phases``
and ``library.train.backends.unsloth_phases``.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from rich.console import Console

from library.config import TrainConfig
from library.runs.folder import RunDir


@dataclass
class RunContext:
    """What the loop has set up before the first phase, handed to the backend once."""

    config: TrainConfig
    run: RunDir
    data: Any       # library.train.data.DataBundle (typed loosely: library.train.pipeline imports this module)
    selection: Any  # library.train.data.Selection
    tokenizer: Any  # the evaluation model's tokenizer
    console: Console

    @property
    def adapter_root(self) -> Path:
        return self.run.path / "adapters"


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

    #: whether the backend's GRPO phase can choose its prompts by pass rate (grpo.pool.by_pass_rate)
    pass_rate_pool = False

    def start(self, ctx: RunContext, base) -> None:
        """Called once, before the first phase, with the loaded evaluation model."""
        if ctx.config.grpo.enabled and ctx.config.grpo.pool.by_pass_rate and not self.pass_rate_pool:
            raise ValueError(f"grpo.pool.by_pass_rate: the {self.name} backend's GRPO samples its own pool; "
                             "choosing prompts by pass rate runs on the torch backend (--backend torch)")
        self.ctx, self.base = ctx, base

    def train_phase(self, phase: str, ckpt_dir: Path, adapter_dir: Path) -> dict[str, Any]:
        raise NotImplementedError

    def phase_monitor(self, phase: str, questions: Any):
        """The live reward-hacking monitor of an RL phase over its prompts (``questions``), printing
        to the run's console; None when ``monitor.enabled`` is off (library/evaluation/monitor.py)."""
        from library.evaluation.monitor import live_monitor

        return live_monitor(phase, self.ctx.config.monitor, questions, self.ctx.data.kg, self.ctx.console)

    @contextmanager
    def eval_model(self, phase: str, adapter_dir: Path) -> Iterator[Any]:
        """The model ``phase``'s evaluation generates with: the base for ``base``, else the base
        with the phase's saved adapter (frozen), which is taken off again afterwards (unmerged)
        so that the next phase starts from the untouched base."""
        if phase == "base":
            yield self.base
            return
        from library.train.checkpoints import load_adapter

        model = load_adapter(self.base, adapter_dir, trainable=False)
        yield model
        self.base = model.unload()

    def policy(self, init_from: str):
        """A trainable policy starting from phase ``init_from``'s result (the distribution
        experiment's RSFT runs need one); only the torch backend has one."""
        raise NotImplementedError(f"the {self.name} backend has no torch policy for the distribution experiment")
