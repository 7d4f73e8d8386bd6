"""``kgr train --backend torch|mlx|unsloth``: pick the backend, then run the one phase loop.

:func:`run_training_with_backend` is what the CLI calls. It first checks that the backend can
run here (``select_backend``), so on a machine that cannot run it the user gets the clear
BackendUnavailable message before any data is read or any folder is created; then it hands
the backend's phases (``library.train.backends.phases.PhaseBackend``) to ``library.train.pipeline.run_training``,
which writes the same run-folder contract for every backend:

- ``meta.json`` with ``backend`` (and ``backend_options``), ``phases_completed`` / ``status``,
  so ``--resume`` works the same way (and refuses a run of another backend);
- ``metrics.json``: per phase the SAME evaluation (``library.evaluation.phase.evaluate_phase``: greedy,
  ``library.model.generate`` on the transformers model with the phase's peft adapter), curves,
  timings, resources;
- ``episodes.jsonl``: eval episodes and RSFT/GRPO rollouts with the torch field names;
- ``adapters/<phase>/``: a peft adapter for every phase (mlx adapters are converted with
  ``library.train.backends.mlx_adapters.mlx_to_peft``; the native ones stay in ``adapters/<phase>-mlx/``).

The mlx path runs end to end in the test suite on Linux through mlx-cpu (tests/test_backend_mlx.py),
not yet on a Mac; the unsloth path is UNTESTED ON HARDWARE (no NVIDIA GPU was available);
see docs/BACKENDS.md for what is verified where.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from library.train.backends import BackendUnavailable, select_backend
from library.config import TrainConfig


def run_training_with_backend(config: TrainConfig, run_dir: str | Path, *, backend: str = "torch",
                              resume: bool = False, console: Console | None = None,
                              stop_after: str | None = None, load_in_4bit: bool = False,
                              max_seq_length: int | None = None, eval_device: str | None = None):
    """Run (or resume) every phase of ``config`` into ``run_dir`` with ``backend``; return the RunDir.

    ``backend``: ``"torch"`` (default; CPU/CUDA/MPS), ``"mlx"`` (Apple Silicon; Linux x86-64 via mlx-cpu) or
    ``"unsloth"`` (NVIDIA CUDA). Backend options: ``load_in_4bit`` / ``max_seq_length``
    (unsloth only), ``eval_device`` (mlx: ``"cpu"`` or ``"mps"`` for the torch evaluation,
    default cpu; unsloth: default ``"cuda"``).
    Raises ``BackendUnavailable`` (before touching ``run_dir``) when the platform lacks the backend.
    """
    select_backend(backend)  # raises BackendUnavailable with the reason and the fix
    check_multi_process(backend)
    if backend == "torch":
        if load_in_4bit or max_seq_length is not None or eval_device is not None:
            raise ValueError("load_in_4bit / max_seq_length / eval_device are options of the mlx and unsloth backends")
        from library.train.backends.torch_phases import TorchBackend

        phases = TorchBackend()
    else:
        if config.distribution.enabled:
            raise BackendUnavailable(f"the distribution experiment runs on the torch backend only; "
                                     f"disable distribution.enabled to train with {backend!r}")
        if backend == "mlx":
            if load_in_4bit or max_seq_length is not None:
                raise ValueError("load_in_4bit / max_seq_length are options of the unsloth backend")
            from library.train.backends.mlx_phases import MlxBackend

            phases = MlxBackend(eval_device=eval_device or "cpu")
        elif backend == "unsloth":
            from library.train.backends.unsloth_phases import UnslothBackend

            phases = UnslothBackend(load_in_4bit=load_in_4bit, eval_device=eval_device or "cuda",
                                    max_seq_length=max_seq_length or max(config.sft.max_length,
                                                                         config.rsft.max_length, 512))
        else:  # pragma: no cover - select_backend knows only these three
            raise BackendUnavailable(f"unknown backend {backend!r}")
    from library.train.pipeline import run_training

    return run_training(config, run_dir, backend=phases, resume=resume, console=console, stop_after=stop_after)


def world_size() -> int:
    """How many processes ``accelerate launch`` / torchrun started (1 for a plain run)."""
    from library.model.distributed import launched_world_size

    return launched_world_size()


def check_multi_process(backend: str = "torch") -> None:
    """A multi-process launch (``kgr train --processes N``, ``accelerate launch``) runs on the
    torch backend, whose phase loop is rank-aware (library/model/distributed.py, docs/SCALE_OUT.md).

    The mlx and unsloth backends are not: mlx trains in ``mlx_lm`` subprocesses on the one Apple
    GPU, and the unsloth phases sample RSFT's rollouts outside the trainers on one process, so N
    processes would each log their own copy. Those launches stop here, before anything is read
    or written, with what to run instead.
    """
    n = world_size()
    if n > 1 and backend != "torch":
        raise BackendUnavailable(
            f"this is a {n}-process launch (WORLD_SIZE={n}); only the torch backend trains across processes. "
            f"Run --backend {backend} as one process, or --backend torch across processes (docs/SCALE_OUT.md).")


__all__ = ["run_training_with_backend", "check_multi_process", "world_size", "BackendUnavailable"]
