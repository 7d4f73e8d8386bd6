"""``kgr train --processes 2`` on this CPU machine: two real processes joined over gloo by
accelerate's launcher (torch's elastic agent), the tiny model and the tiny KG, every phase.

The two-process run is stopped after SFT (``--stop-after sft``) and resumed with two processes,
then compared with a one-process run of the same settings: the same files, the same metrics
keys, no episode logged twice, metrics that recompute from the episodes, and the shares of
the work each process did (GRPO's rollouts: one group per process and step).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from library.config import deep_merge, profile_path
from test_train import TINY_OVERRIDES, tiny_config, write_tiny_data

pytestmark = [pytest.mark.train, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
PHASES = ["base", "sft", "rsft", "grpo"]


def _profile_file(path: Path, data_dir: Path) -> Path:
    """The quick profile with the tiny overrides, as a YAML file `kgr train --profile` reads
    (the same TrainConfig as ``tiny_config(data_dir)``)."""
    raw = yaml.safe_load(profile_path("quick").read_text(encoding="utf-8"))
    merged = deep_merge(raw, json.loads(json.dumps(TINY_OVERRIDES)))
    merged.update({"data_dir": str(data_dir), "kg_path": str(data_dir / "kg.json"), "threads": None,
                   "profile": "quick"})
    path.write_text(yaml.safe_dump(merged), encoding="utf-8")
    return path


def _kgr_train(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "PYTHONPATH": str(REPO)}
    env.pop("WORLD_SIZE", None)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "library.cli", "train", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=3600)
    return proc, time.perf_counter() - t0


def _failure(proc: subprocess.CompletedProcess) -> str:
    """What a failed launch printed that says why: every process's own traceback lines (the
    launcher prints the survivors' last, so the tail alone hides the rank that failed first)."""
    ranked = [line for line in proc.stderr.splitlines() if line.startswith("[rank0]:")]
    return "\n".join(ranked[-80:]) + "\n...\n" + proc.stderr[-3000:]


def _key_tree(obj, depth: int = 3):
    """The nested keys of a metrics dict (values dropped), ``depth`` levels down."""
    if not isinstance(obj, dict) or depth == 0:
        return None
    return {k: _key_tree(v, depth - 1) for k, v in obj.items()}


