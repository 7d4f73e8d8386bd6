"""Data cannot drift under a run: `kgr data` writes a split set whole, asks before replacing
one, and every reader of a run refuses question files or a graph other than those it was
trained on (meta.json's sha256), naming them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from library.cli import app
from library.errors import DataFileError
from library.questions import DatasetConfig
from library.questions.dataset import FAR_FILES
from library.questions.plan import build_dataset
from library.questions.splits import OverwriteRefused
from library.questions.split_set import SPLIT_FILES, STATS_FILE, verify_split_set

REPO = Path(__file__).resolve().parents[1]
REAL_KG = REPO / "data" / "kg.json"
SMALL = dict(n_train=300, n_eval=40, n_train_hard=40, n_dev=20, progress=False)
NAMES = [*SPLIT_FILES.values(), *FAR_FILES.values(), STATS_FILE]


def _contents(folder: Path) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in NAMES if (folder / name).exists()}


@pytest.fixture(scope="module")
def two_sets(tmp_path_factory):
    """The same small split set at seed 0 and seed 1."""
    root = tmp_path_factory.mktemp("sets")
    for seed in (0, 1):
        build_dataset(DatasetConfig(kg_path=REAL_KG, out_dir=root / f"seed{seed}", seed=seed, **SMALL))
    return _contents(root / "seed0"), _contents(root / "seed1")


class _Killed(BaseException):
    """Stands for SIGKILL inside the process: nothing after the raising call runs."""


@pytest.mark.parametrize("where", ["fsync", "replace"])
def test_a_kgr_data_stopped_at_any_write_leaves_the_old_set_or_one_that_is_refused(tmp_path, monkeypatch, two_sets, where):
    old, new = two_sets
    # every point: each staged file's fsync, stats.json's and each split's rename into place
    for point in range(len(NAMES) + 1):
        out = tmp_path / f"{where}{point}"
        out.mkdir()
        for name, data in old.items():
            (out / name).write_bytes(data)
        real = getattr(os, where)
        calls = []

        def stop(*args, real=real, calls=calls, point=point):
            calls.append(args)
            if len(calls) > point:
                raise _Killed
            return real(*args)

        monkeypatch.setattr(os, where, stop)
        try:
            build_dataset(DatasetConfig(kg_path=REAL_KG, out_dir=out, seed=1, **SMALL))
            finished = True
        except _Killed:
            finished = False
        finally:
            monkeypatch.setattr(os, where, real)
        now = _contents(out)
        if now == old or now == new:
            verify_split_set(out)  # one complete set: accepted
            assert finished or now == old or point >= len(NAMES)
        else:
            with pytest.raises(DataFileError, match="does not match the stats.json|do not match the stats.json"):
                verify_split_set(out)
        if finished:
            assert now == new


def test_a_kgr_data_killed_for_real_mid_write_is_refused_by_kgr_train(tmp_path, two_sets):
    old, _ = two_sets
    out = tmp_path / "data"
    out.mkdir()
    for name, data in old.items():
        (out / name).write_bytes(data)
    # the third rename into place (stats.json, then two splits) is the last thing the process does
    code = (
        "import os, signal, sys\n"
        "real = os.replace\n"
        "n = [0]\n"
        "def replace(*a):\n"
        "    n[0] += 1\n"
        "    if n[0] == 4:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return real(*a)\n"
        "os.replace = replace\n"
        "from library.questions import DatasetConfig\n"
        "from library.questions.plan import build_dataset\n"
        f"build_dataset(DatasetConfig(kg_path=sys.argv[1], out_dir=sys.argv[2], seed=1, **{SMALL!r}))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(REAL_KG), str(out)], cwd=REPO, capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    with pytest.raises(DataFileError, match="kgr data --out"):
        verify_split_set(out)
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", "--data-dir", str(out), "--kg", str(REAL_KG), "--model", "tiny",
                                      "--run", str(run)])
    assert result.exit_code == 2, result.output
    assert "does not match the stats.json" in result.output or "do not match the stats.json" in result.output
    assert not run.exists()  # refused before the run folder is made


def test_kgr_data_asks_before_replacing_other_splits(tmp_path):
    out = tmp_path / "data"
    args = ["data", "--kg", str(REAL_KG), "--out", str(out), "--n-train", "300", "--n-eval", "40",
            "--n-train-hard", "40", "--n-dev", "20", "--no-progress"]
    assert CliRunner().invoke(app, args).exit_code == 0
    first = _contents(out)
    # the same seed again: nothing would change, nothing is asked
    assert CliRunner().invoke(app, args).exit_code == 0 and _contents(out) == first
    # another seed, off a terminal: refused, naming the files, and nothing written
    result = CliRunner().invoke(app, [*args, "--seed", "1"])
    assert result.exit_code == 2, result.output
    assert "train.jsonl" in result.output and "--force" in result.output
    assert _contents(out) == first
    # declined (the question a terminal gets): the same
    with pytest.raises(OverwriteRefused, match="train.jsonl"):
        build_dataset(DatasetConfig(kg_path=REAL_KG, out_dir=out, seed=1, **SMALL), confirm=lambda changed: False)
    assert _contents(out) == first
    # --force replaces them with a complete set
    assert CliRunner().invoke(app, [*args, "--seed", "1", "--force"]).exit_code == 0
    assert _contents(out) != first
    verify_split_set(out)


@pytest.fixture
def quick_copy(tmp_path):
    """data/runs/quick's logs, trained on a copy of data/keyed that the test may change."""
    data = tmp_path / "keyed"
    shutil.copytree(REPO / "data" / "keyed", data)
    run = tmp_path / "quick"
    run.mkdir()
    for name in ("meta.json", "metrics.json", "episodes.jsonl"):
        shutil.copy(REPO / "data" / "runs" / "quick" / name, run / name)
    meta = json.loads((run / "meta.json").read_text())
    meta["config"]["data_dir"] = str(data)
    (run / "meta.json").write_text(json.dumps(meta))
    return run, data


