"""Orchestration: base -> SFT -> RSFT -> GRPO, each followed by evaluation, into one run folder.

``run_training(config, run_dir, backend=...)`` is what ``kgr train`` calls (through
``library.backends.pipeline``, which picks the backend). This is the one phase loop of every
backend: a backend (``library.backends.phases``) only trains a phase and gives the model its
evaluation generates with; resume checks, episode bookkeeping, evaluation and metrics are here.
The run folder gets:

- ``meta.json``: every setting (the whole TrainConfig), the backend, seed, data sha256 hashes, library and
  package versions, platform, model info, reward configs, which questions each phase may use
  (the GRPO pool ids, counts), and ``phases_completed`` (resume state).
- ``metrics.json``: per split and phase (``eval``, ``eval_shuffled``, ``train_sample``), curves
  per phase, ``timings`` per phase (training and eval separately), ``resources`` (peak RSS),
  and ``distribution`` when that experiment runs.
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

import datetime as _dt
import hashlib
import json
import platform
import random
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from rich.console import Console

from library.config import TrainConfig
from library.runs import RunDir

EVAL_SPLIT_KEYS = ("eval", "eval_shuffled", "train_sample")
#: metrics.json split key -> the Episode.split its episodes carry
EPISODE_SPLIT = {"eval": "eval", "eval_shuffled": "eval_shuffled", "train_sample": "train"}
TRAINED_MARKER = "trained.json"


class ResumeError(RuntimeError):
    """The run folder exists but cannot be resumed with this config (or resume was not asked for)."""


# ----------------------------------------------------------------------------- data
@dataclass
class DataBundle:
    train: list
    eval: list
    train_hard: list
    eval_shuffled: list
    kg: Any
    hashes: dict[str, str]
    dev: list = field(default_factory=list)  # 4-5 hops, for choosing recipes (benchmarks/recipe_sweep.py)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_data(config: TrainConfig) -> DataBundle:
    from library.contracts import Question
    from library.jsonl import read_jsonl
    from library.kg import load_kg
    from library.questions import SPLIT_FILES

    data_dir = Path(config.data_dir)
    splits = {}
    hashes = {}
    for name, filename in SPLIT_FILES.items():
        path = data_dir / filename
        if name == "dev" and not path.exists():  # data made before the dev split existed
            continue
        splits[name] = read_jsonl(path, Question)
        hashes[filename] = _sha256(path)
    hashes[Path(config.kg_path).name] = _sha256(Path(config.kg_path))
    return DataBundle(kg=load_kg(config.kg_path), hashes=hashes, **splits)


def select_balanced(questions: Sequence[Any], n: int, seed: str) -> list:
    """``n`` questions spread evenly over hop lengths (leftovers to the shortest hops), seeded.

    Deterministic for a seed string (``random.Random`` hashes strings with SHA-512) and
    independent of the input order; the result is sorted by id.

    >>> from types import SimpleNamespace as Q
    >>> qs = [Q(id=f"q{i}", hop_len=4 + i % 2) for i in range(10)]
    >>> sorted({q.hop_len: 0 for q in select_balanced(qs, 4, "s")})
    [4, 5]
    >>> [q.hop_len for q in select_balanced(qs, 4, "s")].count(4)
    2
    """
    by_hop: dict[int, list] = {}
    for q in sorted(questions, key=lambda q: q.id):
        by_hop.setdefault(q.hop_len, []).append(q)
    if n >= len(questions):
        return sorted(questions, key=lambda q: q.id)
    rng = random.Random(seed)
    hops = sorted(by_hop)
    want = {h: 0 for h in hops}
    remaining = n
    # round-robin so that a hop with too few questions hands its share to the others
    while remaining:
        progressed = False
        for h in hops:
            if remaining and want[h] < len(by_hop[h]):
                want[h] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            break
    chosen = []
    for h in hops:
        chosen += rng.sample(by_hop[h], want[h])
    return sorted(chosen, key=lambda q: q.id)


@dataclass
class Selection:
    sft: list
    grpo_pool: list
    rsft_prompts: list
    eval: list
    eval_shuffled: list
    train_sample: list
    forbidden_ids: set[str] = field(default_factory=set)
    # every training question outside the GRPO pool: its gold paths weight the knowledge stage
    train_paths: list = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "sft": {"source": "train.jsonl", "n": len(self.sft), "excludes": "grpo_pool"},
            "grpo_pool": {"source": "train.jsonl", "n": len(self.grpo_pool), "ids": [q.id for q in self.grpo_pool]},
            "rsft_prompts": {"n": len(self.rsft_prompts),
                             "splits": sorted({q.split for q in self.rsft_prompts})},
            "eval": {"n": len(self.eval), "ids": [q.id for q in self.eval]},
            "eval_shuffled": {"n": len(self.eval_shuffled), "ids": [q.id for q in self.eval_shuffled]},
            "train_sample": {"n": len(self.train_sample), "ids": [q.id for q in self.train_sample]},
        }


def make_selection(config: TrainConfig, data: DataBundle) -> Selection:
    from library.rsft import assert_training_only, select_prompts

    seed = config.seed
    eval_sub = select_balanced(data.eval, config.eval.n_eval, f"{seed}:eval")
    shuffled_by_source = {q.meta.get("shuffled_from", q.id.removesuffix("-shuf")): q for q in data.eval_shuffled}
    eval_shuf = [shuffled_by_source[q.id] for q in eval_sub if q.id in shuffled_by_source] if config.eval.shuffled else []
    grpo_pool = select_balanced(data.train, config.grpo.n_prompts, f"{seed}:grpo") if config.grpo.enabled else []
    grpo_ids = {q.id for q in grpo_pool}
    not_rl = [q for q in data.train if q.id not in grpo_ids]
    hops = set(config.sft.question_hops or ())
    sft_pool = [q for q in not_rl if q.hop_len in hops] if hops else not_rl
    if not sft_pool:
        raise ValueError(f"sft.question_hops {sorted(hops)}: no training question has these hop lengths")
    sft = select_balanced(sft_pool, config.sft.n_questions, f"{seed}:sft") if config.sft.n_questions else sft_pool
    train_sample = select_balanced(sft, config.eval.n_train_sample, f"{seed}:train_sample") if config.eval.n_train_sample else []
    # RSFT samples the training questions SFT did not demonstrate (when SFT used a subset).
    sft_ids = {q.id for q in sft}
    rsft_pool = [q for q in not_rl if q.id not in sft_ids] or sft
    if config.rsft.prompt_hops:
        rsft_pool = [q for q in rsft_pool if q.hop_len in set(config.rsft.prompt_hops)]
        if not rsft_pool:
            raise ValueError(f"rsft.prompt_hops {sorted(config.rsft.prompt_hops)}: no training question "
                             "outside SFT and the GRPO pool has these hop lengths")
    rsft_prompts = (select_prompts(rsft_pool, data.train_hard, config.rsft.distribution, config.rsft.n_prompts, seed)
                    if config.rsft.enabled else [])
    forbidden = {q.id for q in data.eval} | {q.id for q in data.eval_shuffled}
    for qs in (sft, grpo_pool, rsft_prompts, not_rl):
        assert_training_only(qs, forbidden)
    return Selection(sft=sft, grpo_pool=grpo_pool, rsft_prompts=rsft_prompts, eval=eval_sub,
                     eval_shuffled=eval_shuf, train_sample=train_sample, forbidden_ids=forbidden,
                     train_paths=not_rl)


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

    from library.model import bf16_matmul_speedup, bf16_matrix_units, compute_precision, generation_precision

    info = _versions()
    info.update({
        "os": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "requested_threads": threads,
        "precision": compute_precision(),
        "generation_precision": generation_precision(),
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
    from library.reward import RewardConfig

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


# ----------------------------------------------------------------------------- eval
def evaluate_phase(model, tokenizer, phase: str, selection: Selection, reward_model, run: RunDir,
                   config: TrainConfig, console: Console, kg: Any = None) -> dict[str, dict[str, Any]]:
    """Greedy eval of ``model`` on the eval subset, its shuffled twin and the train sample, and
    fact recall (library/facts.py) of the (entity, relation) groups the eval chains use.

    Returns ``{key: block}`` (keys: eval, eval_shuffled, train_sample, facts); the episodes go
    to the run's episodes.jsonl.

    Across N processes (library/distributed.py) the greedy answers are sharded: each process
    answers a contiguous slice of every split, the episodes are gathered in question order and
    the main process logs them (``library.evaluate.evaluate``), so the answers cost 1/N of the
    time. Fact recall is teacher-forced (one forward pass per batch, no decoding loop) and runs
    on the main process while the others wait at the barrier after it: it is the cheaper part
    (~55 s of a ~130 s quick-profile eval on this CPU against ~75 s of decoding), and sharding it
    would need its per-group hits gathered for the per-relation shares. Why sharding the
    answers rather than answering on the main process alone: decoding is per-question work with
    no communication, so N processes finish it in ~1/N of the time, while the main-only design
    leaves N-1 GPUs idle for the whole decoding. (On this 2-core CPU, shared with another job,
    the two designs could not be timed apart meaningfully: docs/SCALE_OUT.md.)
    """
    from library.distributed import is_writer, wait_for_everyone

    kg = kg if kg is not None else reward_model.kg
    import contextlib

    from library.evaluate import evaluate
    from library.generate import ct2_generator

    blocks = {}
    gen = config.generation
    t0 = time.perf_counter()
    with (ct2_generator(model, tokenizer, gen.ct2_compute_type) if gen.engine == "ct2"
          else contextlib.nullcontext()) as ct2:  # one conversion for every split of this phase
        if ct2 is not None:
            console.print(f"  [dim]{phase} eval[/] converted for CTranslate2 ({gen.ct2_compute_type}) "
                          f"in {time.perf_counter() - t0:.0f}s")
        shuffled_phases = config.eval.shuffled_phases
        shuffled = selection.eval_shuffled if shuffled_phases is None or phase in shuffled_phases else []
        for key, questions in (("eval", selection.eval), ("eval_shuffled", shuffled),
                               ("train_sample", selection.train_sample)):
            if not questions:
                continue
            t0 = time.perf_counter()
            # store_metrics=False: run_training is the single writer of metrics.json (it writes the
            # blocks when the phase completes), so a half-done phase never shows up as a result.
            blocks[key] = evaluate(
                model, tokenizer, questions, reward_model, phase=phase, split=key, run=run,
                batch_size=config.eval.batch_size, max_new_tokens=config.eval.max_new_tokens,
                store_metrics=False, engine=gen.engine, ct2_compute_type=gen.ct2_compute_type, ct2=ct2,
            )
            acc = blocks[key].get("accuracy")
            console.print(f"  [dim]{phase} eval[/] {key:<14} n={len(questions):<4} accuracy={acc:.3f} "
                          f"({time.perf_counter() - t0:.0f}s)")
    if selection.eval and is_writer():
        # Did the model learn the facts the eval chains need (apart from composing them)?
        # Recall where the facts were taught (knowledge rows) and where composition needs them
        # (inside the gold TRACE of each eval question, teacher-forced): docs/RECIPE.md.
        from library.facts import eval_fact_groups, fact_recall, trace_recall

        t0 = time.perf_counter()
        blocks["facts"] = fact_recall(model, tokenizer, kg, eval_fact_groups(kg, selection.eval))
        n_trace = config.eval.n_trace_recall
        traced = (selection.eval if n_trace is None
                  else select_balanced(selection.eval, n_trace, f"{config.seed}:trace_recall"))
        style = None if config.sft.trace_style == "copy" else config.sft.trace_style
        in_trace = trace_recall(model, tokenizer, kg, traced, style=style)
        in_trace.pop("hits")
        blocks["facts"]["in_trace"] = in_trace
        console.print(f"  [dim]{phase} eval[/] {'facts':<14} n={blocks['facts']['n']:<4} "
                      f"recall={blocks['facts']['recall']:.3f}, inside the TRACE {in_trace['recall']:.3f} "
                      f"({time.perf_counter() - t0:.0f}s)")
    wait_for_everyone()  # the other processes wait while the main one measures fact recall
    return blocks


# ----------------------------------------------------------------------------- resume bookkeeping
def open_meta(config: TrainConfig, run: RunDir, data: DataBundle, selection: Selection, base_info: dict[str, Any],
              backend: Any, *, fresh: bool, write: bool = True) -> dict[str, Any]:
    """meta.json for this process: written new for a fresh run; for a resumed one, checked to
    come from the same backend, settings and data (else ResumeError) and marked running again.
    ``write=False`` (the non-main processes of a multi-process run) builds and checks the same
    dict without writing it."""
    from library.distributed import process_summary

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
    if meta.get("backend", "torch") != backend.name:  # runs from before the tag were torch runs
        raise ResumeError(f"{run.path} was trained with backend {meta.get('backend', 'torch')!r}, not {backend.name!r}")
    if meta.get("config") != comparable_config(config, meta.get("config")):
        raise ResumeError(f"{run.path} was started with different settings; resume needs the same profile and model")
    if meta.get("data") != data.hashes:
        raise ResumeError(f"the data files changed since {run.path} was started (sha256 differs)")
    if meta.get("status") != "complete":  # resuming a finished run changes nothing
        meta["status"] = "running"
        meta.setdefault("backend", backend.name)
        meta.setdefault("resumed", []).append(_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
        meta["processes"] = process_summary()  # a resume may use another number of processes
        if write:
            run.write_meta(meta)
    return meta


def comparable_config(config: TrainConfig, stored: Any) -> dict[str, Any]:
    """``config`` as meta.json records it, less the sections a run started before they existed
    lacks: settings added later (the monitor) do not make an older run impossible to resume."""
    current = config.to_meta()
    for section in ("monitor", "ablation"):  # added after runs that are committed
        if isinstance(stored, dict) and section not in stored:
            current.pop(section, None)
    return current


def drop_phase_episodes(run: RunDir, phase: str, *, keep_rollouts: bool, keep_eval: bool) -> int:
    """Cut what an unfinished phase logged before redoing it.

    Rollouts: RSFT and GRPO decide themselves which of theirs a checkpoint still covers, so
    they are kept here when ``keep_rollouts``. Eval episodes: kept only when the model they
    came from is final (the base model, or an adapter whose training finished); then
    ``library.evaluate.evaluate`` skips the questions already answered. Anything else of the
    phase (e.g. eval episodes of an adapter that is about to be trained further) goes.
    """
    from library.evaluate import EVAL_KIND
    from library.grpo import filter_episodes
    from library.rsft import ROLLOUT_KIND

    def keep(ep: dict[str, Any]) -> bool:
        if ep.get("phase") != phase:
            return True
        kind = ep.get("kind")
        return (keep_rollouts and kind == ROLLOUT_KIND) or (keep_eval and kind == EVAL_KIND)

    return filter_episodes(run, keep)


def trained_marker(ckpt_dir: Path, adapter_dir: Path) -> dict[str, Any] | None:
    """The training record of a phase whose training finished (its eval may not have), else None."""
    marker = ckpt_dir / TRAINED_MARKER
    if marker.exists() and (adapter_dir / "adapter_config.json").exists():
        return json.loads(marker.read_text(encoding="utf-8"))
    return None


def mark_trained(ckpt_dir: Path, info: dict[str, Any]) -> None:
    from library.jsonl import atomic_write_json

    atomic_write_json(ckpt_dir / TRAINED_MARKER, info)


def phase_monitor_block(config: TrainConfig, data: DataBundle, selection: Selection, run: RunDir, phase: str,
                        curve: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """metrics.json ``monitor.<phase>``: the reward-hacking monitor over the phase's logged rollouts
    and its curve's KL. The live monitor judged the same steps as they came; the block is
    recomputed from the log so that it is, by construction, what ``kgr monitor`` finds later."""
    from library.monitor import kl_by_step, monitor_phase

    questions = selection.rsft_prompts if phase == "rsft" else selection.grpo_pool
    return monitor_phase(phase, run.iter_episodes(phase=phase), questions, data.kg, config.monitor,
                         kl_by_step(curve)).summary()


# ----------------------------------------------------------------------------- the run
def run_training(config: TrainConfig, run_dir: str | Path, *, backend: Any = None, resume: bool = False,
                 console: Console | None = None, stop_after: str | None = None) -> RunDir:
    """Run (or resume) every phase of ``config`` into ``run_dir``; return the RunDir.

    ``backend``: a ``library.backends.phases.PhaseBackend`` (default: the torch backend); it
    trains each phase and gives the model each phase's evaluation uses; everything else is here.
    ``stop_after`` ends the run after that phase completes (tests use it to simulate a kill
    between phases; a real kill mid-phase is handled by the checkpoints).

    Under a multi-process launch (``kgr train --processes N`` or ``accelerate launch -m
    library.cli train``) every process runs this loop: the trainers shard the data, sampling and
    evaluation are sharded and gathered, and only the main process writes the run folder; the
    others wait at a barrier wherever they next read it (library/distributed.py).

    The run's compute precisions (``config.precision`` for training, ``config.generation.precision``
    for generation) hold while it runs and are restored afterwards: a run leaves no process-wide
    setting behind (tests run many in one process).
    """
    from library.model import using_precision

    # before meta.json records them and any phase runs
    with using_precision(config.precision, config.generation.precision):
        return _run_phases(config, run_dir, backend=backend, resume=resume, console=console, stop_after=stop_after)


def _run_phases(config: TrainConfig, run_dir: str | Path, *, backend: Any, resume: bool, console: Console | None,
                stop_after: str | None) -> RunDir:
    """The body of :func:`run_training`, under the run's compute precision."""
    import torch
    from transformers import set_seed

    from library.backends.phases import RunContext
    from library.backends.torch_phases import TorchBackend
    from library.distributed import is_writer, main_process_first, wait_for_everyone
    from library.model import compute_precision, generation_precision, keep_freed_memory, load_model, model_info
    from library.reward import RewardConfig, RewardModel

    keep_freed_memory()  # faster training steps on CPU (see its docstring)
    backend = backend if backend is not None else TorchBackend()
    writer = is_writer()
    # one console speaks for the run; the other processes' lines would repeat it N times
    console = (console or Console(stderr=True)) if writer else Console(stderr=True, quiet=True)
    if config.threads:  # evaluation is torch on every backend
        torch.set_num_threads(config.threads)
    run_dir = Path(run_dir)
    run = RunDir(run_dir)
    fresh = not (run_dir / "meta.json").exists()
    wait_for_everyone()  # every process has seen the folder as it was before the main one writes to it
    if not fresh and not resume:
        raise ResumeError(f"{run_dir} already holds a run; pass --resume to continue it or choose another --run")
    if writer:
        run_dir.mkdir(parents=True, exist_ok=True)

    t_start = time.perf_counter()
    data = load_data(config)
    selection = make_selection(config, data)
    with main_process_first():  # a model converted and cached on first use is written once
        base, tokenizer = load_model(config.model, device=backend.eval_device)
    meta = open_meta(config, run, data, selection, model_info(base), backend, fresh=fresh, write=writer)
    completed: list[str] = list(meta.get("phases_completed", []))
    metrics = run.read_metrics()
    for key in ("curves", "timings", "resources"):
        metrics.setdefault(key, {})

    eval_reward = RewardModel(data.kg, RewardConfig.preset_named(config.eval.reward_preset))
    backend.start(RunContext(config=config, run=run, data=data, selection=selection, tokenizer=tokenizer,
                             console=console), base)
    console.print(f"[bold]kgr train[/] backend={backend.name} profile={config.profile} model={config.model} "
                  f"precision={compute_precision()} generation={generation_precision()} run={run_dir} phases={' -> '.join(config.phases())}"
                  + (f" (resuming; done: {', '.join(completed) or 'none'})" if not fresh else ""))

    did_work = False
    for phase in config.phases():
        if phase in completed:
            continue
        console.rule(f"[bold]{phase}")
        set_seed(config.seed)
        ckpt_dir, adapter_dir = run_dir / "checkpoints" / phase, run_dir / "adapters" / phase
        t0 = time.perf_counter()
        if phase == "base":
            if writer:
                drop_phase_episodes(run, phase, keep_rollouts=False, keep_eval=True)
            wait_for_everyone()  # the episode log as the main process left it, for every process
        else:
            info = trained_marker(ckpt_dir, adapter_dir)
            if writer:
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
                if writer:
                    mark_trained(ckpt_dir, info)
                metrics["curves"][phase] = info.get("curve", [])
                if phase in ("rsft", "grpo") and config.monitor.enabled:
                    metrics.setdefault("monitor", {})[phase] = phase_monitor_block(config, data, selection, run, phase,
                                                                                   metrics["curves"][phase])
                metrics["timings"][phase] = round(time.perf_counter() - t0, 2)
                metrics.setdefault("training", {})[phase] = {k: v for k, v in info.items()
                                                             if k not in ("curve", "ex_ids", "winner_ids")}
                console.print(f"  {phase} training: {metrics['timings'][phase]:.0f}s")

        t1 = time.perf_counter()
        with backend.eval_model(phase, adapter_dir) as phase_model:
            phase_model.eval()
            blocks = evaluate_phase(phase_model, tokenizer, phase, selection, eval_reward, run, config, console)
        metrics["timings"][f"{phase}_eval"] = round(time.perf_counter() - t1, 2)
        # Only now, with its training and its eval done, is the phase listed as completed.
        did_work = True
        for key, block in blocks.items():
            metrics.setdefault(key, {})[phase] = block
        metrics["resources"]["peak_rss_mb"] = max(peak_rss_mb(), metrics["resources"].get("peak_rss_mb", 0.0))
        metrics["resources"].setdefault("peak_rss_mb_after", {})[phase] = peak_rss_mb()
        completed.append(phase)
        meta["phases_completed"] = list(completed)
        if stop_after == phase:
            meta["status"] = f"stopped after {phase}"
        if writer:
            run.write_metrics(metrics)
            run.write_meta(meta)
        wait_for_everyone()  # the phase is on disk, completed, before any process goes on
        if stop_after == phase:
            return run

    if config.distribution.enabled and "distribution" not in completed:
        metrics["distribution"] = run_distribution(backend.policy, tokenizer, config, data, selection, run, console,
                                                   main_rsft=metrics.get("training", {}).get("rsft"))
        if writer:
            run.write_metrics(metrics)
        did_work = True
        completed.append("distribution")
        meta["phases_completed"] = list(completed)

    if config.ablation.enabled and "ablation" not in completed:
        metrics["ablation"] = run_ablation(backend.policy, tokenizer, config, data, selection, run, console)
        if writer:
            run.write_metrics(metrics)
        did_work = True
        completed.append("ablation")
        meta["phases_completed"] = list(completed)

    if writer and (did_work or meta.get("status") != "complete"):
        finish_run(run, meta, metrics, t_start)
    wait_for_everyone()  # no process leaves before the run folder is complete
    console.print(f"[bold green]done[/] ({backend.name}) in {time.perf_counter() - t_start:.0f}s; "
                  f"peak RSS {peak_rss_mb():.0f} MB")
    return run


