"""Bring a run folder written by an older version of the library to the current log format,
once, in place (``kgr migrate RUN ...``), so that every reader reads one format.

What older runs lack, and what is written instead:

- an episode without ``parsed.claims`` gets the claims the reward's own scanner reads in its
  TRACE, each judged against the KG and the question's gold path (what the reward stores today);
- an episode without ``reward.max_mentions`` (the most times one entity is named) gets it from
  the same scoring;
- an episode without what readers show (``parsed.spans``: the entities the completion names;
  ``parsed.steps`` and ``parsed.steps_hidden``: its TRACE's fact clauses as a card shows them;
  ``grounded``: every gold edge claimed in path order) gets them from the same scoring, the one
  time it is re-scored: the video and the demo page read them and refuse a run without them
  (:meth:`library.runs.reader.RunView.require_current`), so no reader scans a completion again;
- an episode without ``kind`` is an ``eval`` answer unless it is an RSFT/GRPO sample
  (a ``sample_idx``, or a training step on a training split); ``correct`` is the one
  correctness rule (:func:`library.scoring.answer_format.is_correct`);
- ``meta.json`` loses settings of generation engines that no longer exist;
- a ``metrics.json`` evaluation block without ``grounded`` (right answers whose TRACE states the
  gold path) gets it from that phase's eval episodes, by the metrics' own function, when they
  give the block's ``correct`` and ``n`` back;
- a ``metrics.json`` of a run with RL rollouts but no ``monitor`` section (a run older than the
  reward-hacking monitor) gets the blocks training writes today, recomputed from the logged
  rollouts by :func:`library.evaluation.monitor.monitor_run` (what ``kgr monitor RUN`` prints).

Files are rewritten atomically and only when something changed; a current run is left as it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from library.contracts import EVAL_KIND, ROLLOUT_KIND, Question
from library.evaluation.evaluate import metrics_from_episodes
from library.evaluation.monitor import monitor_run
from library.jsonl import iter_jsonl
from library.runs.folder import EPISODES, META, RunDir
from library.runs.reader import RunView
from library.scoring.answer_format import is_correct
from library.scoring.reward import RewardModel

#: Settings of removed features, dropped from an old meta.json's config.
REMOVED_SETTINGS = {"generation": ("engine", "ct2_compute_type")}


def _episode_files(run: Path) -> list[Path]:
    return sorted(run.rglob(EPISODES))


#: What scoring stores with an episode's parse that older logs may lack (library/contracts.py).
SCORED_PARSE = ("claims", "spans", "steps", "steps_hidden")


def migrate_episode(obj: dict[str, Any], question: Question | None, reward: RewardModel) -> bool:
    """Fill what an old episode line lacks, in place; True when it changed. Only missing keys
    are added: what the line already records stays as it is."""
    changed = False
    parsed, breakdown = obj["parsed"], obj["reward"]
    missing = [key for key in SCORED_PARSE if parsed.get(key) is None]
    if missing or "max_mentions" not in breakdown or obj.get("grounded") is None:
        if question is None:
            raise ValueError(f"episode {obj.get('ex_id')!r} needs its question to be migrated")
        scored = reward.score(question, obj["completion"])
        fresh = scored.parsed.model_dump(mode="json")
        for key in missing:
            parsed[key] = fresh[key]
        breakdown.setdefault("max_mentions", scored.reward.model_dump().get("max_mentions", 0))
        if obj.get("grounded") is None:
            obj["grounded"] = scored.grounded
        changed = True
    if obj.get("kind") is None:
        rollout = obj.get("sample_idx") is not None or (obj.get("step", 0) > 0 and obj.get("split") != "eval")
        obj["kind"] = ROLLOUT_KIND if rollout else EVAL_KIND
        changed = True
    star = obj.get("answer_star") or (question.answer_star if question else None)
    if star is not None:
        verdict = is_correct(parsed.get("answer"), parsed.get("valid_format", False), star)
        if obj.get("correct") != verdict or obj.get("answer_star") != star:
            obj["correct"], obj["answer_star"] = verdict, star
            changed = True
    elif obj.get("correct") is None:
        obj["correct"] = float(breakdown.get("correctness", 0)) > 0
        changed = True
    return changed


def migrate_run(path: str | Path, *, data_dir: str | Path | None = None, kg: str | Path | None = None) -> dict[str, int]:
    """Migrate one run folder and its experiments' sub-runs; returns counts of what changed."""
    view = RunView.open(path, data_dir=data_dir, kg=kg)
    counts = {"episodes": 0, "files": 0, "meta": 0}
    meta_path = view.path / META
    if meta_path.exists():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        config = meta.get("config") or {}
        dropped = False
        for section, keys in REMOVED_SETTINGS.items():
            for key in keys:
                if key in (config.get(section) or {}):
                    del config[section][key]
                    dropped = True
        if dropped:
            RunDir(view.path).write_meta(meta)
            counts["meta"] = 1
    reward = RewardModel.from_preset(view.kg, (meta.get("reward") or {}).get("preset") if meta_path.exists() else None)
    questions: dict[str, dict[str, Question]] = {}
    def question(obj: dict[str, Any]) -> Question | None:
        split = obj.get("split", "eval")
        if split not in questions:
            qfile = view.questions_file(split)
            questions[split] = {q.id: q for _, q in iter_jsonl(qfile, Question)} if qfile.exists() else {}
        return questions[split].get(obj.get("ex_id"))

    for file in _episode_files(view.path):
        changed = RunDir(file.parent).edit_episodes(lambda obj: migrate_episode(obj, question(obj), reward))
        if changed:
            counts["episodes"] += changed
            counts["files"] += 1
    counts["metrics"] = _migrate_metrics(RunView.open(path, data_dir=data_dir, kg=kg))
    return counts


