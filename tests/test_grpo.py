"""GRPO: one reward function per component whose weighted sum is the preset's total, every
rollout logged as an episode with its step and group index, KL against the starting adapter."""

from __future__ import annotations

import pytest

from test_train import write_tiny_data

from library.contracts import Question
from library.train.grpo import COMPONENT_FUNCS, EndOfStep, RolloutScorer, component_weights, curve_from_episodes
from library.jsonl import read_jsonl
from library.graph.kg import load_kg
from library.scoring.reward import PRESET_NAMES, RewardConfig, RewardModel
from library.train.data import LeakageError
from library.runs.folder import RunDir

pytestmark = [pytest.mark.train]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = write_tiny_data(tmp_path_factory.mktemp("grpo") / "data")
    return {"kg": load_kg(out / "kg.json"), "train": read_jsonl(out / "train.jsonl", Question),
            "eval": read_jsonl(out / "eval.jsonl", Question)}


def _completions(q: Question) -> list[str]:
    first = q.path_star.entities[0]
    wrong = next(x for x in "ABCD" if x != q.answer_star)
    return [
        q.ref.completion,                                   # gold
        f"{q.ref.completion.splitlines()[0]}\nANSWER: {wrong}",  # right path, wrong letter
        f"TRACE: {first} {first} {first} {first} {first}.\nANSWER: {q.answer_star}",  # spam
        "no format at all",
    ]


@pytest.mark.parametrize("preset", list(PRESET_NAMES) + ["paper+correctness"])
def test_weighted_components_sum_to_total(data, preset, tmp_path):
    rm = RewardModel.from_preset(data["kg"], preset)
    qs = [q for q in data["train"] if q.hop_len >= 2][:4]
    run = RunDir.create(tmp_path, "r")
    scorer = RolloutScorer(qs, rm)
    funcs, weights = scorer.reward_functions()
    assert [f.__name__ for f in funcs] == [name for name, _ in COMPONENT_FUNCS]
    ex_ids = [q.id for q in qs for _ in range(4)]
    completions = [c for q in qs for c in _completions(q)]
    columns = [f(prompts=[""] * len(ex_ids), completions=completions, ex_id=ex_ids) for f in funcs]
    for i, (ex_id, c) in enumerate(zip(ex_ids, completions)):
        q = next(q for q in qs if q.id == ex_id)
        total = rm.score(q, c).reward.total
        assert sum(w * col[i] for w, col in zip(weights, columns)) == pytest.approx(total, abs=1e-9)
    assert run.read_episodes() == []  # the reward functions write nothing; the step's end does
    EndOfStep(scorer, run).log_rollouts()
    # the batch was scored and logged once, not once per reward function
    assert len(run.read_episodes()) == len(completions)
    if RewardConfig.preset_named(preset).correctness_only:
        assert weights == [1.0, 0.0, 0.0, 0.0]


def test_episodes_carry_step_and_group_index(data, tmp_path):
    from types import SimpleNamespace

    rm = RewardModel.from_preset(data["kg"], "paper+edges")
    qs = data["train"][:2]
    run = RunDir.create(tmp_path, "r")
    scorer = RolloutScorer(qs, rm, forbidden_ids={q.id for q in data["eval"]})
    judged = []
    monitor = SimpleNamespace(observe=lambda step, episodes, kl: judged.append((step, episodes, kl)), stop_report=None)
    end_of_step = EndOfStep(scorer, run, monitor)
    funcs, _ = scorer.reward_functions()
    ex_ids = [qs[0].id] * 2 + [qs[1].id] * 2
    comps = [qs[0].ref.completion, "x", "y", qs[1].ref.completion]
    for f in funcs:
        f(prompts=[""] * 4, completions=comps, ex_id=ex_ids, trainer_state=SimpleNamespace(global_step=6))
    logged = end_of_step.log_rollouts()
    assert end_of_step.log_rollouts() == []  # each batch is logged once
    assert end_of_step.judge(7, 0.01) is False and end_of_step.judge(7, 0.01) is False  # judged once
    assert judged == [(7, logged, 0.01)]  # what the monitor judges is what was logged
    assert end_of_step.logged == logged == run.read_episodes()  # kept in memory as logged
    eps = run.read_episodes()
    assert [(e.step, e.ex_id, e.sample_idx, e.split, e.kind) for e in eps] == [
        (7, qs[0].id, 0, "train", "rollout"), (7, qs[0].id, 1, "train", "rollout"),
        (7, qs[1].id, 0, "train", "rollout"), (7, qs[1].id, 1, "train", "rollout")]
    curve = curve_from_episodes(eps)
    assert curve == [{"step": 7, "n": 4, "reward_total": pytest.approx(sum(e.reward.total for e in eps) / 4),
                      "path_coverage": pytest.approx(sum(e.reward.path_coverage for e in eps) / 4),
                      "valid_format": 0.5, "accuracy": 0.5}]


