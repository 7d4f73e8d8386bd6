"""The run folder's bookkeeping beside the phases' own output: what ``library.train.pipeline``
records about a run and checks before it resumes one.

- ``meta.json``: every setting (the whole TrainConfig), the backend, seed, data sha256 hashes,
  library and package versions, platform, model info, reward configs, which questions each phase
  may use (the GRPO pool ids, counts), and ``phases_completed`` (resume state): :func:`build_meta`,
  :func:`open_meta`.
- Resume checks: the same backend, data and settings (:func:`comparable_config`, which the
  experiments and research sweeps also compare a finished run's config with), else
  :class:`ResumeError` naming the differences (:func:`config_differences`).
- What an unfinished phase keeps of its episodes when it is redone (:func:`drop_phase_episodes`),
  and the ``trained.json`` marker of a phase whose training finished (:func:`trained_marker`).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import resource
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from library import __version__
from library.config import MEASUREMENT_ONLY, TrainConfig, drop_retired
from library.contracts import EVAL_KIND, ROLLOUT_KIND
from library.jsonl import atomic_write_json
from library.model.distributed import process_summary
from library.runs.folder import RunDir
from library.train.checkpoints import saved_phase
from library.train.data import DataBundle, Selection
from library.train.rewards import RunRewards

# torch is imported inside platform_info (the CLI starts without it).

TRAINED_MARKER = "trained.json"


class ResumeError(RuntimeError):
    """The run folder exists but cannot be resumed with this config (or resume was not asked for)."""


# ----------------------------------------------------------------------------- meta.json
def _versions() -> dict[str, Any]:
    out: dict[str, Any] = {"python": platform.python_version()}
    for pkg in ("torch", "transformers", "peft", "trl", "accelerate", "datasets"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def platform_info(threads: int | None) -> dict[str, Any]:
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


def build_meta(config: TrainConfig, run: RunDir, data: DataBundle, selection: Selection, model_info: dict[str, Any],
               rewards: RunRewards) -> dict[str, Any]:
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
        "reward": rewards.meta(),
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
              rewards: RunRewards, backend: Any, *, fresh: bool, write: bool = True) -> dict[str, Any]:
    """meta.json for this process: written new for a fresh run; for a resumed one, checked to
    come from the same backend, settings and data (else ResumeError) and marked running again.
    ``write=False`` (the non-main processes of a multi-process run) builds and checks the same
    dict without writing it."""
    if fresh:
        meta = build_meta(config, run, data, selection, base_info, rewards)
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
        if selection.eval_far:  # measured from here on (it decides nothing trained: comparable_config)
            meta.setdefault("selection", {})["eval_far"] = selection.summary()["eval_far"]
        meta["status"] = "running"
        meta.setdefault("resumed", []).append(_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
        meta["processes"] = process_summary()  # a resume may use another number of processes
        if write:
            run.write_meta(meta)
    return meta


#: Settings whose default differs from what a run recorded before they existed did: the draws'
#: precision was the generation precision, and RSFT kept any right letter.
BEFORE_ADDED: dict[tuple[str, str], Any] = {("generation", "sampling_precision"): "generation",
                                            ("rsft", "winners"): "correct"}


def comparable_config(config: TrainConfig | dict[str, Any]) -> dict[str, Any]:
    """The settings that decide what the phases train, as meta.json records them: everything but
    the experiments (library/experiments), which run beside the pipeline on a finished run, and
    the start-up estimate, and the measurements that decide nothing trained (``MEASUREMENT_ONLY``:
    eval_far). A recorded config is read through :class:`TrainConfig` first, so a
    setting added since it was written compares at its default - except those whose default is
    not what ran before they existed (:data:`BEFORE_ADDED`) - and a
    setting removed since compares as absent where it held the behaviour kept
    (:func:`library.config.drop_retired`)."""
    if not isinstance(config, TrainConfig):
        config = drop_retired(config)
        for (section, key), before in BEFORE_ADDED.items():
            recorded = config.get(section)
            if isinstance(recorded, dict) and key not in recorded:
                config = {**config, section: {**recorded, key: before}}
        try:
            config = TrainConfig.model_validate(config)
        except ValidationError:
            pass  # compared as recorded: it differs
    current = dict(config.to_meta() if isinstance(config, TrainConfig) else config)
    for section in ("distribution", "ablation", "estimate"):
        current.pop(section, None)
    if isinstance(current.get("eval"), dict):
        current["eval"] = {k: v for k, v in current["eval"].items() if k not in MEASUREMENT_ONLY}
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
    def keep(ep: dict[str, Any]) -> bool:
        if ep.get("phase") != phase:
            return True
        kind = ep.get("kind")
        return (keep_rollouts and kind == ROLLOUT_KIND) or (keep_eval and kind == EVAL_KIND)

    return run.keep_episodes(keep)


def trained_marker(ckpt_dir: Path, adapter_dir: Path) -> dict[str, Any] | None:
    """The training record of a phase whose training finished (its eval may not have), else None."""
    marker = ckpt_dir / TRAINED_MARKER
    if marker.exists() and saved_phase(adapter_dir):  # an adapter, or the whole model of a full SFT
        return json.loads(marker.read_text(encoding="utf-8"))
    return None


def mark_trained(ckpt_dir: Path, info: dict[str, Any]) -> None:
    atomic_write_json(ckpt_dir / TRAINED_MARKER, info)
