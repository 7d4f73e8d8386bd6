"""Start a run from another run's finished SFT: try another RL recipe without training SFT again.

``kgr train --from RUN --run NEW ...`` copies RUN's base and SFT phases into NEW (their eval
episodes, their metrics and the SFT model), and its RSFT too where NEW's RSFT settings (and the
monitor's) and prompts are RUN's, and then trains the rest of NEW's phases as a resumed run
would. On a 2-core CPU SFT is most of a run's time (quick: ~13 of ~20 minutes), and an RL
recipe is what one changes most often.

It is allowed only where NEW's settings would have trained that very SFT: the same settings
outside the RL phases, the same data files (sha256), and the same SFT rows and evaluation
questions (the GRPO pool is held out of SFT, so a GRPO setting that moves the pool moves SFT's
rows, and is refused here). Everything else stays the run folder's usual contract: meta.json
records NEW's settings and ``forked_from``; nothing of RUN's later phases is copied.

Why by hand: this is the run folder's own bookkeeping (which files a phase owns), which no
library knows.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from library.config import TrainConfig
from library.jsonl import iter_jsonl
from library.model.distributed import process_summary
from library.runs.folder import RunDir
from library.train.bookkeeping import ResumeError, build_meta, comparable_config, config_differences
from library.train.data import load_data, make_selection
from library.train.rewards import run_rewards

#: Settings a fork may change: those of the phases after SFT, what runs beside the phases, and
#: the profile's name (a label: the settings are compared one by one).
AFTER_SFT = ("rsft", "grpo", "monitor", "distribution", "ablation", "estimate", "profile")
#: The phases a fork always copies: the base model's evaluation and SFT.
COPIED = ("base", "sft")
#: Settings that decide RSFT besides its own: a fork whose RSFT and these equal the source's, and
#: whose source finished RSFT, copies RSFT too (so a GRPO recipe is tried from the same RSFT).
RSFT_DECIDED_BY = ("rsft", "monitor")


def fork_run(source: str | Path, dest: str | Path, config: TrainConfig, backend: str = "torch") -> RunDir:
    """Write ``dest`` as a run of ``config`` whose base and SFT phases are ``source``'s; return it.
    ``run_training(config, dest, resume=True)`` then trains the remaining phases.

    Raises :class:`ResumeError` naming what differs where ``config`` would not have trained
    ``source``'s SFT, or where ``source`` has not finished it; then nothing is written. The
    folder is written whole or not at all (into ``<dest>.forking``, then renamed).
    """
    src, dst = RunDir(source), Path(dest)
    if dst.exists() and any(dst.iterdir()):
        raise ResumeError(f"{dst} already holds files; choose another --run (or --resume a fork without --from)")
    meta = src.read_meta()
    done = meta.get("phases_completed") or []
    if not set(COPIED) <= set(done):
        raise ResumeError(f"{src.path} has not finished {' and '.join(p for p in COPIED if p not in done)}; "
                          "--from needs a run whose SFT and its evaluation are done")
    if meta.get("backend", "torch") != backend:
        raise ResumeError(f"{src.path} was trained with backend {meta.get('backend')!r}, not {backend!r}")
    recorded = meta.get("config") or {}
    was_settings, new_settings = comparable_config(recorded), comparable_config(config)

    def before_rl(settings: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in settings.items() if k not in AFTER_SFT}

    if before_rl(was_settings) != before_rl(new_settings):
        raise ResumeError(f"{src.path}'s SFT was trained with other settings "
                          f"({config_differences(before_rl(was_settings), before_rl(new_settings))}); "
                          "--from keeps SFT as it was")
    data = load_data(config)
    if meta.get("data") != data.hashes:
        raise ResumeError(f"{config.data_dir}'s files are not the ones {src.path} was trained on (sha256 differs)")
    try:
        was = make_selection(TrainConfig.model_validate(comparable_config(recorded)), data)
    except (ValidationError, ValueError) as exc:
        raise ResumeError(f"{src.path}'s meta.json records settings this version cannot read back "
                          f"({str(exc).splitlines()[0]}); fork a run trained by this version") from None
    now = make_selection(config, data)
    rsft_same = (config.rsft.enabled and "rsft" in done
                 and all(was_settings.get(k) == new_settings.get(k) for k in RSFT_DECIDED_BY)
                 and [q.id for q in was.rsft_prompts] == [q.id for q in now.rsft_prompts])
    copied = (*COPIED, "rsft") if rsft_same else COPIED
    for part in ("sft", "eval", "train_sample"):
        if [q.id for q in getattr(was, part)] != [q.id for q in getattr(now, part)]:
            raise ResumeError(f"these settings draw other {part} questions than {src.path}'s (the GRPO pool is held "
                              f"out of SFT; a grpo.n_prompts or grpo.prompt_hops that moves it moves SFT's rows)")
    # meta.json as a fresh run of ``config`` writes it, with the source's model, backend and lineage
    new = build_meta(config, RunDir(dst), data, now, meta["model"], run_rewards(config, data.kg))
    new.update({k: meta[k] for k in ("backend", "backend_options") if k in meta})
    new.update({"processes": process_summary(), "phases_completed": list(copied),
                "forked_from": {"run": str(src.path), "run_id": meta.get("run_id"), "phases": list(copied)}})

    work = dst.with_name(dst.name + ".forking")
    shutil.rmtree(work, ignore_errors=True)  # what an interrupted fork left
    out = RunDir(work)
    with out.lock():
        for phase in copied[1:]:  # base has no model of its own
            # a full SFT model is ~0.5 GB and is replaced whole when saved, so it is linked; a LoRA
            # adapter is saved over in place, so it is copied
            _copy_tree(src.path / "adapters" / phase, work / "adapters" / phase,
                       link=phase == "sft" and config.sft.method == "full")
            (work / "checkpoints" / phase).mkdir(parents=True)
            # the pipeline's markers ("training finished", RSFT's "rollouts sampled"); not the
            # trainer's states (1.7 GB for a full SFT)
            for marker in (src.path / "checkpoints" / phase).iterdir():
                if marker.is_file() and marker.name != "README.md":
                    shutil.copy2(marker, work / "checkpoints" / phase / marker.name)
        out.append_episodes(obj for _, obj in iter_jsonl(src.episodes_path) if obj.get("phase") in copied)
        out.write_metrics(_copied_metrics(src.read_metrics(), copied))
        out.write_meta(new)
    (work / ".lock").unlink(missing_ok=True)
    if dst.exists():
        dst.rmdir()  # empty, checked above
    work.rename(dst)
    return RunDir(dst)


def _forked_from(run: str | Path) -> dict[str, Any]:
    """``run``'s meta.json ``forked_from`` (``{}`` for a run not forked, or no run)."""
    meta_path = Path(run) / "meta.json"
    if not meta_path.is_file():
        return {}
    return json.loads(meta_path.read_text(encoding="utf-8")).get("forked_from") or {}