def test_every_reader_refuses_data_other_than_the_runs(quick_copy, tmp_path):
    from library.demo.site import collect
    from library.evaluation.diagnosis import diagnose_run
    from library.evaluation.monitor import monitor_run

    run, data = quick_copy
    assert diagnose_run(run)["sft"]["n"] == 150  # the data it was trained on: read
    build_dataset(DatasetConfig(kg_path=REAL_KG, out_dir=data, seed=1, step_order="keyed", **SMALL))
    result = CliRunner().invoke(app, ["diagnose", str(run)])
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "not the data" in message and "eval.jsonl" in message and "train.jsonl" in message
    with pytest.raises(DataFileError, match="not the data"):
        monitor_run(run)
    site = collect([run])
    assert not site.runs and "not the data" in site.skipped[0]["reason"]
    # pointed at the files it was trained on, every reader works again
    assert diagnose_run(run, data_dir=REPO / "data" / "keyed")["sft"]["n"] == 150
    # a changed graph is named the same way
    kg = tmp_path / "kg.json"
    graph = json.loads(REAL_KG.read_text())
    graph["entities"][0]["label"] += " (changed)"
    kg.write_text(json.dumps(graph))
    with pytest.raises(DataFileError, match="kg.json"):
        diagnose_run(run, data_dir=REPO / "data" / "keyed", kg_path=kg)


def test_the_video_refuses_data_other_than_the_runs(quick_copy):
    from scenes.resolve import RunData

    run, data = quick_copy
    (data / "eval.jsonl").write_text((data / "eval.jsonl").read_text().replace("ANSWER", "ANSWER "))
    with pytest.raises(DataFileError, match="eval.jsonl"):
        RunData.load(run).questions("eval")


def test_a_full_disk_is_one_sentence_and_leaves_the_old_set(tmp_path, monkeypatch, two_sets):
    import errno

    old, _ = two_sets
    out = tmp_path / "data"
    out.mkdir()
    for name, data in old.items():
        (out / name).write_bytes(data)
    calls = []

    def full(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    result = CliRunner().invoke(app, ["data", "--kg", str(REAL_KG), "--out", str(out), "--seed", "1", "--force",
                                      "--n-train", "300", "--n-eval", "40", "--n-train-hard", "40", "--n-dev", "20"])
    assert result.exit_code == 2, result.output
    assert "cannot write it (No space left on device)" in " ".join(result.output.split())
    assert _contents(out) == old and sorted(p.name for p in out.iterdir()) == sorted(NAMES)  # no temporary files left


def test_a_renamed_copy_is_checked_and_a_runs_own_copy_is_its_own(quick_copy, tmp_path, monkeypatch):
    from library.runs.reader import RunView

    run, data = quick_copy
    other = tmp_path / "other.jsonl"
    other.write_text((data / "eval.jsonl").read_text().replace("ANSWER", "ANSWER "))
    with pytest.raises(DataFileError, match="not the data"):
        RunView.open(run, questions=other).questions("eval")
    # a run's own KG copy is the run's, however the run's path is written
    shutil.copy(REAL_KG, run / "kg.json")
    meta = json.loads((run / "meta.json").read_text())
    meta["data"]["kg.json"] = "0" * 64
    (run / "meta.json").write_text(json.dumps(meta))
    monkeypatch.chdir(run.parent)
    assert RunView.open(run.name).kg.entities and RunView.open(run).kg.entities


@pytest.mark.parametrize("text", ["[]", '{"files": ["train.jsonl"]}'])
def test_a_stats_json_of_another_shape_is_one_sentence(tmp_path, text):
    (tmp_path / STATS_FILE).write_text(text)
    with pytest.raises(DataFileError, match="is not the stats.json `kgr data` writes"):
        verify_split_set(tmp_path)