def _files(run_dir: Path) -> set[str]:
    """Every file of a run folder except the trainers' per-rank RNG states (one per process)."""
    return {str(p.relative_to(run_dir)) for p in run_dir.rglob("*")
            if p.is_file() and not p.name.startswith("rng_state")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from library.train.pipeline import run_training

    root = tmp_path_factory.mktemp("scale_out")
    data_dir = write_tiny_data(root / "data")
    profile = _profile_file(root / "tiny.yaml", data_dir)
    t0 = time.perf_counter()
    single = run_training(tiny_config(data_dir), root / "single")
    seconds = {"single": time.perf_counter() - t0}

    multi_dir = root / "multi"
    first, seconds["multi_until_sft"] = _kgr_train("--processes", "2", "--profile", str(profile),
                                                   "--run", str(multi_dir), "--stop-after", "sft")
    assert first.returncode == 0, _failure(first)
    stopped = json.loads((multi_dir / "meta.json").read_text(encoding="utf-8"))
    second, seconds["multi_resume"] = _kgr_train("--processes", "2", "--profile", str(profile),
                                                 "--run", str(multi_dir), "--resume")
    assert second.returncode == 0, _failure(second)
    print(f"\nscale-out timings (s): {json.dumps({k: round(v, 1) for k, v in seconds.items()})}")
    return single.path, multi_dir, stopped


def test_two_process_run_stops_after_a_phase_and_resumes(runs):
    _, multi, stopped = runs
    assert stopped["phases_completed"] == ["base", "sft"] and stopped["status"] == "stopped after sft"
    assert stopped["processes"]["num_processes"] == 2 and stopped["processes"]["backend"] == "gloo"
    meta = json.loads((multi / "meta.json").read_text(encoding="utf-8"))
    assert meta["phases_completed"] == PHASES and meta["status"] == "complete"
    assert len(meta["resumed"]) == 1


def test_run_folder_matches_a_single_process_run(runs):
    single, multi, _ = runs
    assert _files(multi) == _files(single)
    ms, mm = (json.loads((d / "metrics.json").read_text(encoding="utf-8")) for d in (single, multi))
    assert _key_tree(mm) == _key_tree(ms)
    meta_s, meta_m = (json.loads((d / "meta.json").read_text(encoding="utf-8")) for d in (single, multi))
    assert set(meta_m) == set(meta_s) | {"resumed"}
    assert meta_s["processes"]["num_processes"] == 1
    assert meta_m["selection"] == meta_s["selection"]  # the same questions for every phase
    # greedy evaluation sharded over 2 processes answers exactly as one process does
    from library.runs.folder import RunDir

    def base_answers(path):
        return {e.ex_id: e.completion for e in RunDir(path).read_episodes(phase="base") if e.kind == "eval"}

    assert base_answers(multi) == base_answers(single)


def test_every_episode_is_logged_once_by_one_writer(runs):
    _, multi, _ = runs
    lines = (multi / "episodes.jsonl").read_text(encoding="utf-8").splitlines()
    episodes = [json.loads(line) for line in lines]  # whole lines: nothing interleaved
    keys = [(e["phase"], e.get("eval_split") or e["split"], e["ex_id"], e["step"], e.get("sample_idx"), e.get("kind"))
            for e in episodes]
    assert len(keys) == len(set(keys)), "an episode was logged twice"
    meta = json.loads((multi / "meta.json").read_text(encoding="utf-8"))
    for phase in PHASES:  # every eval question answered once per phase and split
        for split in ("eval", "eval_shuffled", "train_sample"):
            ids = [e["ex_id"] for e in episodes if e["phase"] == phase and e.get("kind") == "eval"
                   and e.get("eval_split") == split]
            assert sorted(ids) == sorted(meta["selection"][split]["ids"]), (phase, split)
    rsft = [e for e in episodes if e["phase"] == "rsft" and e.get("kind") == "rollout"]
    assert len(rsft) == 2 * 2  # prompts x k, sampled half per process, logged once
    grpo = [e for e in episodes if e["phase"] == "grpo" and e.get("kind") == "rollout"]
    # per-device batch: one prompt x 2 generations; 2 processes -> 2 groups a step, 2 steps
    assert len(grpo) == 2 * 2 * 2
    for step in (1, 2):
        groups: dict[str, list[int]] = {}
        for e in grpo:
            if e["step"] == step:
                groups.setdefault(e["ex_id"], []).append(e["sample_idx"])
        assert all(sorted(idx) == list(range(len(idx))) for idx in groups.values()), groups
        assert sum(len(v) for v in groups.values()) == 4


def test_two_process_metrics_recompute_from_episodes(runs):
    from library.evaluation.evaluate import metrics_from_run
    from library.evaluation.monitor import monitor_run
    from library.runs.folder import RunDir

    _, multi, _ = runs
    run = RunDir(multi)
    metrics, selection = run.read_metrics(), run.read_meta()["selection"]
    for split in ("eval", "eval_shuffled", "train_sample"):
        for phase in PHASES:
            recomputed = metrics_from_run(run, phase=phase, split=split, ex_ids=selection[split]["ids"])
            assert json.loads(json.dumps(recomputed)) == metrics[split][phase], (split, phase)
    assert monitor_run(multi)["phases"] == metrics["monitor"]
    assert [p["step"] for p in metrics["curves"]["grpo"]] == [1, 2]
    assert all(p["n"] == 4 for p in metrics["curves"]["grpo"])  # both processes' rollouts in each point