def is_fork_of(run: str | Path, source: str | Path) -> bool:
    """Whether ``run`` was forked from ``source`` (its meta.json's ``forked_from``)."""
    forked = _forked_from(run).get("run")
    return forked is not None and Path(forked).resolve() == Path(source).resolve()


def sft_source(run: str | Path) -> Path:
    """The run that trained ``run``'s SFT: ``run`` itself, or the end of its chain of forks
    (a fork of a fork copies the same SFT model).

    >>> sft_source("data/runs/quick") == Path("data/runs/quick") or sft_source("data/runs/quick").is_dir()
    True
    """
    path, seen = Path(run), set()
    while path.resolve() not in seen:
        seen.add(path.resolve())
        forked = _forked_from(path)
        if not forked.get("run") or "sft" not in (forked.get("phases") or ()) or not Path(forked["run"]).is_dir():
            return path
        path = Path(forked["run"])
    return path


def _copied_metrics(metrics: dict[str, Any], copied: tuple[str, ...] = COPIED) -> dict[str, Any]:
    """The copied phases' part of a metrics.json: each per-phase block, curve, timing and monitor
    report of ``copied``, and the comparisons between them; nothing of the phases after."""
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        if not isinstance(value, dict):
            continue
        if key == "timings":
            kept = {k: v for k, v in value.items() if k.removesuffix("_eval") in copied}
        elif key == "resources":
            after = {k: v for k, v in (value.get("peak_rss_mb_after") or {}).items() if k in copied}
            kept = {"peak_rss_mb": max(after.values(), default=0.0), "peak_rss_mb_after": after}
        elif key == "comparisons":
            kept = {k: v for k, v in value.items() if set(k.split("-")) <= set(copied)}
        else:
            kept = {k: v for k, v in value.items() if k in copied}
        if kept:
            out[key] = kept
    return out


def _copy_tree(src: Path, dst: Path, *, link: bool) -> None:
    """``src`` copied to ``dst``, as hard links where ``link`` and the file system allows."""
    def link_or_copy(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, dst, copy_function=link_or_copy if link else shutil.copy2)