def test_scorer_refuses_eval_ids(data):
    rm = RewardModel.from_preset(data["kg"], "toy")
    q_eval = data["eval"][0]
    scorer = RolloutScorer(data["train"][:1] + [q_eval], rm, forbidden_ids={q.id for q in data["eval"]})
    fn = scorer.reward_functions()[0][0]
    with pytest.raises(LeakageError):
        fn(prompts=[""], completions=["x"], ex_id=[q_eval.id])


def test_component_weights_follow_the_preset():
    assert component_weights(RewardConfig.preset_named("toy")) == {"correctness": 1.0, "path": 1.0, "spam": -1.0, "edge": 0.0}
    assert component_weights(RewardConfig.preset_named("toy+edges"))["edge"] == 1.0


@pytest.mark.slow
def test_run_grpo_steps_with_kl_and_logs_rollouts(data, tmp_path, monkeypatch):
    import torch

    import library.model.generate as generate_module

    calls = []  # the groups are sampled by the pipeline's generator (rollout_func), not model.generate
    real = generate_module.generate_completions

    def spy(*args, **kwargs):
        calls.append(kwargs.get("num_return_sequences"))
        return real(*args, **kwargs)

    monkeypatch.setattr(generate_module, "generate_completions", spy)

    from library.config import GRPOSettings, LoraSettings
    from library.train.grpo import run_grpo
    from library.model.load import load_model
    from library.train.finetune import train_lora
    from library.train.sft import question_rows
    from library.train.checkpoints import load_adapter

    model, tok = load_model("tiny")
    qs = [q for q in data["train"] if q.hop_len == 1][:2]
    sft_model, _ = train_lora(model, tok, question_rows(tok, qs), ckpt_dir=tmp_path / "ck_sft",
                              adapter_dir=tmp_path / "ad_sft", learning_rate=1e-2, max_steps=1, batch_size=2,
                              max_length=512, seed=0, lora=LoraSettings())
    sft_state = {n: p.detach().clone() for n, p in sft_model.named_parameters() if "lora_" in n}
    base = sft_model.unload()
    start = load_adapter(base, tmp_path / "ad_sft", trainable=True)
    run = RunDir.create(tmp_path, "run")
    rm = RewardModel.from_preset(data["kg"], "paper+edges")
    settings = GRPOSettings(max_steps=1, prompts_per_step=2, num_generations=2, max_completion_length=8,
                            save_steps=1, learning_rate=1e-2)
    trained, result = run_grpo(start, tok, qs, settings, rm, run, ckpt_dir=tmp_path / "ck", adapter_dir=tmp_path / "ad",
                               seed=0, forbidden_ids={q.id for q in data["eval"]})
    # beta > 0 with a PEFT model: TRL keeps a frozen copy of the starting adapter as the reference
    assert "ref" in trained.peft_config
    for name, p in trained.named_parameters():
        if ".ref." in name:
            assert not p.requires_grad
            assert torch.equal(p.detach(), sft_state[name.replace(".ref.", ".default.")])
        elif "lora_" not in name:
            assert not p.requires_grad
    eps = run.read_episodes(phase="grpo")
    assert len(eps) == 4 and {e.step for e in eps} == {1} and {e.split for e in eps} == {"train"}
    assert sorted((e.ex_id, e.sample_idx) for e in eps) == sorted((q.id, i) for q in qs for i in range(2))
    assert result.steps == 1 and result.curve[0]["step"] == 1 and "kl" in result.curve[0]
    assert calls == [2]  # one call per step: 2 prompts, a group of 2 samples each
    assert (tmp_path / "ad" / "adapter_config.json").exists()
    assert not (tmp_path / "ad" / "ref").exists()  # only the trained adapter is saved

    with pytest.raises(LeakageError):
        run_grpo(trained, tok, qs + data["eval"][:1], settings, rm, run, ckpt_dir=tmp_path / "ck2",
                 adapter_dir=tmp_path / "ad2", seed=0, forbidden_ids={q.id for q in data["eval"]})



