"""The one phase loop: base -> SFT -> RSFT -> GRPO, each followed by evaluation, into one run folder.

``run_training_with_backend(config, run_dir, backend=...)`` is what ``kgr train`` calls: it
checks that the backend can run here (:func:`make_backend`; on a machine that cannot, the user
gets the clear BackendUnavailable message before any data is read or any folder is created),
then runs :func:`run_training`, which reads as :func:`setup` -> :func:`run_phase` for every
phase not yet completed -> :func:`finish`. A backend (``library.train.backends.phases``) only
trains a phase and gives the model its evaluation generates with; resume checks, episode
bookkeeping (library/train/bookkeeping.py), evaluation and metrics are here, written once for
every backend. Experiments (library/experiments) run beside this loop, on the finished run.
The run folder gets:

- ``meta.json`` (library/train/bookkeeping.py): every setting, the backend, seed, data hashes,
  versions, platform, model, reward configs, each phase's questions, ``phases_completed``.
- ``metrics.json``: per split and phase (``eval``, ``eval_shuffled``, ``train_sample``), curves
  per phase, ``timings`` per phase (training and eval separately), ``resources`` (peak RSS),
  ``monitor`` (the RL phases' reward-hacking verdicts), ``comparisons`` (paired differences
  between phases). This loop is its one writer while a run trains.
- ``episodes.jsonl``: every eval completion and every RSFT/GRPO rollout.
- ``adapters/<phase>/`` and ``checkpoints/<phase>/`` (git-ignored): the LoRA adapters and the
  trainer checkpoints that make a killed run resumable.

Resume: a phase is listed in ``phases_completed`` only once its training *and* its eval are
done. On ``--resume`` completed phases are skipped; the first incomplete one is redone from
its newest checkpoint, and the episodes it had logged are cut back to what the checkpoint
covers (eval episodes of an unfinished phase are always redone), so no episode is duplicated.

Data discipline: SFT trains on train.jsonl minus the GRPO pool (the paper keeps a disjoint RL
set); RSFT samples training prompts only (easy: train, hard: train_hard; ``prompt_hops: [next]``:
train_hard's questions one hop past SFT's longest); GRPO samples the pool. Every training phase
asserts that no eval, eval_shuffled or dev question reaches it. ``kgr train --from RUN`` starts a
run from RUN's base and SFT phases (library/train/fork.py) and trains only the RL phases.

Backends: ``torch`` (default; CPU/CUDA/MPS), ``mlx`` (Apple Silicon; Linux x86-64 via mlx-cpu:
tests/test_backend_mlx.py runs it end to end, not yet run on a Mac) and ``unsloth`` (NVIDIA CUDA;
UNTESTED ON HARDWARE): every one writes the same run folder, evaluated by the same code
(``library.evaluation.phase.evaluate_phase``), mlx adapters converted to peft ones
(``library.train.backends.mlx_adapters.mlx_to_peft``); docs/BACKENDS.md says what is verified where.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console

from library.config import TrainConfig
from library.evaluation.evaluate import compare_phases
from library.evaluation.monitor import monitor_block
from library.evaluation.phase import evaluate_phase
from library.model.distributed import is_writer, launched_world_size, wait_for_everyone
from library.runs.folder import RunDir
from library.train.backends import BackendUnavailable, select_backend
from library.train.backends.phases import PhaseBackend, start_backend
from library.train.backends.torch_phases import TorchBackend
from library.train.bookkeeping import (ResumeError, drop_phase_episodes, mark_trained, open_meta, peak_rss_mb,
                                       trained_marker)
from library.train.data import DataBundle, Selection
from library.train.estimate import minutes, remaining, startup_estimate
from library.train.rewards import RunRewards

# torch and transformers are imported inside the functions that train (the CLI starts without
# them), and so are the mlx and unsloth backends' modules, when one is chosen (the mlx phases
# load the torch evaluation model's loader at import).


# ----------------------------------------------------------------------------- the backend
def run_training_with_backend(config: TrainConfig, run_dir: str | Path, *, backend: str = "torch",
                              resume: bool = False, console: Console | None = None,
                              stop_after: str | None = None, load_in_4bit: bool = False,
                              max_seq_length: int | None = None, eval_device: str | None = None) -> RunDir:
    """Run (or resume) every phase of ``config`` into ``run_dir`` with ``backend``; return the RunDir.

    ``backend``: ``"torch"`` (default; CPU/CUDA/MPS), ``"mlx"`` (Apple Silicon; Linux x86-64 via mlx-cpu) or
    ``"unsloth"`` (NVIDIA CUDA). Backend options: ``load_in_4bit`` / ``max_seq_length``
    (unsloth only), ``eval_device`` (mlx: ``"cpu"`` or ``"mps"`` for the torch evaluation,
    default cpu; unsloth: default ``"cuda"``).
    Raises ``BackendUnavailable`` (before touching ``run_dir``) when the platform lacks the backend.
    """
    phases = make_backend(config, backend, load_in_4bit=load_in_4bit, max_seq_length=max_seq_length,
                          eval_device=eval_device)
    return run_training(config, run_dir, backend=phases, resume=resume, console=console, stop_after=stop_after)


def make_backend(config: TrainConfig, backend: str = "torch", *, load_in_4bit: bool = False,
                 max_seq_length: int | None = None, eval_device: str | None = None) -> PhaseBackend:
    """The phases of ``backend``, after checking that it can run here (``select_backend``: raises
    BackendUnavailable with the reason and the fix) and in this launch (:func:`check_multi_process`)."""
    select_backend(backend)
    check_multi_process(backend)
    if backend == "torch":
        if load_in_4bit or max_seq_length is not None or eval_device is not None:
            raise ValueError("load_in_4bit / max_seq_length / eval_device are options of the mlx and unsloth backends")
        return TorchBackend()
    if config.distribution.enabled:
        raise BackendUnavailable(f"the distribution experiment runs on the torch backend only; "
                                 f"disable distribution.enabled to train with {backend!r}")
    if backend == "mlx":
        if load_in_4bit or max_seq_length is not None:
            raise ValueError("load_in_4bit / max_seq_length are options of the unsloth backend")
        from library.train.backends.mlx_phases import MlxBackend

        return MlxBackend(eval_device=eval_device or "cpu")
    if backend == "unsloth":
        from library.train.backends.unsloth_phases import UnslothBackend

        return UnslothBackend(load_in_4bit=load_in_4bit, eval_device=eval_device or "cuda",
                              max_seq_length=max_seq_length or max(config.sft.max_length, config.rsft.max_length, 512))
    raise BackendUnavailable(f"unknown backend {backend!r}")  # pragma: no cover - select_backend knows only these three


def check_multi_process(backend: str = "torch") -> None:
    """A multi-process launch (``kgr train --processes N``, ``accelerate launch``) runs on the
    torch backend, whose phase loop is rank-aware (library/model/distributed.py, docs/SCALE_OUT.md).

    The mlx and unsloth backends are not: mlx trains in ``mlx_lm`` subprocesses on the one Apple
    GPU, and the unsloth phases sample RSFT's rollouts outside the trainers on one process, so N
    processes would each log their own copy. Those launches stop here, before anything is read
    or written, with what to run instead.
    """
    n = launched_world_size()  # how many processes `accelerate launch` / torchrun started (1 for a plain run)
    if n > 1 and backend != "torch":
        raise BackendUnavailable(
            f"this is a {n}-process launch (WORLD_SIZE={n}); only the torch backend trains across processes. "
            f"Run --backend {backend} as one process, or --backend torch across processes (docs/SCALE_OUT.md).")


# ----------------------------------------------------------------------------- the loop
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
    rewards: RunRewards
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
    backend started on the data, each phase's questions, the evaluation model and the rewards
    (``library.train.backends.phases.start_backend``, as an experiment starts it), meta.json and
    the metrics written so far."""
    import torch

    from library.model.load import model_info
    from library.model.precision import compute_precision, generation_precision, keep_freed_memory, sampling_precision

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
    # the data first (bad data leaves no half-made run behind), then the model; the context's
    # config has the windows the phases generate in, raised where the data's TRACEs are longer
    ctx, raised = start_backend(config, run, backend, console)
    if writer:
        run_dir.mkdir(parents=True, exist_ok=True)
    # meta.json records the config asked for (what resume and the experiments compare against)
    meta = open_meta(config, run, ctx.data, ctx.selection, model_info(backend.base), ctx.rewards, backend,
                     fresh=fresh, write=writer)
    for line in raised:
        console.print(f"[yellow]generation window raised[/]: {line}")
    if raised and meta.get("generation_windows") != raised:
        meta["generation_windows"] = raised
        for section in ("rsft", "grpo", "eval"):
            meta["hyperparameters"][section] = getattr(ctx.config, section).model_dump(mode="json")
        if writer:
            run.write_meta(meta)
    metrics = run.read_metrics()
    for key in ("curves", "timings", "resources"):
        metrics.setdefault(key, {})
    config = ctx.config
    state = RunState(config=config, run=run, backend=backend, data=ctx.data, selection=ctx.selection,
                     tokenizer=ctx.tokenizer, rewards=ctx.rewards, meta=meta, metrics=metrics, console=console,
                     writer=writer, t_start=t_start, fresh=fresh, completed=list(meta.get("phases_completed", [])))
    console.print(f"[bold]kgr train[/] backend={backend.name} profile={config.profile} model={config.model} "
                  f"precision={compute_precision()} generation={generation_precision()} "
                  f"sampling={sampling_precision()} run={run_dir} "
                  f"phases={' -> '.join(config.phases())}"
                  + (f" (resuming; done: {', '.join(state.completed) or 'none'})" if not fresh else ""))
    if config.estimate and writer and len(state.completed) < len(config.phases()):
        meta["estimate"] = startup_estimate(config, ctx.selection, ctx.tokenizer, ctx.data.kg, backend.base, console,
                                            done=state.completed)
        state.estimates = dict(meta["estimate"]["seconds"])
        run.write_meta(meta)
    return state


