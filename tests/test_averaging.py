"""Weights averaged over the last steps (library/train/averaging.py): training ends on the mean of
the window's weights, the trajectory is the plain run's, and a run interrupted inside the window
resumes to the same average."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from transformers import TrainerCallback  # noqa: E402

from library.model.load import load_model  # noqa: E402
from library.train.averaging import FILE, window_start  # noqa: E402
from library.train.sft import build_sft_trainer, sft_rows  # noqa: E402

pytestmark = [pytest.mark.train, pytest.mark.slow]

EXAMPLES = [(f"Start at node {i}. It leads to what? (1 step)\nA) a\nB) b\nC) c\nD) d",
             f"TRACE: node {i} leads to node {i + 1}.\nANSWER: {'ABCD'[i % 4]}") for i in range(16)]
STEPS = 8


class Snapshots(TrainerCallback):
    """The weights after every optimizer step (registered before the averaging callback's copy)."""

    def __init__(self):
        self.after: dict[int, list[torch.Tensor]] = {}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.after[state.global_step] = [p.detach().clone() for p in model.parameters()]


class StopAt(TrainerCallback):
    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True
            control.should_save = True


def train(tmp_path, name: str, *, average_last: float, callbacks=(), resume: bool = False, ckpt=None):
    torch.manual_seed(0)
    model, tok = load_model("tiny")
    trainer = build_sft_trainer(model, tok, sft_rows(tok, EXAMPLES), ckpt_dir=ckpt or tmp_path / name,
                                learning_rate=1e-2, max_steps=STEPS, batch_size=2, max_length=256, seed=0,
                                full=True, save_steps=6, callbacks=list(callbacks), average_last=average_last)
    last = None
    if resume:
        from library.train.checkpoints import last_checkpoint

        last = str(last_checkpoint(ckpt))
    trainer.train(resume_from_checkpoint=last)
    return [p.detach().clone() for p in trainer.model.parameters()]


def test_the_window_is_the_last_fraction_of_the_steps():
    assert window_start(8, 0.5) == 5 and window_start(398, 0.25) == 299
    assert window_start(10, 0.0) is None


def test_training_ends_on_the_mean_of_the_windows_weights(tmp_path):
    snaps = Snapshots()
    averaged = train(tmp_path, "avg", average_last=0.5, callbacks=[snaps])
    plain_snaps = Snapshots()
    plain = train(tmp_path, "plain", average_last=0.0, callbacks=[plain_snaps])
    for step in range(1, STEPS + 1):  # the same trajectory, step by step
        for a, b in zip(snaps.after[step], plain_snaps.after[step]):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    window = range(window_start(STEPS, 0.5), STEPS + 1)
    for i, got in enumerate(averaged):
        want = torch.stack([snaps.after[s][i] for s in window]).mean(0)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert any(not torch.equal(a, b) for a, b in zip(averaged, plain))  # the last step is not the average


def test_a_run_resumed_inside_the_window_ends_on_the_same_average(tmp_path):
    whole = train(tmp_path, "whole", average_last=0.5)
    ckpt = tmp_path / "cut"
    train(tmp_path, "cut", average_last=0.5, callbacks=[StopAt(6)], ckpt=ckpt)  # killed after step 6's checkpoint
    assert (ckpt / "checkpoint-6" / FILE).is_file()
    resumed = train(tmp_path, "cut", average_last=0.5, resume=True, ckpt=ckpt)
    for a, b in zip(whole, resumed):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
