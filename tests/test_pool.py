"""GRPO's prompts by pass rate (library/train/pool.py): the candidates are training questions SFT did
not show, the kept ones are those the starting policy gets right sometimes, the estimates are
cached for a resumed phase and the ablation, and a pool with nothing to learn is a clear error.
The pipeline's GRPO phase and the ablation on such a pool: tests/test_train.py
(test_reward_ablation_reruns_grpo_with_another_reward_and_compares_pairwise)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_train import tiny_config, write_tiny_data

from library.config import ConfigError, load_config
from library.contracts import Question
from library.graph.kg import load_kg
from library.jsonl import read_jsonl
from library.scoring.reward import RewardModel
from library.train import pool as pool_mod
from library.train.data import LeakageError, load_data, make_selection


def _wrong(q: Question) -> str:
    letter = next(x for x in "ABCD" if x != q.answer_star)
    return f"{q.ref.completion.splitlines()[0]}\nANSWER: {letter}"


def _fixed_sampler(right_of: dict[str, int], calls: list):
    """A sampler that answers question ``id`` right ``right_of[id]`` times of ``k`` (reference
    completions, then wrong letters): the scoring that counts them is the real one."""
    def sample(model, tokenizer, questions, *, k, **kwargs):
        calls.append((len(questions), k, kwargs["seed"]))
        return [[q.ref.completion] * right_of.get(q.id, 0) + [_wrong(q)] * (k - right_of.get(q.id, 0)) for q in questions]
    return sample


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = write_tiny_data(tmp_path_factory.mktemp("pool") / "data")
    return {"dir": out, "kg": load_kg(out / "kg.json"), "train": read_jsonl(out / "train.jsonl", Question)}


def test_pool_settings_are_validated():
    cfg = load_config("quick", overrides={"grpo": {"pool": {"by_pass_rate": True, "hops": [2, 3]}}})
    assert cfg.grpo.pool.k_samples == 8 and cfg.grpo.pool.splits == ["train"]
    with pytest.raises(ConfigError, match="splits listed twice"):
        load_config("quick", overrides={"grpo": {"pool": {"splits": ["train", "train"]}}})
    with pytest.raises(ConfigError, match="k_samples"):
        load_config("quick", overrides={"grpo": {"pool": {"k_samples": 1}}})
    with pytest.raises(ConfigError, match="splits"):
        load_config("quick", overrides={"grpo": {"pool": {"splits": ["eval"]}}})


@pytest.mark.parametrize("graph", ["tiny", "committed"])
def test_candidates_are_training_questions_sft_did_not_show_and_leave_sft_as_it_was(tiny, graph):
    """Turning the filter on draws candidates after SFT's rows: SFT, RSFT and the held-out pool stay
    the same; no candidate is an SFT row or an eval question; hops and splits are honoured."""
    data_dir = tiny["dir"] if graph == "tiny" else Path(__file__).resolve().parents[1] / "data"
    base = tiny_config(data_dir)
    data = load_data(base)
    off = make_selection(base, data)
    on_cfg = tiny_config(data_dir, grpo={"pool": {"by_pass_rate": True, "hops": [2, 3], "candidates": 20,
                                                             "splits": ["train", "train_hard"]}})
    on = make_selection(on_cfg, data)
    assert [q.id for q in on.sft] == [q.id for q in off.sft] and off.grpo_candidates == []
    assert [q.id for q in on.grpo_pool] == [q.id for q in off.grpo_pool]
    assert [q.id for q in on.rsft_prompts] == [q.id for q in off.rsft_prompts]
    sft_ids, eval_ids = {q.id for q in on.sft}, {q.id for q in data.eval}
    assert on.grpo_candidates and len(on.grpo_candidates) <= 20
    assert all(q.id not in sft_ids and q.id not in eval_ids and q.split == "train" for q in on.grpo_candidates)
    assert {q.hop_len for q in on.grpo_candidates} <= {2, 3}
    hard = tiny_config(data_dir, grpo={"pool": {"by_pass_rate": True, "hops": [4], "splits": ["train_hard"]}})
    assert {q.split for q in make_selection(hard, data).grpo_candidates} == {"train_hard"}
    with pytest.raises(ValueError, match="hop lengths \\[9\\]"):
        make_selection(tiny_config(data_dir, grpo={"pool": {"by_pass_rate": True, "hops": [9]}}), data)


def test_the_pool_keeps_mixed_prompts_and_reads_its_cache(tiny, tmp_path, monkeypatch):
    from types import SimpleNamespace

    import library.train.rsft as rsft

    qs = [q for q in tiny["train"] if q.hop_len >= 2][:6]
    right_of = {qs[0].id: 8, qs[1].id: 4, qs[2].id: 0, qs[3].id: 1, qs[4].id: 7, qs[5].id: 5}
    calls: list = []
    monkeypatch.setattr(rsft, "sample_completions", _fixed_sampler(right_of, calls))
    settings = load_config("quick", overrides={"grpo": {"pool": {"by_pass_rate": True, "max_prompts": 3}}}).grpo
    reward = RewardModel.from_preset(tiny["kg"], "paper+edges")
    model = SimpleNamespace(eval=lambda: None)
    cache = tmp_path / "ck" / pool_mod.POOL_FILE
    pool, summary = pool_mod.choose_pool(model, None, qs, settings, reward, seed=3, cache=cache)
    # 4/8 first, then 5/8, then 7/8 and 1/8 tied at 3 from half (input order): at most 3
    assert [q.id for q in pool] == [qs[1].id, qs[5].id, qs[3].id]
    assert calls == [(6, 8, 3)]
    assert summary["before"]["8/8"] == 1 and summary["before"]["0/8"] == 1 and summary["kept"] == 3
    assert summary["kept_before"] == {**{f"{i}/8": 0 for i in range(9)}, "1/8": 1, "4/8": 1, "5/8": 1}
    assert summary["mean_pass_rate_kept_before"] == pytest.approx(10 / 24, abs=1e-4)
    g = settings.num_generations
    assert summary["mixed_groups_expected_before"] == pytest.approx(
        sum(pool_mod.mixed_group_chance(r / 8, g) for r in (4, 5, 1)) / 3, abs=1e-4)
    assert json.loads(cache.read_text())["right"][qs[0].id] == 8

    again, _ = pool_mod.choose_pool(model, None, qs, settings, reward, seed=3, cache=cache)
    assert again == pool and len(calls) == 1  # read back, not sampled again
    other_k = settings.model_copy(update={"pool": settings.pool.model_copy(update={"k_samples": 4})})
    pool_mod.choose_pool(model, None, qs, other_k, reward, seed=3, cache=cache)
    assert calls[-1] == (6, 4, 3)  # other sampling settings: estimated again
    from library.model.precision import using_precision

    with using_precision("float32", sampling="bfloat16"):  # a bf16 draw is another draw
        pool_mod.choose_pool(model, None, qs, other_k, reward, seed=3, cache=cache)
    assert len(calls) == 3

    after = pool_mod.pool_pass_rates(model, None, pool, settings, reward, seed=3)
    assert after["kept_after"]["4/8"] == 1 and after["mean_pass_rate_kept_after"] == pytest.approx(10 / 24, abs=1e-4)

    with pytest.raises(LeakageError):
        pool_mod.choose_pool(model, None, qs + [qs[0].model_copy(update={"split": "eval"})], settings, reward,
                             seed=3, cache=tmp_path / "other.json")


@pytest.mark.slow
def test_a_pool_the_policy_never_or_always_solves_is_a_clear_error(tiny, tmp_path):
    """Real sampling from the untrained tiny model: it answers nothing right, so no prompt is mixed."""
    from library.model.load import load_model

    model, tok = load_model("tiny")
    settings = load_config("quick", overrides={"grpo": {"max_completion_length": 8,
                                                        "pool": {"by_pass_rate": True, "k_samples": 2}}}).grpo
    qs = tiny["train"][:3]
    with pytest.raises(ValueError, match="right in all or none of 2 samples"):
        pool_mod.choose_pool(model, tok, qs, settings, RewardModel.from_preset(tiny["kg"], "paper+edges"), seed=0,
                             cache=tmp_path / "pool.json")
    assert json.loads((tmp_path / "pool.json").read_text())["right"] == {q.id: 0 for q in qs}


def test_other_backends_refuse_a_pass_rate_pool(tiny):
    from types import SimpleNamespace

    from library.train.backends.phases import PhaseBackend

    class Other(PhaseBackend):
        name = "other"

    cfg = tiny_config(tiny["dir"], grpo={"pool": {"by_pass_rate": True}})
    with pytest.raises(ValueError, match="torch backend"):
        Other().start(SimpleNamespace(config=cfg), None)
    Other().start(SimpleNamespace(config=tiny_config(tiny["dir"])), None)  # the default pool: fine


def test_the_start_up_estimate_counts_the_pass_rate_sampling(tiny):
    from library.model.load import load_tokenizer
    from library.train.estimate import plan_work

    tok = load_tokenizer("tiny")
    off = tiny_config(tiny["dir"])
    on = tiny_config(tiny["dir"], grpo={"pool": {"by_pass_rate": True, "k_samples": 4}})
    data = load_data(on)
    assert "grpo_pool" not in plan_work(off, make_selection(off, data), tok, data.kg)
    plan = plan_work(on, make_selection(on, data), tok, data.kg)
    assert list(plan).index("grpo_pool") == list(plan).index("grpo") - 1
    assert plan["grpo_pool"].sample_decode_steps > 0 and plan["grpo_pool"].sample_prefill_tokens > 0
    assert plan["grpo_pool"].decode_steps == 0  # RL's draws are sampled, at the sampling precision


def test_a_sweep_loads_the_runs_profile_at_the_runs_own_seed(tmp_path):
    """``kgr train --seed 2`` writes the seed into meta.json, not into the profile: a sweep on the
    run's adapters (grpo_pool_sweep, selection_dev, ...) must draw that seed's selection."""
    from library.experiments import ExperimentError, run_profile
    from library.runs.folder import RunDir

    run = RunDir.create(tmp_path, "run")
    run.write_meta({"profile": "quick", "seed": 2, "config": {"model": "tiny", "data_dir": "data/food",
                                                              "kg_path": "data/food/kg.json"}})
    config = run_profile(run, overrides={"grpo": {"pool": {"refresh": True}}, "seed": 7})
    assert config.seed == 2 and config.profile == "quick" and config.grpo.pool.refresh
    # `kgr train --model tiny --data-dir data/food`: the run's model and data, not the profile's
    assert config.model == "tiny" and str(config.data_dir) == "data/food" and str(config.kg_path) == "data/food/kg.json"
    assert run_profile(run, overrides={"model": "embedded"}).model == "embedded"  # a caller's override wins
    assert run_profile(run, "full").profile == "full"
    bare = RunDir.create(tmp_path, "bare")
    bare.write_meta({})
    with pytest.raises(ExperimentError, match="names no profile"):
        run_profile(bare)
