"""Experiments that run beside the training pipeline, on a finished run folder.

The pipeline (``library.train.pipeline.run_training``) trains and evaluates the phases; an
experiment then asks one question of that run, trains what it needs from the run's saved
adapters, and adds its answer to the run's ``metrics.json`` under its own key:

- ``distribution`` (library/experiments/distribution.py): RSFT on easy against hard prompts;
- ``ablation`` (library/experiments/ablation.py): GRPO under another reward, paired against
  the main GRPO phase.

(The RSFT selection experiment, winners chosen by the KG reward against by correctness alone,
is research beside the product: research/selection.py, on :func:`run_profile` and
:func:`start_backend`.)

Each writes its episodes to a sub-run (``<run>/<experiment>/<condition>/``), never into the main
log, and is listed in ``meta.json`` ``phases_completed`` once done, so a killed experiment is
re-run and a finished one is skipped. ``kgr train`` calls :func:`run_experiments` after the
phases when the profile enables one.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from rich.console import Console

from library.config import TrainConfig, load_config
from library.experiments.ablation import run_ablation
from library.experiments.distribution import run_distribution
from library.model.distributed import is_writer, wait_for_everyone
from library.runs.folder import RunDir
from library.train.backends import phases
from library.train.backends.torch_phases import TorchBackend
from library.train.bookkeeping import comparable_config, config_differences

# torch and transformers are imported inside the functions that train (the CLI starts without them).

#: The experiments, in the order they run.
EXPERIMENTS = ("distribution", "ablation")


class ExperimentError(RuntimeError):
    """The run folder cannot host the experiment (unfinished, or trained with other settings)."""


def wanted_experiments(config: TrainConfig, meta: dict[str, Any]) -> list[str]:
    """The experiments ``config`` enables that the run has not finished yet."""
    done = set(meta.get("phases_completed") or ())
    return [name for name in EXPERIMENTS if getattr(config, name).enabled and name not in done]


def run_experiments(config: TrainConfig, run_dir: str | Path, *, backend: Any = None,
                    console: Console | None = None) -> RunDir:
    """Run every experiment ``config`` enables on the finished run in ``run_dir``.

    The run must be complete and trained with the same settings (the experiment sections
    aside); the phases' saved adapters are what the experiments start from.
    """
    from library.model.precision import run_precision

    run = RunDir.open(run_dir)
    meta = run.read_meta()
    if not wanted_experiments(config, meta):
        return run
    if meta.get("status") != "complete":
        raise ExperimentError(f"{run.path}: experiments run on a finished run (status: {meta.get('status')!r}); "
                              "finish it first with `kgr train --resume`")
    if comparable_config(config) != comparable_config(meta.get("config") or {}):
        raise ExperimentError(f"{run.path} was trained with other settings than this profile's "
                              f"({config_differences(meta.get('config') or {}, config)}); "
                              "an experiment needs the run's own profile and model")
    owned = run.lock() if is_writer() else contextlib.nullcontext()
    with owned, run_precision(config):
        return _run(config, run, run.read_meta(), backend, console or Console(stderr=True))


def run_profile(run: RunDir, profile: str | Path | None = None, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """The profile a finished run was trained with (``profile``, else the one its meta.json names)
    at the run's own seed, with its own model, data folder and graph, ``overrides`` on top (the
    seed stays the run's): what a sweep on the run's saved adapters loads. ``kgr train --seed N
    --model M --data-dir D`` writes none of them into the profile, and the profile's own seed
    would draw another selection (other SFT rows, RL prompts and dev questions) than the run's;
    its model another tokenizer and base; its data other questions."""
    meta = run.read_meta()
    profile = profile if profile is not None else meta.get("profile")
    if profile is None:
        raise ExperimentError(f"{run.path}: meta.json names no profile; give the run's own profile")
    trained = meta.get("config") or {}
    # what `kgr train` flags set beside the profile (--model, --data-dir, --kg), under the caller's overrides
    own = {key: trained[key] for key in ("model", "data_dir", "kg_path") if isinstance(trained.get(key), str)}
    seed = {"seed": meta["seed"]} if isinstance(meta.get("seed"), int) else {}
    return load_config(profile, overrides={**own, **(overrides or {}), **seed})


def start_backend(config: TrainConfig, run: RunDir, backend: Any = None, console: Console | None = None):
    """A finished run's data, selection, rewards and model, as its phases had them, with the
    backend (default: torch) started on them: ``(config, context, backend)``, ``config`` with the
    phases' own generation windows, ``backend.policy(phase)`` / ``backend.rl_base()`` ready. What
    every experiment (and a sweep judging a run's saved adapters) starts from; the phase loop
    starts its backend the same way (``library.train.backends.phases.start_backend``)."""
    backend = backend if backend is not None else TorchBackend()
    context, _ = phases.start_backend(config, run, backend, console or Console(stderr=True))
    return context.config, context, backend


def _run(config: TrainConfig, run: RunDir, meta: dict[str, Any], backend: Any, console: Console) -> RunDir:
    from transformers import set_seed

    writer = is_writer()
    config, context, backend = start_backend(config, run, backend, console)
    data, selection, tokenizer, rewards = context.data, context.selection, context.tokenizer, context.rewards
    metrics = run.read_metrics()
    completed = list(meta.get("phases_completed") or ())
    for name in wanted_experiments(config, meta):
        set_seed(config.seed)
        if name == "distribution":
            metrics[name] = run_distribution(backend.policy, tokenizer, config, data, selection, rewards, run, console,
                                             main_rsft=metrics.get("training", {}).get("rsft"))
        else:
            metrics[name] = run_ablation(backend.policy, tokenizer, config, data, selection, rewards, run, console)
        completed = [p for p in completed if p != name] + [name]
        meta["phases_completed"] = list(completed)
        if writer:
            run.write_metrics(metrics)
            run.write_meta(meta)
        wait_for_everyone()
    return run