@pytest.mark.slow
def test_run_grpo_with_trls_own_generate_logs_each_step_once(data, tmp_path, monkeypatch):
    """``pipeline_generator: false``: TRL samples the groups itself, and the rollouts are still
    logged once per step, numbered within their groups, by the end-of-step callback."""
    import library.model.generate as generate_module

    from library.config import GRPOSettings, LoraSettings
    from library.train.grpo import run_grpo
    from library.model.load import load_model
    from library.train.checkpoints import add_lora

    def must_not_run(*args, **kwargs):
        raise AssertionError("pipeline_generator is off: TRL's own generate samples the groups")

    monkeypatch.setattr(generate_module, "generate_completions", must_not_run)
    model, tok = load_model("tiny")
    qs = [q for q in data["train"] if q.hop_len == 1][:2]
    rm = RewardModel.from_preset(data["kg"], "toy")
    settings = GRPOSettings(max_steps=2, prompts_per_step=1, num_generations=2, max_completion_length=8,
                            save_steps=10, learning_rate=1e-3, pipeline_generator=False)
    run = RunDir.create(tmp_path, "run")
    _, result = run_grpo(add_lora(model, LoraSettings()), tok, qs, settings, rm, run, ckpt_dir=tmp_path / "ck",
                         adapter_dir=tmp_path / "ad", seed=0)
    eps = run.read_episodes(phase="grpo")
    assert [(e.step, e.sample_idx, e.kind) for e in eps] == [(1, 0, "rollout"), (1, 1, "rollout"),
                                                              (2, 0, "rollout"), (2, 1, "rollout")]
    assert result.steps == 2 and result.n_episodes == 4 and [p["step"] for p in result.curve] == [1, 2]

@pytest.mark.slow
def test_grpo_resumes_mid_phase_without_duplicate_rollouts(data, tmp_path):
    """Kill after step 1 (checkpoint-1 exists, a step-2 rollout was already logged) -> rerun:
    the stale step-2 rollout is cut, step 1 is kept, step 2 is regenerated once."""
    from library.config import GRPOSettings, LoraSettings
    from library.train.grpo import run_grpo
    from library.model.load import load_model
    from library.train.finetune import train_lora
    from library.train.sft import question_rows
    from library.train.checkpoints import load_adapter

    model, tok = load_model("tiny")
    qs = [q for q in data["train"] if q.hop_len == 1][:2]
    sft_model, _ = train_lora(model, tok, question_rows(tok, qs), ckpt_dir=tmp_path / "ck_sft",
                              adapter_dir=tmp_path / "ad_sft", learning_rate=1e-3, max_steps=1, batch_size=2,
                              max_length=512, seed=0, lora=LoraSettings())
    base = sft_model.unload()
    run = RunDir.create(tmp_path, "run")
    rm = RewardModel.from_preset(data["kg"], "toy")
    common = dict(prompts_per_step=1, num_generations=2, max_completion_length=8, save_steps=1)
    kwargs = dict(ckpt_dir=tmp_path / "ck", adapter_dir=tmp_path / "ad", seed=0)

    first, _ = run_grpo(load_adapter(base, tmp_path / "ad_sft", trainable=True), tok, qs,
                        GRPOSettings(max_steps=1, **common), rm, run, **kwargs)
    step1 = [e.model_dump(mode="json") for e in run.read_episodes(phase="grpo")]
    assert {e["step"] for e in step1} == {1}
    stale = dict(step1[0], step=2, completion="stale rollout from a killed process")
    run.append_episodes([stale])

    base = first.unload()
    _, result = run_grpo(load_adapter(base, tmp_path / "ad_sft", trainable=True), tok, qs,
                         GRPOSettings(max_steps=2, **common), rm, run, **kwargs)
    assert result.resumed_from is not None and result.resumed_from.endswith("checkpoint-1")
    eps = [e.model_dump(mode="json") for e in run.read_episodes(phase="grpo")]
    assert eps[: len(step1)] == step1
    assert [e["step"] for e in eps] == [1, 1, 2, 2]
    assert not [e for e in eps if e["completion"].startswith("stale")]
    assert [p["step"] for p in result.curve] == [1, 2]
    # the resumed phase read the log once (step 1, covered by its checkpoint) and kept step 2 in
    # memory: its result holds exactly what the log holds, and the curve is the log's
    assert [e.model_dump(mode="json") for e in result.episodes] == eps and result.n_episodes == 4
    assert result.curve == curve_from_episodes(run.read_episodes(phase="grpo"), result.curve)
