"""No evaluation question reaches training: checked on what each phase actually trained on
(the SFT set, the RSFT winners, the GRPO rollouts) in a real pipeline run, not on intentions.

The public attempt's headline came from rejection sampling on its eval questions; this file
fails if any training phase sees an eval or eval_shuffled id.
"""

from __future__ import annotations

import json

import pytest

from test_train import get_trained_run, tiny_config, write_tiny_data

from library.contracts import Question
from library.jsonl import read_jsonl

pytestmark = [pytest.mark.train, pytest.mark.slow]


def _base(ex_id: str) -> str:
    return ex_id.removesuffix("-shuf")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return get_trained_run(tmp_path_factory)


@pytest.fixture(scope="module")
def eval_ids(trained):
    _, config, _ = trained
    ids = {q.id for q in read_jsonl(config.data_dir / "eval.jsonl", Question)}
    ids |= {_base(q.id) for q in read_jsonl(config.data_dir / "eval_shuffled.jsonl", Question)}
    assert ids
    return ids


def test_training_rollouts_never_use_eval_questions(trained, eval_ids):
    run, _, _ = trained
    rollouts = [e for e in run.read_episodes() if getattr(e, "kind", None) == "rollout"]
    assert {e.phase for e in rollouts} == {"rsft", "grpo"}
    assert {e.split for e in rollouts} <= {"train", "train_hard"}
    assert not {_base(e.ex_id) for e in rollouts} & eval_ids


def test_sft_and_rsft_training_sets_exclude_eval(trained, eval_ids):
    run, _, _ = trained
    sft_info = json.loads((run.path / "checkpoints" / "sft" / "trained.json").read_text())
    assert sft_info["ex_ids"] and not set(map(_base, sft_info["ex_ids"])) & eval_ids
    rsft_info = json.loads((run.path / "checkpoints" / "rsft" / "trained.json").read_text())
    assert not set(map(_base, rsft_info["winner_ids"])) & eval_ids
    winners = {e.ex_id for e in run.read_episodes(phase="rsft") if getattr(e, "selected", False)}
    assert winners == set(rsft_info["winner_ids"])


def test_grpo_pool_is_held_out_of_sft_and_eval(trained, eval_ids):
    run, _, _ = trained
    meta = run.read_meta()
    pool = set(meta["selection"]["grpo_pool"]["ids"])
    sft_ids = set(json.loads((run.path / "checkpoints" / "sft" / "trained.json").read_text())["ex_ids"])
    assert pool and not pool & eval_ids and not pool & sft_ids
    grpo_ids = {e.ex_id for e in run.read_episodes(phase="grpo") if getattr(e, "kind", None) == "rollout"}
    assert grpo_ids and grpo_ids <= pool


def test_eval_episodes_cover_exactly_the_selected_eval_questions(trained):
    run, _, _ = trained
    meta = run.read_meta()
    chosen = set(meta["selection"]["eval"]["ids"])
    for phase in ("base", "sft", "rsft", "grpo"):
        got = {e.ex_id for e in run.read_episodes(phase=phase, split="eval")}
        assert got == chosen
        shuf = {e.ex_id for e in run.read_episodes(phase=phase, split="eval_shuffled")}
        assert {_base(i) for i in shuf} == chosen


def test_a_poisoned_training_split_stops_the_run(tmp_path):
    """An eval question copied into train.jsonl (same id) is refused before any training."""
    from library.jsonl import write_jsonl_atomic
    from library.train.data import LeakageError
    from library.train.data import load_data, make_selection

    data_dir = write_tiny_data(tmp_path / "data")
    train = read_jsonl(data_dir / "train.jsonl", Question)
    leaked = read_jsonl(data_dir / "eval.jsonl", Question)[0].model_copy(update={"split": "train"})
    write_jsonl_atomic(data_dir / "train.jsonl", train + [leaked])
    config = tiny_config(data_dir)
    with pytest.raises(LeakageError):
        make_selection(config, load_data(config))