def phase_comparisons(run: RunDir, phases: Sequence[str]) -> dict[str, Any]:
    """Paired bootstrap differences on eval (same questions) of every later phase against SFT,
    and SFT against base: ``{"grpo-sft": {...}, ...}`` (library.evaluate.compare_phases)."""
    from library.evaluate import compare_phases

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


# ----------------------------------------------------------------------------- distribution
def run_distribution(policy: Callable[[str], Any], tokenizer, config: TrainConfig, data: DataBundle,
                     selection: Selection, run: RunDir, console: Console,
                     main_rsft: dict[str, Any] | None = None) -> dict[str, Any]:
    """RSFT from the SFT result (``policy("sft")``: a trainable policy, from the torch backend) on
    each training distribution, each evaluated on the same eval subset.

    Each condition is its own small run folder under ``<run>/distribution/<condition>/`` (its
    rollouts and eval episodes would otherwise mix with the main RSFT phase's in episodes.jsonl).
    The condition the main RSFT phase already trained (``config.rsft.distribution``, from the
    same SFT result with the same settings; ``main_rsft`` is its training info) is not trained
    twice: its adapter is evaluated on the subset, and the entry says ``"from_phase": "rsft"``.
    Both conditions then sample prompts SFT never showed (the main RSFT pool; train_hard).
    """
    from transformers import set_seed

    from library.distributed import is_writer, wait_for_everyone
    from library.evaluate import evaluate
    from library.grpo import filter_episodes
    from library.reward import RewardConfig, RewardModel
    from library.rsft import ROLLOUT_KIND, run_rsft, select_prompts

    out: dict[str, Any] = {}
    eval_sub = select_balanced(data.eval, config.distribution.n_eval, f"{config.seed}:distribution")
    reward = RewardModel(data.kg, RewardConfig.preset_named(config.rsft.reward_preset))
    eval_reward = RewardModel(data.kg, RewardConfig.preset_named(config.eval.reward_preset))
    grpo_ids = {q.id for q in selection.grpo_pool}
    for cond in config.distribution.conditions:
        console.rule(f"[bold]distribution: RSFT on {cond}")
        set_seed(config.seed)
        sub = RunDir(run.path / "distribution" / cond)
        sub.path.mkdir(parents=True, exist_ok=True)
        settings = config.rsft.model_copy(update={"distribution": cond})
        t0 = time.perf_counter()
        reused = main_rsft is not None and cond == config.rsft.distribution and config.rsft.enabled
        if reused:
            console.print(f"  [dim]{cond}: the main RSFT phase's adapter (same SFT start, same settings)[/]")
            model = policy("rsft")
            n_winners, n_prompts = main_rsft.get("n_winners"), main_rsft.get("n_prompts")
            if is_writer():
                filter_episodes(sub, lambda ep: False)  # an eval left by an interrupted attempt: redo it
        else:
            prompts = select_prompts(selection.sft, data.train_hard, cond, settings.n_prompts, config.seed,
                                     exclude=grpo_ids)
            start = policy("sft")
            model, res = run_rsft(start, tokenizer, prompts, settings, reward, sub,
                                  ckpt_dir=run.path / "checkpoints" / "distribution" / cond,
                                  adapter_dir=run.path / "adapters" / "distribution" / cond,
                                  seed=config.seed, forbidden_ids=selection.forbidden_ids, resume=True,
                                  generation=config.generation)
            n_winners, n_prompts = res.n_winners, res.n_prompts
            # An eval left by an interrupted attempt may come from a less-trained adapter: redo it.
            if is_writer():
                filter_episodes(sub, lambda ep: ep.get("kind") == ROLLOUT_KIND)
        wait_for_everyone()
        model.eval()
        block = evaluate(model, tokenizer, eval_sub, eval_reward, phase="rsft", split="eval", run=sub,
                         batch_size=config.eval.batch_size, max_new_tokens=config.eval.max_new_tokens,
                         store_metrics=True, engine=config.generation.engine,
                         ct2_compute_type=config.generation.ct2_compute_type)
        model.unload()
        train_split = {"easy": "train", "hard": "train_hard", "mix": "train+train_hard"}[cond]
        out[cond] = {k: block[k] for k in ("n", "correct", "accuracy", "accuracy_ci") if k in block}
        out[cond].update({"by_hop": block.get("by_hop", {}), "train_split": train_split,
                          "n_winners": n_winners, "n_prompts": n_prompts,
                          "seconds": round(time.perf_counter() - t0, 2)})
        if reused:
            out[cond]["from_phase"] = "rsft"
    return out