def run_phase(state: RunState, phase: str, *, stop: bool = False) -> None:
    """Train ``phase`` (unless its training finished before a kill), evaluate it, and only then
    list it as completed in meta.json; ``stop`` marks the run stopped after it."""
    from transformers import set_seed

    config, run, backend, metrics, console = state.config, state.run, state.backend, state.metrics, state.console
    console.rule(f"[bold]{phase}")
    if state.estimates:
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
            rollouts = info.pop("rollouts", None)  # an RL phase's episodes, handed on in memory
            info["backend"] = backend.name
            info.setdefault("wall_seconds", round(time.perf_counter() - t0, 2))
            wait_for_everyone()  # the adapter and every rollout are written before anyone reads them
            if state.writer:
                mark_trained(ckpt_dir, info)
            metrics["curves"][phase] = info.get("curve", [])
            if phase in ("rsft", "grpo") and config.monitor.enabled:
                pool = state.selection.rsft_prompts if phase == "rsft" else state.selection.grpo_pool
                metrics.setdefault("monitor", {})[phase] = monitor_block(
                    phase, rollouts if rollouts is not None else run.iter_episodes(phase=phase), pool, state.data.kg,
                    config.monitor, metrics["curves"][phase])
            metrics["timings"][phase] = round(time.perf_counter() - t0, 2)
            metrics.setdefault("training", {})[phase] = {k: v for k, v in info.items()
                                                         if k not in ("curve", "ex_ids", "winner_ids")}
            console.print(f"  {phase} training: {metrics['timings'][phase]:.0f}s")

    t1 = time.perf_counter()
    with backend.eval_model(phase, adapter_dir) as phase_model:
        phase_model.eval()
        blocks = evaluate_phase(phase_model, state.tokenizer, phase, state.selection, state.rewards["eval"], run,
                                config.eval, console, seed=config.seed, last=config.is_final(phase))
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
    if state.writer and (state.did_work or state.meta.get("status") != "complete"):
        finish_run(state.run, state.meta, state.metrics, state.t_start)
    wait_for_everyone()  # no process leaves before the run folder is complete
    state.console.print(f"[bold green]done[/] ({state.backend.name}) in {time.perf_counter() - state.t_start:.0f}s; "
                        f"peak RSS {peak_rss_mb():.0f} MB")


def phase_comparisons(run: RunDir, phases: Sequence[str]) -> dict[str, Any]:
    """Paired bootstrap differences on eval (same questions) of every later phase against SFT,
    and SFT against base: ``{"grpo-sft": {...}, ...}`` (library.evaluation.evaluate.compare_phases)."""
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