def _migrate_metrics(view: RunView) -> int:
    """Add what an old metrics.json lacks (``grounded`` blocks, the ``monitor`` section), in one
    write; the number of blocks added."""
    metrics_path = view.path / "metrics.json"
    if not metrics_path.exists():
        return 0
    metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
    added = _add_grounded(view, metrics) + _add_monitor(view, metrics)
    if added:
        RunDir(view.path).write_metrics(metrics)
    return added


def _add_grounded(view: RunView, metrics: dict[str, Any]) -> int:
    """Add the ``grounded`` block to every evaluation block of ``metrics`` that lacks it; the
    number of blocks added."""
    added = 0
    for split, phases in metrics.items():
        if not isinstance(phases, dict):
            continue
        for phase, block in phases.items():
            if not (isinstance(block, dict) and "accuracy" in block and "n" in block) or "grounded" in block:
                continue
            episodes = list(view.eval_episodes(phase, split).values())
            fresh = metrics_from_episodes(episodes) if episodes else None
            if fresh is None or (fresh["n"], fresh["correct"]) != (block["n"], block["correct"]):
                continue  # the log does not give this block back: leave it as it is
            block["grounded"] = fresh["grounded"]
            added += 1
    return added


def _add_monitor(view: RunView, metrics: dict[str, Any]) -> int:
    """Add the ``monitor`` section (and the ablation's) to ``metrics`` when the run has RL
    rollouts and no monitor block yet, as training writes them today; the number of blocks added."""
    if "monitor" in metrics and "monitor" in (metrics.get("ablation") or {"monitor": None}):
        return 0
    if not any(ep.kind == ROLLOUT_KIND for ep in view.episodes):
        return 0
    report = monitor_run(view.path, data_dir=view.data_dir, kg_path=view.kg_path)
    added = 0
    if "monitor" not in metrics and report["phases"]:
        metrics["monitor"] = report["phases"]
        added += len(report["phases"])
    if "ablation" in report and "monitor" not in metrics.get("ablation", {}):
        metrics["ablation"]["monitor"] = report["ablation"]
        added += 1
    return added
