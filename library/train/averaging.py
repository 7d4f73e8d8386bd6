"""The weights averaged over the last steps of a training run (stochastic weight averaging).

SFT's last steps, at a learning rate decaying to zero, still move the model between answers that
follow a 4-5-hop chain to its end and answers that stop early; which one the last step lands on
changes with the seed and with rounding (docs/FINDINGS.md findings 50, 57). With
``sft.average_last: 0.25`` the run keeps a uniform average of the weights after each of the last
quarter of its optimizer steps (torch's ``AveragedModel``) and ends on that average instead of the
last step. The training trajectory itself is unchanged: the same steps, the same data order.

The average is saved with every checkpoint inside the window and read back when the run resumes
from one, so an interrupted run ends on the same average as an uninterrupted one.

>>> window_start(398, 0.25)      # steps 299-398 are averaged: 100 of them
299
>>> window_start(398, 0.0) is None
True
"""

from __future__ import annotations

import math
from pathlib import Path

from transformers import TrainerCallback

FILE = "averaged_weights.pt"
"""The running average's file inside a checkpoint folder."""


def window_start(max_steps: int, fraction: float) -> int | None:
    """The first optimizer step whose weights enter the average (steps are counted from 1), or
    None when ``fraction`` is 0."""
    if fraction <= 0:
        return None
    return math.floor(max_steps * (1 - fraction)) + 1  # the steps after that share of the run


class AverageLastSteps(TrainerCallback):
    """A Trainer callback: average the weights after each step from :func:`window_start` on, save
    the average with each checkpoint, and copy it into the model when training ends."""

    def __init__(self, fraction: float):
        self.fraction = fraction
        self.average = None
        self._checked_resume = False

    def _checkpoint(self, args, state) -> Path:
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        return Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        # the first step after a resume: state.global_step is the checkpoint's (transformers loads
        # the state after on_train_begin, so this is the first place that sees it)
        if self._checked_resume:
            return
        self._checked_resume = True
        saved = self._checkpoint(args, state) / FILE
        if state.global_step > 0 and saved.is_file():
            import torch
            from torch.optim.swa_utils import AveragedModel

            self.average = AveragedModel(model)
            self.average.load_state_dict(torch.load(saved, map_location="cpu", weights_only=True))

    def on_step_end(self, args, state, control, model=None, **kwargs):
        start = window_start(state.max_steps, self.fraction)
        if start is None or state.global_step < start:
            return
        if self.average is None:
            from torch.optim.swa_utils import AveragedModel

            self.average = AveragedModel(model)
        self.average.update_parameters(model)

    def on_save(self, args, state, control, **kwargs):
        if self.average is not None:
            import torch

            target = self._checkpoint(args, state) / FILE
            tmp = target.with_suffix(".tmp")  # written whole, then renamed: a kill leaves no half file
            torch.save(self.average.state_dict(), tmp)
            tmp.replace(target)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if self.average is None:
            return
        import torch

        with torch.no_grad():
            for p, a in zip(model.parameters(), self.average.module.parameters(), strict=True):
                p.copy_(a)
