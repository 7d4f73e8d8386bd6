import json

import pytest

from library.errors import DataFileError
from library.runs.folder import RunDir, list_runs


def _episode(i: int, phase: str = "base") -> dict:
    return {
        "phase": phase, "step": i, "ex_id": f"eval-{i:04d}", "split": "eval",
        "prompt": "Q?", "completion": "TRACE: a is caused by b.\nANSWER: A",
        "parsed": {"answer": "A", "trace_text": "a is caused by b.", "trace_entities": ["a", "b"],
                   "path_entities": ["a", "b"], "valid_format": True, "claims": []},
        "reward": {"correctness": 1.0, "path_coverage": 1.0, "path_reward": 1.0, "spam_penalty": 0.0, "total": 1.5},
        "kind": "eval", "correct": True,
    }


def test_roundtrip_meta_metrics_episodes(tmp_path):
    run = RunDir.create(tmp_path, run_id="r1")
    run.write_meta({"model": "tiny", "seed": 0})
    run.write_metrics({"eval": {"base": {"accuracy": 0.25}}})
    assert run.append_episodes([_episode(0), _episode(1, "sft")]) == 2
    assert run.read_meta() == {"model": "tiny", "seed": 0}
    assert run.read_metrics()["eval"]["base"]["accuracy"] == 0.25
    assert [e.step for e in run.read_episodes(phase="sft")] == [1]
    assert [r.run_id for r in list_runs(tmp_path)] == ["r1"]
    assert not list(tmp_path.joinpath("r1").glob("*.tmp"))


def test_bad_episode_line_is_named(tmp_path):
    run = RunDir.create(tmp_path, run_id="r1")
    run.append_episodes([_episode(0)])
    with run.episodes_path.open("a") as fh:
        bad = _episode(1)
        del bad["reward"]["total"]
        fh.write(json.dumps(bad) + "\n")
    with pytest.raises(DataFileError) as exc:
        run.read_episodes()
    assert "episodes.jsonl:2" in str(exc.value) and "total" in str(exc.value)


def test_partial_line_from_crash_is_repaired_on_append(tmp_path):
    run = RunDir.create(tmp_path, run_id="r1")
    run.append_episodes([_episode(0)])
    with run.episodes_path.open("a") as fh:
        fh.write('{"phase": "base", "st')  # killed mid-write
    run.append_episodes([_episode(1)])
    assert [e.step for e in run.read_episodes()] == [0, 1]


def test_drop_episodes_of_a_phase(tmp_path):
    run = RunDir.create(tmp_path, run_id="r1")
    run.append_episodes([_episode(0), _episode(1, "sft"), _episode(2)])
    assert run.drop_episodes("base") == 2
    assert [e.phase for e in run.read_episodes()] == ["sft"]


def test_invalid_episode_rejected_before_write(tmp_path):
    run = RunDir.create(tmp_path, run_id="r1")
    bad = _episode(0)
    bad["phase"] = "pretrain"
    with pytest.raises(Exception):
        run.append_episodes([bad])
    assert not run.episodes_path.exists() or run.episodes_path.read_text() == ""