# ----------------------------------------------------------------------------- reward ablation
def run_ablation(policy: Callable[[str], Any], tokenizer, config: TrainConfig, data: DataBundle,
                 selection: Selection, run: RunDir, console: Console) -> dict[str, Any]:
    """GRPO from the main GRPO phase's start under ``config.ablation.reward_preset``, evaluated on
    the main eval subset and compared pairwise with the main GRPO phase (same questions).

    Its rollouts and eval episodes go to ``<run>/ablation/<preset>/`` (a sub-run, as the
    distribution experiment's), its adapter and checkpoints beside the main ones, so a killed
    ablation resumes from its checkpoint. ``vs_grpo`` is ``library.evaluate.compare_phases`` of
    the main GRPO phase (a) against the ablation (b): a negative ``diff`` means the path reward helped.
    """
    from transformers import set_seed

    from library.distributed import is_writer, wait_for_everyone
    from library.evaluate import EVAL_KIND, compare_phases, evaluate
    from library.grpo import filter_episodes, run_grpo
    from library.reward import RewardConfig, RewardModel

    preset = config.ablation.reward_preset
    console.rule(f"[bold]ablation: GRPO with reward {preset}")
    set_seed(config.seed)
    sub = RunDir(run.path / "ablation" / preset)
    sub.path.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    reward = RewardModel(data.kg, RewardConfig.preset_named(preset))
    # The same live monitor as the main GRPO phase: both arms of the comparison play by one rule
    # (a stop ends either one early).
    from library.monitor import live_monitor
    monitor = live_monitor("grpo", config.monitor, selection.grpo_pool, data.kg, console)
    model, res = run_grpo(policy(config.grpo.init_from), tokenizer, selection.grpo_pool, config.grpo, reward, sub,
                          ckpt_dir=run.path / "checkpoints" / "ablation" / preset,
                          adapter_dir=run.path / "adapters" / "ablation" / preset,
                          seed=config.seed, forbidden_ids=selection.forbidden_ids, resume=True, monitor=monitor)
    # An eval left by an interrupted attempt may come from a less-trained adapter: redo it.
    if is_writer():
        filter_episodes(sub, lambda ep: ep.get("kind") != EVAL_KIND)
    wait_for_everyone()
    model.eval()
    eval_reward = RewardModel(data.kg, RewardConfig.preset_named(config.eval.reward_preset))
    block = evaluate(model, tokenizer, selection.eval, eval_reward, phase="grpo", split="eval", run=sub,
                     batch_size=config.eval.batch_size, max_new_tokens=config.eval.max_new_tokens,
                     store_metrics=True, engine=config.generation.engine,
                     ct2_compute_type=config.generation.ct2_compute_type)
    model.unload()
    main_grpo = [e for e in run.read_episodes(split="eval") if e.phase == "grpo"]
    ablated = [e.model_copy(update={"phase": "ablation"}) for e in sub.read_episodes(split="eval")]
    out = {k: block[k] for k in ("n", "correct", "accuracy", "accuracy_ci") if k in block}
    out.update({"reward_preset": preset, "main_reward_preset": config.grpo.reward_preset,
                "by_hop": block.get("by_hop", {}), "steps": res.steps, "curve": res.curve,
                "vs_grpo": compare_phases(main_grpo + ablated, "eval", "grpo", "ablation"),
                "seconds": round(time.perf_counter() - t0, 2)})
    if res.stopped_by_monitor:
        out["stopped_by_monitor"] = res.stopped_by_monitor
    if config.monitor.enabled:  # does the other reward invite gaming the graph? (what `kgr monitor` recomputes)
        out["monitor"] = phase_monitor_block(config, data, selection, sub, "grpo", res.curve)
    return out
