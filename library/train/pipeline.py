"""The one phase loop: base -> SFT -> RSFT -> GRPO, each followed by evaluation, into one run folder.

``run_training(config, run_dir, backend=...)`` is what ``kgr train`` calls (through
``library.train.backends.pipeline``, which picks the backend), and it reads as
:func:`setup` -> :func:`run_phase` for every phase not yet completed -> :func:`finish`. A backend
(``library.train.backends.phases``) only trains a phase and gives the model its evaluation
generates with; resume checks, episode bookkeeping, evaluation and metrics are here. Experiments
(library/experiments) run beside this loop, on the finished run. The run folder gets:

- ``meta.json``: every setting (the whole TrainConfig), the backend, seed, data sha256 hashes, library and
  package versions, platform, model info, reward configs, which questions each phase may use
  (the GRPO pool ids, counts), and ``phases_completed`` (resume state).
- ``metrics.json``: per split and phase (``eval``, ``eval_shuffled``, ``train_sample``), curves
  per phase, ``timings`` per phase (training and eval separately), ``resources`` (peak RSS),
  ``comparisons`` (paired differences between phases).
- ``episodes.jsonl``: every eval completion and every RSFT/GRPO rollout.
- ``adapters/<phase>/`` and ``checkpoints/<phase>/`` (git-ignored): the LoRA adapters and the
  trainer checkpoints that make a killed run resumable.

Resume: a phase is listed in ``phases_completed`` only once its training *and* its eval are
done. On ``--resume`` completed phases are skipped; the first incomplete one is redone from
its newest checkpoint, and the episodes it had logged are cut back to what the checkpoint
covers (eval episodes of an unfinished phase are always redone), so no episode is duplicated.

Data discipline: SFT trains on train.jsonl minus the GRPO pool (the paper keeps a disjoint RL
set); RSFT samples training prompts only (easy: train, hard: train_hard); GRPO samples the pool.
Every training phase asserts that no eval or eval_shuffled id reaches it.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import platform
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console
from pydantic import ValidationError

from library.config import TrainConfig
from library.runs.folder import RunDir
from library.train.data import DataBundle, Selection, fit_generation_lengths, load_data, make_selection
from library.evaluation.monitor import monitor_block
from library.evaluation.phase import evaluate_phase

EVAL_SPLIT_KEYS = ("eval", "eval_shuffled", "train_sample")
#: metrics.json split key -> the Episode.split its episodes carry
EPISODE_SPLIT = {"eval": "eval", "eval_shuffled": "eval_shuffled", "train_sample": "train"}
TRAINED_MARKER = "trained.json"


class ResumeError(RuntimeError):
    """The run folder exists but cannot be resumed with this config (or resume was not asked for)."""


# ----------------------------------------------------------------------------- meta
def _versions() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, Any] = {"python": platform.python_version()}
    for pkg in ("torch", "transformers", "peft", "trl", "accelerate", "datasets"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def platform_info(threads: int | None) -> dict[str, Any]:
    import os

    import torch

    from library.model.precision import (bf16_matmul_speedup, bf16_matrix_units, compute_precision,
                                         generation_precision, sampling_precision)

    info = _versions()
    info.update({
        "os": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "requested_threads": threads,
        "precision": compute_precision(),
        "generation_precision": generation_precision(),
        "sampling_precision": sampling_precision(),
        "bf16_matrix_units": bf16_matrix_units("cuda" if torch.cuda.is_available() else "cpu"),
        # fp32 / bf16 time of one MLP matmul: why generation's "auto" chose what it chose
        "bf16_matmul_speedup": None if torch.cuda.is_available() else round(bf16_matmul_speedup(), 2),
        "cuda": torch.cuda.is_available(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    })
    return info


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024, 1)


def build_meta(config: TrainConfig, run: RunDir, data: DataBundle, selection: Selection, model_info: dict[str, Any]) -> dict[str, Any]:
    from library import __version__
    from library.scoring.reward import RewardConfig

    return {
        "run_id": run.run_id,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "profile": config.profile,
        "model": model_info,
        "seed": config.seed,
        "hyperparameters": {
            "sft": config.sft.model_dump(mode="json"),
            "rsft": config.rsft.model_dump(mode="json"),
            "grpo": config.grpo.model_dump(mode="json"),
            "eval": config.eval.model_dump(mode="json"),
            "distribution": config.distribution.model_dump(mode="json"),
        },
        "config": config.to_meta(),
        "reward": {
            "preset": config.grpo.reward_preset,
            "eval": RewardConfig.preset_named(config.eval.reward_preset).as_dict(),
            "rsft": RewardConfig.preset_named(config.rsft.reward_preset).as_dict(),
            "grpo": RewardConfig.preset_named(config.grpo.reward_preset).as_dict(),
        },
        "library_version": __version__,
        "data": data.hashes,
        "platform": platform_info(config.threads),
        "selection": selection.summary(),
        "phases": config.phases(),
        "phases_completed": [],
        "status": "running",
    }


# ----------------------------------------------------------------------------- resume bookkeeping
def open_meta(config: TrainConfig, run: RunDir, data: DataBundle, selection: Selection, base_info: dict[str, Any],
              backend: Any, *, fresh: bool, write: bool = True) -> dict[str, Any]:
    """meta.json for this process: written new for a fresh run; for a resumed one, checked to
    come from the same backend, settings and data (else ResumeError) and marked running again.
    ``write=False`` (the non-main processes of a multi-process run) builds and checks the same
    dict without writing it."""
    from library.model.distributed import process_summary

    if fresh:
        meta = build_meta(config, run, data, selection, base_info)
        meta["backend"] = backend.name
        if backend.options():
            meta["backend_options"] = backend.options()
        meta["processes"] = process_summary()
        if write:
            run.write_meta(meta)
        return meta
    meta = run.read_meta()
    if meta.get("backend") != backend.name:
        raise ResumeError(f"{run.path} was trained with backend {meta.get('backend')!r}, not {backend.name!r}")
    if comparable_config(meta.get("config") or {}) != comparable_config(config):
        raise ResumeError(f"{run.path} was started with different settings ({config_differences(meta.get('config') or {}, config)}); "
                          "resume needs the same profile and model")
    if meta.get("data") != data.hashes:
        raise ResumeError(f"the data files changed since {run.path} was started (sha256 differs)")
    if meta.get("status") != "complete":  # resuming a finished run changes nothing
        meta["status"] = "running"
        meta.setdefault("resumed", []).append(_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
        meta["processes"] = process_summary()  # a resume may use another number of processes
        if write:
            run.write_meta(meta)
    return meta


def comparable_config(config: TrainConfig | dict[str, Any]) -> dict[str, Any]:
    """The settings that decide what the phases train, as meta.json records them: everything but
    the experiments (library/experiments), which run beside the pipeline on a finished run, and
    the start-up estimate. A recorded config is read through :class:`TrainConfig` first, so a
    setting added since it was written compares at its default - except the draws' precision,
    which was the generation precision before ``generation.sampling_precision`` existed."""
    if not isinstance(config, TrainConfig):
        generation = config.get("generation")
        if isinstance(generation, dict) and "sampling_precision" not in generation:
            # recorded before the setting existed: its RL draws ran at the generation precision
            config = {**config, "generation": {**generation, "sampling_precision": "generation"}}
        try:
            config = TrainConfig.model_validate(config)
        except ValidationError:
            pass  # compared as recorded: it differs
    current = dict(config.to_meta() if isinstance(config, TrainConfig) else config)
    for section in ("distribution", "ablation", "selection", "estimate"):
        current.pop(section, None)
    return current


def config_differences(recorded: TrainConfig | dict[str, Any], config: TrainConfig | dict[str, Any]) -> str:
    """The settings two configs differ in, as dotted names with both values.

    >>> config_differences({"seed": 0, "sft": {"lr": 1}}, {"seed": 0, "sft": {"lr": 2}})
    'sft.lr: 1 (recorded) vs 2'
    """
    def flat(d: Any, prefix: str = "") -> dict[str, Any]:
        if not isinstance(d, dict):
            return {prefix.rstrip("."): d}
        return {k: v for key, value in d.items() for k, v in flat(value, f"{prefix}{key}.").items()}

    a, b = flat(comparable_config(recorded)), flat(comparable_config(config))
    diffs = [f"{k}: {a.get(k)!r} (recorded) vs {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return "; ".join(diffs[:4]) + (f"; and {len(diffs) - 4} more" if len(diffs) > 4 else "")


def drop_phase_episodes(run: RunDir, phase: str, *, keep_rollouts: bool, keep_eval: bool) -> int:
    """Cut what an unfinished phase logged before redoing it.

    Rollouts: RSFT and GRPO decide themselves which of theirs a checkpoint still covers, so
    they are kept here when ``keep_rollouts``. Eval episodes: kept only when the model they
    came from is final (the base model, or an adapter whose training finished); then
    ``library.evaluation.evaluate.evaluate`` skips the questions already answered. Anything else of the
    phase (e.g. eval episodes of an adapter that is about to be trained further) goes.
    """
    from library.contracts import EVAL_KIND
    from library.train.grpo import filter_episodes
    from library.contracts import ROLLOUT_KIND

    def keep(ep: dict[str, Any]) -> bool:
        if ep.get("phase") != phase:
            return True
        kind = ep.get("kind")
        return (keep_rollouts and kind == ROLLOUT_KIND) or (keep_eval and kind == EVAL_KIND)

    return filter_episodes(run, keep)


def trained_marker(ckpt_dir: Path, adapter_dir: Path) -> dict[str, Any] | None:
    """The training record of a phase whose training finished (its eval may not have), else None."""
    from library.train.checkpoints import saved_phase

    marker = ckpt_dir / TRAINED_MARKER
    if marker.exists() and saved_phase(adapter_dir):  # an adapter, or the whole model of a full SFT
        return json.loads(marker.read_text(encoding="utf-8"))
    return None


def mark_trained(ckpt_dir: Path, info: dict[str, Any]) -> None:
    from library.jsonl import atomic_write_json

    atomic_write_json(ckpt_dir / TRAINED_MARKER, info)


# ----------------------------------------------------------------------------- the run
def run_training(config: TrainConfig, run_dir: str | Path, *, backend: Any = None, resume: bool = False,
                 console: Console | None = None, stop_after: str | None = None) -> RunDir:
    """Run (or resume) every phase of ``config`` into ``run_dir``; return the RunDir.

    ``backend``: a ``library.train.backends.phases.PhaseBackend`` (default: the torch backend); it
    trains each phase and gives the model each phase's evaluation uses; everything else is here.
    ``stop_after`` ends the run after that phase completes (tests use it to simulate a kill
    between phases; a real kill mid-phase is handled by the checkpoints).

    Under a multi-process launch (``kgr train --processes N`` or ``accelerate launch -m
    library.cli train``) every process runs this loop: the trainers shard the data, sampling and
    evaluation are sharded and gathered, and only the main process writes the run folder; the
    others wait at a barrier wherever they next read it (library/model/distributed.py).

    The run's compute precisions (``config.precision`` for training, ``config.generation.precision``
    for answers, ``config.generation.sampling_precision`` for RL's draws) hold while it runs and are restored afterwards: a run leaves no process-wide
    setting behind (tests run many in one process).
    """
    from library.model.distributed import is_writer
    from library.model.precision import run_precision

    # the folder is this process's while it runs (a second writer stops with the holder's name);
    # the precisions are set before meta.json records them and any phase runs
    owned = RunDir(run_dir).lock() if is_writer() else contextlib.nullcontext()
    with owned, run_precision(config):
        return _run_phases(config, run_dir, backend=backend, resume=resume, console=console, stop_after=stop_after)


@dataclass
class RunState:
    """What :func:`setup` resolves once and every phase then shares: no phase reads the profile
    again for its data, questions, model or log."""

    config: TrainConfig
    run: RunDir
    backend: Any
    data: DataBundle
    selection: Selection
    tokenizer: Any
    eval_reward: Any
    meta: dict[str, Any]
    metrics: dict[str, Any]
    console: Console
    writer: bool
    t_start: float
    fresh: bool
    completed: list[str] = field(default_factory=list)
    did_work: bool = False
    estimates: dict[str, float] = field(default_factory=dict)  # seconds per phase and eval, this start's


def _run_phases(config: TrainConfig, run_dir: str | Path, *, backend: Any, resume: bool, console: Console | None,
                stop_after: str | None) -> RunDir:
    """The body of :func:`run_training`, under the run's compute precision: setup, every phase
    not completed yet, then finish."""
    state = setup(config, Path(run_dir), backend=backend, resume=resume, console=console)
    if stop_after in state.completed:  # resumed past the phase to stop after: nothing more to do
        state.console.print(f"  {stop_after} is already completed in {state.run.path}; stopping there")
        return state.run
    for phase in config.phases():
        if phase in state.completed:
            continue
        run_phase(state, phase, stop=stop_after == phase)
        if stop_after == phase:
            return state.run
    finish(state)
    return state.run


def setup(config: TrainConfig, run_dir: Path, *, backend: Any, resume: bool, console: Console | None) -> RunState:
    """Resolve everything the phases share: the run folder (fresh, or checked for resume), the
    data and each phase's questions, the evaluation model and its reward, meta.json and the
    metrics written so far."""
    import torch

    from library.model.distributed import is_writer, main_process_first, wait_for_everyone
    from library.model.load import load_model, model_info
    from library.model.precision import compute_precision, generation_precision, keep_freed_memory, sampling_precision
    from library.scoring.reward import RewardModel
    from library.train.backends.phases import RunContext
    from library.train.backends.torch_phases import TorchBackend

    keep_freed_memory()  # faster training steps on CPU (see its docstring)
    backend = backend if backend is not None else TorchBackend()
    writer = is_writer()
    # one console speaks for the run; the other processes' lines would repeat it N times
    console = (console or Console(stderr=True)) if writer else Console(stderr=True, quiet=True)
    if config.threads:  # evaluation is torch on every backend
        torch.set_num_threads(config.threads)
    run = RunDir(run_dir)
    fresh = not (run_dir / "meta.json").exists()
    wait_for_everyone()  # every process has seen the folder as it was before the main one writes to it
    if not fresh and not resume:
        raise ResumeError(f"{run_dir} already holds a run; pass --resume to continue it or choose another --run")
    t_start = time.perf_counter()
    data = load_data(config)  # before the folder exists: bad data leaves no half-made run behind
    selection = make_selection(config, data)
    if writer:
        run_dir.mkdir(parents=True, exist_ok=True)
    with main_process_first():  # a model converted and cached on first use is written once
        base, tokenizer = load_model(config.model, device=backend.eval_device)
    meta = open_meta(config, run, data, selection, model_info(base), backend, fresh=fresh, write=writer)
    # After meta's config (what was asked for, which resume and experiments compare against):
    # the windows the phases generate in, raised where the data's TRACEs are longer.
    config, raised = fit_generation_lengths(config, data.kg, selection, tokenizer)
    for line in raised:
        console.print(f"[yellow]generation window raised[/]: {line}")
    if raised and meta.get("generation_windows") != raised:
        meta["generation_windows"] = raised
        for section in ("rsft", "grpo", "eval"):
            meta["hyperparameters"][section] = getattr(config, section).model_dump(mode="json")
        if writer:
            run.write_meta(meta)
    metrics = run.read_metrics()
    for key in ("curves", "timings", "resources"):
        metrics.setdefault(key, {})
    state = RunState(config=config, run=run, backend=backend, data=data, selection=selection, tokenizer=tokenizer,
                     eval_reward=RewardModel.from_preset(data.kg, config.eval.reward_preset), meta=meta,
                     metrics=metrics, console=console, writer=writer, t_start=t_start, fresh=fresh,
                     completed=list(meta.get("phases_completed", [])))
    backend.start(RunContext(config=config, run=run, data=data, selection=selection, tokenizer=tokenizer,
                             console=console), base)
    console.print(f"[bold]kgr train[/] backend={backend.name} profile={config.profile} model={config.model} "
                  f"precision={compute_precision()} generation={generation_precision()} "
                  f"sampling={sampling_precision()} run={run_dir} "
                  f"phases={' -> '.join(config.phases())}"
                  + (f" (resuming; done: {', '.join(state.completed) or 'none'})" if not fresh else ""))
    if config.estimate and writer and len(state.completed) < len(config.phases()):
        from library.train.estimate import startup_estimate

        meta["estimate"] = startup_estimate(config, selection, tokenizer, data.kg, base, console,
                                            done=state.completed)
        state.estimates = dict(meta["estimate"]["seconds"])
        run.write_meta(meta)
    return state


def run_phase(state: RunState, phase: str, *, stop: bool = False) -> None:
    """Train ``phase`` (unless its training finished before a kill), evaluate it, and only then
    list it as completed in meta.json; ``stop`` marks the run stopped after it."""
    from transformers import set_seed

    from library.model.distributed import wait_for_everyone

    config, run, backend, metrics, console = state.config, state.run, state.backend, state.metrics, state.console
    console.rule(f"[bold]{phase}")
    if state.estimates:
        from library.train.estimate import minutes, remaining

        done = {k: v for k, v in metrics["timings"].items() if k in state.estimates}
        console.print(f"  [dim]about {minutes(remaining(state.estimates, done))} left in this run "
                      f"(the start-up estimate, scaled by the phases done so far)[/]")
    set_seed(config.seed)
    ckpt_dir, adapter_dir = run.path / "checkpoints" / phase, run.path / "adapters" / phase
    t0 = time.perf_counter()
    if phase == "base":
        if state.writer:
            drop_phase_episodes(run, phase, keep_rollouts=False, keep_eval=True)
        wait_for_everyone()  # the episode log as the main process left it, for every process
    else:
        info = trained_marker(ckpt_dir, adapter_dir)
        if state.writer:
            drop_phase_episodes(run, phase, keep_rollouts=backend.keep_rollouts_on_redo(phase),
                                keep_eval=info is not None)
        wait_for_everyone()
        if info is not None:
            console.print(f"  training of {phase} already finished; re-running its eval only")
        else:
            ckpt_dir.mkdir(parents=True, exist_ok=True)
            info = backend.train_phase(phase, ckpt_dir, adapter_dir)
            info["backend"] = backend.name
            info.setdefault("wall_seconds", round(time.perf_counter() - t0, 2))
            wait_for_everyone()  # the adapter and every rollout are written before anyone reads them
            if state.writer:
                mark_trained(ckpt_dir, info)
            metrics["curves"][phase] = info.get("curve", [])
            if phase in ("rsft", "grpo") and config.monitor.enabled:
                pool = state.selection.rsft_prompts if phase == "rsft" else state.selection.grpo_pool
                if "pool" in info:  # GRPO chose its prompts by pass rate: the monitor reads those
                    chosen = {q.id: q for q in state.selection.grpo_candidates}
                    pool = [chosen[i] for i in info["pool"]["ids"]]
                metrics.setdefault("monitor", {})[phase] = monitor_block(
                    phase, run.iter_episodes(phase=phase), pool, state.data.kg, config.monitor, metrics["curves"][phase])
            metrics["timings"][phase] = round(time.perf_counter() - t0, 2)
            metrics.setdefault("training", {})[phase] = {k: v for k, v in info.items()
                                                         if k not in ("curve", "ex_ids", "winner_ids")}
            console.print(f"  {phase} training: {metrics['timings'][phase]:.0f}s")

    t1 = time.perf_counter()
    with backend.eval_model(phase, adapter_dir) as phase_model:
        phase_model.eval()
        blocks = evaluate_phase(phase_model, state.tokenizer, phase, state.selection, state.eval_reward, run,
                                config.eval, console, seed=config.seed, trace_style=config.sft.trace_style)
    metrics["timings"][f"{phase}_eval"] = round(time.perf_counter() - t1, 2)
    # Only now, with its training and its eval done, is the phase listed as completed.
    state.did_work = True
    for key, block in blocks.items():
        metrics.setdefault(key, {})[phase] = block
    metrics["resources"]["peak_rss_mb"] = max(peak_rss_mb(), metrics["resources"].get("peak_rss_mb", 0.0))
    metrics["resources"].setdefault("peak_rss_mb_after", {})[phase] = peak_rss_mb()
    state.completed.append(phase)
    state.meta["phases_completed"] = list(state.completed)
    if stop:
        state.meta["status"] = f"stopped after {phase}"
    if state.writer:
        run.write_metrics(metrics)
        run.write_meta(state.meta)
    wait_for_everyone()  # the phase is on disk, completed, before any process goes on


def finish(state: RunState) -> None:
    """The run's end: paired comparisons, totals and the "complete" status (once, when there was
    work or the status says otherwise), with every process waiting for the folder."""
    from library.model.distributed import wait_for_everyone

    if state.writer and (state.did_work or state.meta.get("status") != "complete"):
        finish_run(state.run, state.meta, state.metrics, state.t_start)
    wait_for_everyone()  # no process leaves before the run folder is complete
    state.console.print(f"[bold green]done[/] ({state.backend.name}) in {time.perf_counter() - state.t_start:.0f}s; "
                        f"peak RSS {peak_rss_mb():.0f} MB")


def phase_comparisons(run: RunDir, phases: Sequence[str]) -> dict[str, Any]:
    """Paired bootstrap differences on eval (same questions) of every later phase against SFT,
    and SFT against base: ``{"grpo-sft": {...}, ...}`` (library.evaluation.evaluate.compare_phases)."""
    from library.evaluation.evaluate import compare_phases

    episodes = run.read_episodes()
    pairs = [("base", "sft")] + [("sft", p) for p in phases if p not in ("base", "sft")]
    out = {}
    for a, b in pairs:
        if a in phases and b in phases:
            for split in ("eval", "eval_shuffled"):
                result = compare_phases(episodes, split, a, b)
                if result["n"]:
                    out[f"{b}-{a}" + ("" if split == "eval" else f"@{split}")] = result
    return out


def finish_run(run: RunDir, meta: dict[str, Any], metrics: dict[str, Any], t_start: float) -> None:
    """Total time, peak memory, paired phase comparisons and the "complete" status, written once
    all phases are done."""
    metrics["comparisons"] = phase_comparisons(run, meta.get("phases", []))
    metrics["timings"]["total"] = round(sum(v for k, v in metrics["timings"].items() if k != "total"), 2)
    metrics["resources"]["peak_rss_mb"] = max(peak_rss_mb(), metrics["resources"].get("peak_rss_mb", 0.0))
    run.write_metrics(metrics)
    meta["status"] = "complete"
    meta["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    # one entry per process that did work (a resumed run has several)
    meta.setdefault("wall_seconds", []).append(round(time.perf_counter() - t_start, 2))
    run.write_meta(meta)


