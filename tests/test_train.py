"""The whole pipeline on the tiny model and the tiny KG: every phase runs a step or two, writes
valid logs, resumes after a stop without duplicating episodes, and metrics.json agrees with a
recomputation from episodes.jsonl.

The tiny random model answers garbage, so these tests check plumbing and bookkeeping, not
accuracy. The pipeline runs once per session (``trained_run``) and the other test modules
(test_leakage_training.py) reuse it.
"""

from __future__ import annotations

import math

import json
import random
from pathlib import Path

import pytest

from conftest import TINY_KG
from library.config import ConfigError, load_config
from library.contracts import Question
from library.jsonl import write_jsonl_atomic
from library.graph.kg import KnowledgeGraph
from library.scoring.answer_format import render_completion, tag_answer
from library.questions import reference_trace, render_prompt, shuffle_question

pytestmark = [pytest.mark.train, pytest.mark.slow]

# The smallest settings that still exercise every code path (RSFT winners need a correct
# sample, which the random model never gives: the RSFT test module covers that branch).
TINY_OVERRIDES = {
    "model": "tiny",
    # LoRA SFT without the knowledge stage here; full fine-tuning + knowledge stage has its own test
    "sft": {"max_steps": 2, "batch_size": 4, "save_steps": 1, "method": "lora", "knowledge_epochs": 0},
    # every hop length: the tiny graph's few 3-hop questions all go to SFT (quick's prompt_hops is [3])
    "rsft": {"prompt_hops": None, "n_prompts": 2, "k_samples": 2, "max_new_tokens": 8, "max_steps": 1,
             "batch_size": 2, "save_steps": 1},
    "grpo": {"n_prompts": 2, "prompts_per_step": 1, "num_generations": 2, "max_completion_length": 8,
             "max_steps": 2, "save_steps": 1},
    "eval": {"n_eval": 4, "n_train_sample": 2, "batch_size": 8, "max_new_tokens": 8, "shuffled": True,
             "n_trace_recall": 2},
    # 8-token windows on purpose (speed): a tiny random model never writes a whole TRACE anyway
    "generation": {"fit_windows": False},
}


# ----------------------------------------------------------------------------- tiny data
def _all_paths(kg: KnowledgeGraph, hops: int) -> list:
    rng = random.Random(hops)
    seen = {}
    for _ in range(3000):
        path = kg.sample_path(rng, hops)
        if path is not None:
            seen.setdefault(tuple(path.entities), path)
    return [seen[k] for k in sorted(seen)]


def _question(kg: KnowledgeGraph, path, split: str, qid: str, rng: random.Random) -> Question:
    answer = path.entities[-1]
    others = sorted(e for e in kg.entities if e not in path.entities)
    order = rng.sample(others, 3)
    slot = rng.randrange(4)
    order.insert(slot, answer)
    options = {letter: kg.label(e) for letter, e in zip("ABCD", order)}
    letter = "ABCD"[slot]
    trace = reference_trace(kg, path)
    text = f"Start at {kg.label(path.entities[0])}. Follow {len(path.edges)} relations. ({len(path.edges)} steps)"
    return Question(id=qid, split=split, hop_len=len(path.edges), question=text, options=options, answer_star=letter,
                    path_star=path, prompt=render_prompt(text, options),
                    ref={"trace": trace, "completion": render_completion(tag_answer(trace, letter), letter)},
                    meta={"option_ids": dict(zip("ABCD", order)), "start": path.entities[0],
                          "chain": [e.rel for e in path.edges]})


def write_tiny_data(out: Path) -> Path:
    """kg.json + the four split files from tests/conftest.py's 14-entity graph (not uniqueness-checked:
    these questions only feed plumbing tests)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "kg.json").write_text(json.dumps(TINY_KG), encoding="utf-8")
    kg = KnowledgeGraph.from_dict(json.loads(json.dumps(TINY_KG)))
    rng = random.Random(0)
    train = [p for h in (1, 2, 3) for p in _all_paths(kg, h)]
    long = [p for h in (4, 5) for p in _all_paths(kg, h)]
    train_qs = [_question(kg, p, "train", f"train-{i + 1:05d}", rng) for i, p in enumerate(train)]
    hard_paths = [p for p in long if len(p.edges) == 4][:2]
    eval_paths = [p for p in long if p not in hard_paths]
    eval_qs = [_question(kg, p, "eval", f"eval-{i + 1:04d}", rng) for i, p in enumerate(eval_paths)]
    hard_qs = [_question(kg, p, "train_hard", f"hard-{i + 1:04d}", rng) for i, p in enumerate(hard_paths)]
    shuf_rng = random.Random("shuf")
    write_jsonl_atomic(out / "train.jsonl", train_qs)
    write_jsonl_atomic(out / "eval.jsonl", eval_qs)
    write_jsonl_atomic(out / "train_hard.jsonl", hard_qs)
    write_jsonl_atomic(out / "eval_shuffled.jsonl", [shuffle_question(q, shuf_rng) for q in eval_qs])
    write_jsonl_atomic(out / "dev.jsonl", [])  # recipes are chosen on dev; these tests choose none
    return out


def tiny_config(data_dir: Path, **extra):
    overrides = json.loads(json.dumps(TINY_OVERRIDES))
    overrides.update({"data_dir": str(data_dir), "kg_path": str(data_dir / "kg.json"), "threads": None})
    for key, value in extra.items():
        if isinstance(value, dict):
            overrides.setdefault(key, {}).update(value)
        else:
            overrides[key] = value
    return load_config("quick", overrides)


_CACHE: dict[str, object] = {}


def get_trained_run(tmp_path_factory):
    """Run the pipeline once per session: stop after SFT, fake a kill inside RSFT's eval, resume."""
    if "run" in _CACHE:
        return _CACHE["run"]
    from library.runs.folder import RunDir
    from library.train.pipeline import run_training

    root = tmp_path_factory.mktemp("pipeline")
    data_dir = write_tiny_data(root / "data")
    config = tiny_config(data_dir)
    run_dir = root / "runs" / "tiny"
    run = run_training(config, run_dir, stop_after="sft")
    snapshot = {
        "meta": run.read_meta(),
        "episodes": [e.model_dump(mode="json") for e in run.read_episodes()],
    }
    # a kill during the next phase's eval leaves some of its episodes behind: they must go
    ghost = dict(snapshot["episodes"][0], phase="rsft", ex_id="train-00001", split="train", completion="ghost")
    RunDir(run_dir).append_episodes([ghost])
    run = run_training(config, run_dir, resume=True)
    _CACHE["run"] = (run, config, snapshot)
    return _CACHE["run"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return get_trained_run(tmp_path_factory)


# ----------------------------------------------------------------------------- tests
def test_profiles_load_and_reject_typos():
    quick, full = load_config("quick"), load_config("full")
    # the paper's LoRA shape for the RL adapters; SFT settings measured on dev (docs/FINDINGS.md)
    assert quick.sft.lora.r == 16 and quick.sft.lora.alpha == 16 and quick.sft.lora.dropout == 0.05
    assert quick.sft.method == full.sft.method == "full" and quick.sft.learning_rate == full.sft.learning_rate == 2e-4
    # 2 rows an update as one padding-free micro-batch: the same losses as 1 x 2 accumulation, faster
    assert (quick.sft.batch_size, quick.sft.grad_accum) == (full.sft.batch_size, full.sft.grad_accum) == (2, 1)
    assert (quick.grpo.beta, quick.grpo.temperature, quick.grpo.top_p) == (0.05, 0.6, 0.9)
    assert quick.eval.n_eval >= 150 and full.eval.n_eval == 300 and full.eval.shuffled
    assert quick.sft.knowledge_epochs <= full.sft.knowledge_epochs and quick.sft.n_questions <= full.sft.n_questions
    # the full profile trains and evaluates on the keyed step order (docs/FINDINGS.md finding 41)
    from library.jsonl import read_jsonl
    from library.contracts import Question
    from library.questions.wording import step_order_of

    repo = Path(__file__).resolve().parents[1]
    assert step_order_of(read_jsonl(repo / full.data_dir / "eval.jsonl", Question)[0].question) == "keyed"
    assert full.distribution.enabled and not quick.distribution.enabled
    with pytest.raises(ConfigError):
        load_config("quick", {"grpo": {"betta": 0.1}})
    with pytest.raises(ConfigError):
        load_config("quick", {"grpo": {"reward_preset": "vibes"}})
    with pytest.raises(ConfigError):
        load_config("nonexistent-profile")


def test_selection_is_balanced_and_disjoint(tmp_path):
    from library.train.data import load_data, make_selection

    data_dir = write_tiny_data(tmp_path / "data")
    config = tiny_config(data_dir)
    data = load_data(config)
    sel = make_selection(config, data)
    assert sorted(q.hop_len for q in sel.eval) == [4, 4, 5, 5]
    assert [q.meta["shuffled_from"] for q in sel.eval_shuffled] == [q.id for q in sel.eval]
    pool = {q.id for q in sel.grpo_pool}
    assert len(pool) == 2 and not pool & {q.id for q in sel.sft}
    assert {q.split for q in sel.sft + sel.grpo_pool + sel.rsft_prompts} <= {"train", "train_hard"}
    assert make_selection(config, load_data(config)).summary() == sel.summary()  # deterministic


def test_sft_questions_can_be_drawn_from_chosen_hop_lengths(tmp_path):
    from library.train.data import load_data, make_selection

    data_dir = write_tiny_data(tmp_path / "data")
    config = tiny_config(data_dir)
    data = load_data(config)
    longest = max(q.hop_len for q in data.train)
    only_longest = config.model_copy(update={"sft": config.sft.model_copy(update={"question_hops": [longest]})})
    sel = make_selection(only_longest, data)
    assert sel.sft and {q.hop_len for q in sel.sft} == {longest}
    assert not {q.id for q in sel.sft} & {q.id for q in sel.grpo_pool}
    nowhere = config.model_copy(update={"sft": config.sft.model_copy(update={"question_hops": [9]})})
    with pytest.raises(ValueError, match="question_hops"):
        make_selection(nowhere, data)


def test_rsft_prompts_can_be_drawn_from_chosen_hop_lengths(tmp_path):
    """rsft.prompt_hops: RSFT samples only those lengths, never SFT's questions or the GRPO pool."""
    from library.train.data import load_data, make_selection

    data_dir = write_tiny_data(tmp_path / "data")
    data = load_data(tiny_config(data_dir))
    hop_lens = sorted({q.hop_len for q in data.train})
    shortest, longest = hop_lens[0], hop_lens[-1]
    config = tiny_config(data_dir, sft={"question_hops": [shortest], "n_questions": 2},
                         rsft={"prompt_hops": [longest], "n_prompts": 2})
    sel = make_selection(config, data)
    assert len(sel.rsft_prompts) == 2 and {q.hop_len for q in sel.rsft_prompts} == {longest}
    assert not {q.id for q in sel.rsft_prompts} & ({q.id for q in sel.sft} | {q.id for q in sel.grpo_pool})
    with pytest.raises(ValueError, match="rsft.prompt_hops"):
        make_selection(tiny_config(data_dir, rsft={"prompt_hops": [9]}), data)


def test_rsft_prompts_over_two_lengths_are_split_evenly_in_the_order_named(tmp_path):
    """rsft.prompt_hops [next, longest] (the full profile's): half the prompts from train_hard one
    hop past SFT, half from SFT's longest length, however many more of those there are."""
    from library.train.data import load_data, make_selection

    data_dir = write_tiny_data(tmp_path / "data")
    data = load_data(tiny_config(data_dir))
    config = tiny_config(data_dir, sft={"n_questions": 2}, rsft={"prompt_hops": ["next", "longest"], "n_prompts": 4})
    sel = make_selection(config, data)
    longest = max(config.sft.question_hops)
    assert [q.hop_len for q in sel.rsft_prompts] == [longest + 1] * 2 + [longest] * 2
    assert [q.split for q in sel.rsft_prompts] == ["train_hard"] * 2 + ["train"] * 2
    assert not {q.id for q in sel.rsft_prompts} & {q.id for q in sel.sft}


def test_rl_prompts_may_reach_one_hop_past_sft_never_eval_or_dev(tmp_path):
    """prompt_hops ["next"]: RSFT and GRPO draw train_hard's questions one hop past the longest
    training chain (4 on these 1-3 hops), disjoint from each other; further is refused, SFT may not."""
    from library.config import ConfigError
    from library.train.data import LeakageError, assert_training_only, load_data, make_selection

    data_dir = write_tiny_data(tmp_path / "data")
    data = load_data(tiny_config(data_dir))
    config = tiny_config(data_dir, rsft={"prompt_hops": ["next"], "n_prompts": 1},
                         grpo={"prompt_hops": ["next"], "n_prompts": 1})
    assert config.rsft.prompt_hops == [4] and config.grpo.prompt_hops == [4]
    sel = make_selection(config, data)
    assert [q.split for q in sel.rsft_prompts + sel.grpo_pool] == ["train_hard", "train_hard"]
    assert {q.hop_len for q in sel.rsft_prompts + sel.grpo_pool} == {4}
    assert sel.rsft_prompts[0].id != sel.grpo_pool[0].id
    with pytest.raises(ValueError, match=r"at most one hop longer .* at most 4"):
        make_selection(tiny_config(data_dir, rsft={"prompt_hops": [5]}), data)
    with pytest.raises((ValueError, ConfigError), match="SFT trains on train.jsonl's lengths only"):
        tiny_config(data_dir, sft={"question_hops": ["next"]})
    dev_question = data.train_hard[0].model_copy(update={"split": "dev"})
    with pytest.raises(LeakageError):
        assert_training_only([dev_question])


def test_pipeline_completes_with_valid_logs(trained):
    from library.contracts import Episode

    run, config, _ = trained
    meta = run.read_meta()
    assert meta["phases_completed"] == ["base", "sft", "rsft", "grpo"]
    assert meta["status"] == "complete"
    for key in ("run_id", "created", "profile", "model", "seed", "hyperparameters", "reward", "library_version",
                "data", "platform", "config"):
        assert key in meta, key
    assert set(meta["data"]) == {"train.jsonl", "eval.jsonl", "train_hard.jsonl", "eval_shuffled.jsonl", "dev.jsonl", "kg.json"}
    assert all(len(h) == 64 for h in meta["data"].values())
    assert meta["hyperparameters"]["grpo"]["beta"] == 0.05
    assert meta["model"]["spec"]["spec"] == "tiny"
    metrics = run.read_metrics()
    for phase in ("base", "sft", "rsft", "grpo"):
        for split in ("eval", "eval_shuffled", "train_sample"):
            block = metrics[split][phase]
            assert block["n"] == (4 if split != "train_sample" else 2)
            assert 0.0 <= block["accuracy"] <= 1.0
        assert phase == "base" or metrics["timings"][phase] > 0
        assert metrics["timings"][f"{phase}_eval"] > 0
    assert [p["step"] for p in metrics["curves"]["sft"]] == [1, 2]
    assert [p["step"] for p in metrics["curves"]["grpo"]] == [1, 2]
    assert all("reward_total" in p for p in metrics["curves"]["grpo"])
    assert metrics["resources"]["peak_rss_mb"] > 0
    episodes = run.read_episodes()
    assert all(isinstance(e, Episode) for e in episodes)
    grpo_rollouts = [e for e in episodes if e.phase == "grpo" and getattr(e, "kind", None) == "rollout"]
    assert len(grpo_rollouts) == 2 * 1 * 2  # steps x prompts x group
    assert sorted({e.step for e in grpo_rollouts}) == [1, 2]
    assert sorted(e.sample_idx for e in grpo_rollouts if e.step == 1) == [0, 1]
    rsft_rollouts = [e for e in episodes if e.phase == "rsft" and getattr(e, "kind", None) == "rollout"]
    assert len(rsft_rollouts) == 2 * 2
    # the reward-hacking monitor judged RSFT's round and every GRPO step (with its KL), and
    # recomputing it from the finished run's log gives the same blocks
    from library.evaluation.monitor import monitor_run

    assert [p["step"] for p in metrics["monitor"]["rsft"]["steps"]] == [0]
    assert [p["step"] for p in metrics["monitor"]["grpo"]["steps"]] == [1, 2]
    assert all(p["kl"] is not None for p in metrics["monitor"]["grpo"]["steps"])
    assert monitor_run(run.path)["phases"] == metrics["monitor"]


def test_resume_drops_partial_episodes_and_never_duplicates(trained):
    run, _, snapshot = trained
    episodes = [e.model_dump(mode="json") for e in run.read_episodes()]
    assert not [e for e in episodes if e["completion"] == "ghost"]
    # what existed before the stop is still there, unchanged and once
    before = [json.dumps(e, sort_keys=True) for e in snapshot["episodes"]]
    after = [json.dumps(e, sort_keys=True) for e in episodes]
    assert after[: len(before)] == before
    keys = [(e["phase"], e["split"], e["ex_id"], e["step"], e.get("sample_idx"), e.get("kind")) for e in episodes]
    assert len(keys) == len(set(keys)), "duplicate episodes after resume"
    assert snapshot["meta"]["phases_completed"] == ["base", "sft"]
    assert run.read_meta().get("resumed")


def test_metrics_equal_recomputation_from_episodes(trained):
    from library.evaluation.evaluate import metrics_from_run
    from library.stats import wilson_interval

    run, _, _ = trained
    metrics = run.read_metrics()
    selection = run.read_meta()["selection"]
    raw = [json.loads(line) for line in run.episodes_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for split_key in ("eval", "eval_shuffled", "train_sample"):
        ids = selection[split_key]["ids"]
        for phase in ("base", "sft", "rsft", "grpo"):
            stored = metrics[split_key][phase]
            # 1. the library's own recomputation, in the stored order: exactly equal
            recomputed = metrics_from_run(run, phase=phase, split=split_key, ex_ids=ids)
            assert json.loads(json.dumps(recomputed)) == stored, (split_key, phase)
            # 2. an independent count straight from the JSON lines
            eps = [e for e in raw if e["phase"] == phase and e.get("kind") == "eval" and e.get("eval_split") == split_key]
            assert sorted(e["ex_id"] for e in eps) == sorted(ids)
            # library.evaluation.evaluate counts a right letter as correct even when the format is invalid
            correct = [e for e in eps if e["parsed"]["answer"] is not None and e["parsed"]["answer"] == e["answer_star"]]
            assert stored["n"] == len(eps) and stored["correct"] == len(correct)
            assert stored["accuracy_ci"] == pytest.approx(list(wilson_interval(len(correct), len(eps))))
            for hop, block in stored["by_hop"].items():
                assert block["n"] == sum(1 for e in eps if str(e["hop_len"]) == hop)
            assert stored["reward"]["total"] == pytest.approx(sum(e["reward"]["total"] for e in eps) / len(eps))


def test_existing_run_needs_resume_flag_and_same_settings(trained):
    from library.train.pipeline import ResumeError, run_training

    run, config, _ = trained
    with pytest.raises(ResumeError):
        run_training(config, run.path)
    changed = config.model_copy(update={"seed": config.seed + 1})
    with pytest.raises(ResumeError):
        run_training(changed, run.path, resume=True)


def test_resume_of_a_complete_run_is_a_no_op(trained):
    from library.train.pipeline import run_training

    run, config, _ = trained
    files = {name: (run.path / name).read_bytes() for name in ("meta.json", "metrics.json", "episodes.jsonl")}
    run_training(config, run.path, resume=True)
    for name, content in files.items():
        assert (run.path / name).read_bytes() == content, name


def test_distribution_experiment_trains_on_each_split(tmp_path):
    """RSFT from the SFT adapter on easy (train) and hard (train_hard) prompts, both evaluated on
    the same eval questions; each condition logs into its own sub-run, never into the main log."""
    from library.experiments import run_experiments
    from library.runs.folder import RunDir
    from library.train.pipeline import run_training

    data_dir = write_tiny_data(tmp_path / "data")
    config = tiny_config(data_dir, grpo={"enabled": False, "init_from": "sft"}, rsft={"enabled": False},
                         distribution={"enabled": True, "conditions": ["easy", "hard"], "n_eval": 4})
    run = run_experiments(config, run_training(config, tmp_path / "run").path)
    dist = run.read_metrics()["distribution"]
    assert set(dist) == {"easy", "hard"}
    assert dist["easy"]["train_split"] == "train" and dist["hard"]["train_split"] == "train_hard"
    eval_ids = {q["id"] for q in map(json.loads, (data_dir / "eval.jsonl").read_text().splitlines())}
    for cond, split in (("easy", "train"), ("hard", "train_hard")):
        assert dist[cond]["n"] == 4 and 0 <= dist[cond]["accuracy"] <= 1
        sub = RunDir(run.path / "distribution" / cond)
        rollouts = [e for e in sub.read_episodes() if getattr(e, "kind", None) == "rollout"]
        assert rollouts and {e.split for e in rollouts} == {split}
        assert not {e.ex_id for e in rollouts} & eval_ids
        assert {e.ex_id for e in sub.read_episodes(split="eval")} <= eval_ids
    assert not [e for e in run.read_episodes() if e.phase == "rsft"]  # main log untouched
    assert run.read_meta()["phases_completed"] == ["base", "sft", "distribution"]


def test_shuffled_copy_is_measured_only_for_the_chosen_phases(tmp_path):
    from library.train.pipeline import run_training

    data_dir = write_tiny_data(tmp_path / "data")
    config = tiny_config(data_dir, grpo={"enabled": False},
                         eval={"shuffled_phases": ["sft"], "n_eval_base": 2, "n_eval_between": 3,
                               "recall_phases": ["rsft"]})
    run = run_training(config, tmp_path / "run")
    metrics = run.read_metrics()
    assert set(metrics["eval"]) == {"base", "sft", "rsft"} and set(metrics["eval_shuffled"]) == {"sft"}
    assert {e.phase for e in run.read_episodes(split="eval_shuffled")} == {"sft"}
    assert not [k for k in metrics["comparisons"] if k.endswith("@eval_shuffled")]  # no pair to compare
    # SFT, before the last phase, answers 3 of the 4 eval questions and the base model 2 of those
    # (each a subset of the next's), every pair compared on the questions both answered; the last
    # phase answers all 4; fact recall is measured after the chosen phase only
    ids = {p: {e.ex_id for e in run.read_episodes(phase=p, split="eval")} for p in ("base", "sft", "rsft")}
    assert [metrics["eval"][p]["n"] for p in ("base", "sft", "rsft")] == [len(ids[p]) for p in ids] == [2, 3, 4]
    assert ids["base"] < ids["sft"] < ids["rsft"]
    assert metrics["comparisons"]["sft-base"]["n"] == 2 and metrics["comparisons"]["rsft-sft"]["n"] == 3
    assert set(metrics["facts"]) == {"rsft"}


def test_distribution_reuses_the_main_rsft_for_its_condition(tmp_path):
    """With the main RSFT phase on the paper's prompts (SFT's longest length, from SFT), the easy
    condition is that phase's adapter, evaluated on the distribution subset, not a second
    identical RSFT; hard still trains."""
    from library.experiments import run_experiments
    from library.runs.folder import RunDir
    from library.train.pipeline import run_training

    data_dir = write_tiny_data(tmp_path / "data")
    config = tiny_config(data_dir, grpo={"enabled": False}, rsft={"prompt_hops": ["longest"]},
                         distribution={"enabled": True, "conditions": ["easy", "hard"], "n_eval": 4})
    run = run_training(config, tmp_path / "run")
    assert "distribution" not in run.read_metrics()  # the pipeline trains the phases, nothing else
    run = run_experiments(config, run.path)
    metrics = run.read_metrics()
    dist = metrics["distribution"]
    assert dist["easy"]["from_phase"] == "rsft" and "from_phase" not in dist["hard"]
    assert dist["easy"]["n_prompts"] == metrics["training"]["rsft"]["n_prompts"]
    easy, hard = (RunDir(run.path / "distribution" / c) for c in ("easy", "hard"))
    assert not [e for e in easy.read_episodes() if getattr(e, "kind", None) == "rollout"]
    assert len(easy.read_episodes(split="eval")) == 4
    assert [e for e in hard.read_episodes() if getattr(e, "kind", None) == "rollout"]
    assert not (run.path / "checkpoints" / "distribution" / "easy").exists()


def test_distribution_trains_both_conditions_when_the_main_rsft_drew_neither(tmp_path):
    """The main RSFT one hop past SFT (the recipe) is neither condition: easy samples SFT's
    longest training length, hard train_hard's lengths, each trained from SFT."""
    from library.experiments import run_experiments
    from library.runs.folder import RunDir
    from library.train.pipeline import run_training

    data_dir = write_tiny_data(tmp_path / "data")
    config = tiny_config(data_dir, grpo={"enabled": False}, rsft={"prompt_hops": ["next"]},
                         distribution={"enabled": True, "conditions": ["easy", "hard"], "n_eval": 4})
    assert config.rsft.prompt_hops == [max(config.sft.question_hops) + 1]
    run = run_experiments(config, run_training(config, tmp_path / "run").path)
    dist = run.read_metrics()["distribution"]
    assert "from_phase" not in dist["easy"] and "from_phase" not in dist["hard"]
    assert dist["easy"]["prompt_hops"] == config.sft.question_hops
    assert min(dist["hard"]["prompt_hops"]) > max(config.sft.question_hops)
    for cond in ("easy", "hard"):
        rollouts = [e for e in RunDir(run.path / "distribution" / cond).read_episodes()
                    if getattr(e, "kind", None) == "rollout"]
        assert rollouts and (run.path / "checkpoints" / "distribution" / cond).exists()


def test_run_precision_is_recorded_and_restored_afterwards(tmp_path, monkeypatch):
    """precision "fast" on a machine with bf16 matrix units runs in bf16 and says so in meta.json
    ("auto" trains in fp32 there and generates in bf16); the process-wide setting is back to fp32
    when the run returns (a leak once made later tests in the same process generate in bf16 on CI
    machines with AMX)."""
    import library.model.precision as m
    from library.train.pipeline import run_training

    monkeypatch.setattr(m, "bf16_matrix_units", lambda device="cpu": True)
    data_dir = write_tiny_data(tmp_path / "data")
    assert tiny_config(data_dir).precision == "auto"
    run = run_training(tiny_config(data_dir, precision="fast"), tmp_path / "run", stop_after="base")
    assert run.read_meta()["platform"]["precision"] == "bfloat16"
    assert m.compute_precision() == "float32"
    run = run_training(tiny_config(data_dir), tmp_path / "run32", stop_after="base")
    assert run.read_meta()["platform"]["precision"] == "float32"
    assert run.read_meta()["platform"]["generation_precision"] == "bfloat16"  # auto: bf16 matrix units


def test_run_generates_in_bf16_where_bf16_matmuls_are_fast_and_trains_in_fp32(tmp_path, monkeypatch):
    """On a CPU without AMX whose bf16 matmuls measure >= 1.5x fp32 (the AVX512-BF16 EPYC), a
    run trains in fp32 and evaluates in bf16; meta.json says both and the measured speedup;
    ``generation.precision: float32`` keeps generation exact."""
    import library.model.precision as m
    from library.train.pipeline import run_training

    monkeypatch.setattr(m, "bf16_matrix_units", lambda device="cpu": False)
    monkeypatch.setattr(m, "bf16_matmul_speedup", lambda rows=64: 3.8)
    data_dir = write_tiny_data(tmp_path / "data")
    platform = run_training(tiny_config(data_dir), tmp_path / "run", stop_after="base").read_meta()["platform"]
    assert (platform["precision"], platform["generation_precision"]) == ("float32", "bfloat16")
    assert platform["sampling_precision"] == "float32"  # RL's draws: the same on any CPU (finding 54)
    assert platform["bf16_matmul_speedup"] == 3.8
    assert m.generation_precision() == "float32"  # restored after the run
    with m.using_precision("float32", sampling="bfloat16"):
        run_training(tiny_config(data_dir), tmp_path / "run2", stop_after="base")
        assert m.sampling_precision() == "bfloat16"  # the caller's, restored after the run
    exact = tiny_config(data_dir, generation={"precision": "float32"})
    platform = run_training(exact, tmp_path / "exact", stop_after="base").read_meta()["platform"]
    assert platform["generation_precision"] == "float32"


def test_full_fine_tuning_sft_then_lora_rl_resumes(tmp_path):
    """sft.method=full: SFT (with the knowledge stage) trains every weight and saves a whole model;
    RSFT and GRPO put LoRA adapters on that model; a run killed after SFT resumes from the saved
    model, and the RL phases' adapters never change the SFT weights."""
    import torch

    from library.train.checkpoints import is_full_model_dir, load_full_model
    from library.train.pipeline import run_training

    data_dir = write_tiny_data(tmp_path / "data")
    config = tiny_config(data_dir, sft={"method": "full", "knowledge_epochs": 1, "facts_per_row": 8,
                                        "max_steps": None, "learning_rate": 1e-3},
                         generation={"precision": "float32"})  # exact answers for the try-it check below
    run_dir = tmp_path / "run"
    run = run_training(config, run_dir, stop_after="sft")
    assert is_full_model_dir(run_dir / "adapters" / "sft")
    sft_weights = {k: v.clone() for k, v in load_full_model(run_dir / "adapters" / "sft").state_dict().items()}
    run = run_training(config, run_dir, resume=True)
    meta, metrics = run.read_meta(), run.read_metrics()
    assert meta["phases_completed"] == ["base", "sft", "rsft", "grpo"]
    for phase in ("rsft", "grpo"):
        assert (run_dir / "adapters" / phase / "adapter_config.json").exists()
    assert metrics["training"]["sft"]["trainable_params"] == metrics["training"]["sft"]["total_params"]
    assert set(metrics["facts"]) == set(config.eval.recall_phases) == {"sft", "grpo"}  # quick's choice
    assert 0 <= metrics["facts"]["sft"]["recall"] <= 1 and metrics["facts"]["sft"]["n"] > 0
    in_trace = metrics["facts"]["sft"]["in_trace"]  # recall inside the gold TRACE, per hop
    assert in_trace["n"] > 0 and "hits" not in in_trace
    assert in_trace["n"] <= 2 * 5 * 4  # eval.n_trace_recall=2 questions, <= 5 hops, <= 4 clauses a hop
    assert 0 <= in_trace["recall"] <= 1 and set(in_trace["by_hop"]) <= {"0", "1", "2", "3", "4"}
    # paired comparisons on the same eval questions, recomputable from episodes.jsonl
    assert {"sft-base", "rsft-sft", "grpo-sft"} <= set(metrics["comparisons"])
    cmp = metrics["comparisons"]["grpo-sft"]
    assert cmp["n"] == metrics["eval"]["grpo"]["n"] and cmp["ci"][0] <= cmp["diff"] <= cmp["ci"][1]
    after = load_full_model(run_dir / "adapters" / "sft").state_dict()
    assert all(torch.equal(after[k], v) for k, v in sft_weights.items())
    assert_try_it_reproduces_the_final_eval(run_dir)


def assert_try_it_reproduces_the_final_eval(run_dir: Path) -> None:
    """"Try it" serves the model the run's final evaluation used: its greedy answers to the eval
    prompts are the logged ones (the base model with only the RL adapter answered otherwise)."""
    from library.demo.tryit import TryIt
    from library.runs.reader import RunView

    run = RunView.open(run_dir)
    final = run.phases[-1]
    logged = run.eval_episodes(final)
    tryit = TryIt(run_dir)
    assert tryit.phase == final and tryit.max_new_tokens == run.config["eval"]["max_new_tokens"]
    answered = {ex_id: tryit.generate(ep.prompt) for ex_id, ep in sorted(logged.items())}
    assert answered == {ex_id: ep.completion for ex_id, ep in sorted(logged.items())}


def test_try_it_serves_the_lora_sft_runs_final_model(tmp_path):
    from library.train.pipeline import run_training

    data_dir = write_tiny_data(tmp_path / "data")
    run = run_training(tiny_config(data_dir, generation={"precision": "float32"}), tmp_path / "run")
    assert run.read_meta()["config"]["sft"]["method"] == "lora"
    assert_try_it_reproduces_the_final_eval(run.path)


def test_reward_ablation_reruns_grpo_with_another_reward_and_compares_pairwise(tmp_path):
    """ablation.enabled: GRPO again from the same start under a correctness-only reward, on the
    main GRPO phase's prompts, logged in its own sub-run, evaluated on the main eval questions and
    compared pairwise with the main GRPO; an experiment runs beside the pipeline, on a finished
    run, and adds its own section."""
    from library.evaluation.monitor import monitor_run
    from library.experiments import ExperimentError, run_experiments
    from library.runs.folder import RunDir
    from library.train.pipeline import run_training

    data_dir = write_tiny_data(tmp_path / "data")
    run_dir = tmp_path / "run"
    run_training(tiny_config(data_dir), run_dir)  # a finished run without the ablation
    pool = set(RunDir(run_dir).read_meta()["selection"]["grpo_pool"]["ids"])
    assert RunDir(run_dir).read_metrics()["monitor"]["grpo"] == monitor_run(run_dir)["phases"]["grpo"]
    main_episodes = (run_dir / "episodes.jsonl").read_text()
    with pytest.raises(ExperimentError, match="other settings"):
        run_experiments(tiny_config(data_dir, seed=1, ablation={"enabled": True}), run_dir)

    run = run_experiments(tiny_config(data_dir, ablation={"enabled": True}), run_dir)
    ablated = {e.ex_id for e in RunDir(run_dir / "ablation" / "paper+edges+correctness").iter_episodes(phase="grpo")
               if e.kind == "rollout"}
    assert ablated and ablated <= pool
    metrics = run.read_metrics()
    ablation = metrics["ablation"]
    assert ablation["reward_preset"] == "paper+edges+correctness" and ablation["main_reward_preset"] == "paper+edges"
    assert ablation["n"] == metrics["eval"]["grpo"]["n"] and ablation["steps"] == 2
    vs = ablation["vs_grpo"]
    assert vs["n"] == ablation["n"] and vs["accuracy_a"] == metrics["eval"]["grpo"]["accuracy"]
    assert vs["accuracy_b"] == ablation["accuracy"] and vs["ci"][0] <= vs["diff"] <= vs["ci"][1]
    sub = RunDir(run_dir / "ablation" / "paper+edges+correctness")
    rollouts = [e for e in sub.read_episodes() if getattr(e, "kind", None) == "rollout"]
    assert rollouts and all(e.reward.total == e.reward.correctness for e in rollouts)
    assert (run_dir / "episodes.jsonl").read_text() == main_episodes  # the main log untouched
    assert run.read_meta()["phases_completed"][-1] == "ablation"


def test_a_run_folder_has_one_writer_and_stop_after_holds_on_resume(tmp_path):
    """A second writer on a run folder stops with the holder's pid (both writers used to finish
    with duplicated episodes); --resume --stop-after a completed phase goes no further."""
    import os

    from library.runs.folder import RunDir, RunLockedError
    from library.train.pipeline import run_training

    data_dir = write_tiny_data(tmp_path / "data")
    config = tiny_config(data_dir)
    run_dir = tmp_path / "run"
    with RunDir(run_dir).lock():  # another process's `kgr train` holding the folder
        with pytest.raises(RunLockedError, match=f"is being written by pid {os.getpid()}"):
            run_training(config, run_dir)
    assert not (run_dir / "meta.json").exists()
    run_training(config, run_dir, stop_after="sft")
    episodes = (run_dir / "episodes.jsonl").read_text()
    run = run_training(config, run_dir, resume=True, stop_after="sft")
    assert run.read_meta()["phases_completed"] == ["base", "sft"]
    assert (run_dir / "episodes.jsonl").read_text() == episodes


def test_a_finished_full_sft_is_not_trained_again_when_its_eval_was_killed(tmp_path):
    """The trained marker counts a whole-model SFT result as saved, as it counts an adapter: a
    run killed during SFT's evaluation re-runs the evaluation only (it re-trained SFT, which
    saves a model folder, not an adapter)."""
    from library.train.bookkeeping import mark_trained, trained_marker

    ckpt, adapters = tmp_path / "checkpoints" / "sft", tmp_path / "adapters" / "sft"
    ckpt.mkdir(parents=True)
    adapters.mkdir(parents=True)
    mark_trained(ckpt, {"steps": 3})
    assert trained_marker(ckpt, adapters) is None  # nothing saved yet
    (adapters / "config.json").write_text("{}")
    assert trained_marker(ckpt, adapters) == {"steps": 3}


def test_generation_windows_fit_the_longest_reference_completion(tmp_path):
    """A window shorter than the reference TRACE cuts right answers off: by default each window
    is raised to the longest reference completion it generates for (+1 for the end token)."""
    from library.model.load import load_tokenizer
    from library.questions.wording import reference_completion
    from library.train.data import fit_generation_lengths, load_data, make_selection

    data_dir = write_tiny_data(tmp_path / "data")
    config = tiny_config(data_dir, generation={"fit_windows": True})
    data = load_data(config)
    selection = make_selection(config, data)
    tok = load_tokenizer("tiny")
    fitted, notes = fit_generation_lengths(config, data.kg, selection, tok)
    longest = max(len(tok(reference_completion(q), add_special_tokens=False).input_ids)
                  for q in selection.eval + selection.train_sample)
    assert fitted.eval.max_new_tokens == longest + 1 > config.eval.max_new_tokens == 8
    assert any(n.startswith("eval.max_new_tokens 8 -> ") for n in notes)
    assert fit_generation_lengths(fitted, data.kg, selection, tok)[1] == []  # nothing left to raise
    off = tiny_config(data_dir)  # the tests' 8-token windows are kept on purpose
    assert fit_generation_lengths(off, data.kg, selection, tok) == (off, [])


def test_the_start_up_estimate_counts_the_runs_own_tokens(trained):
    """meta.json keeps the start-up estimate: this machine's calibrated rates, and seconds for
    every phase and evaluation, from the run's own SFT rows (counted token for token)."""
    from library.graph.kg import KnowledgeGraph
    from library.model.chat import format_example
    from library.model.load import load_tokenizer
    from library.train.data import load_data, make_selection
    from library.train.estimate import plan_work
    from library.train.sft import sft_examples

    run, config, _ = trained
    est = run.read_meta()["estimate"]
    assert list(est["seconds"]) == ["rsft", "rsft_eval", "grpo", "grpo_eval"]  # the resumed start's phases
    assert all(v > 0 for v in est["seconds"].values()) and est["total_s"] > 0
    assert all(v >= 0 for v in est["rates"].values()) and est["rates"]["decode_rows"] > 0
    data = load_data(config)
    selection = make_selection(config, data)
    tok = load_tokenizer("tiny")
    plan = plan_work(config, selection, tok, data.kg)
    assert list(plan) == ["base_eval", "sft", "sft_eval", "rsft", "rsft_eval", "grpo", "grpo_eval"]
    rows = sft_examples(selection.sft, config.sft, kg=data.kg, seed=config.seed)
    assert plan["sft"].train_tokens == sum(len(tok(format_example(tok, u, c).text, add_special_tokens=False)["input_ids"])
                                          for u, c in rows)
    # the base model's batches run at most the window each (one of its answers usually does; the
    # live rows are _base_generation's doctest); trained phases at their reference completions' lengths
    from library.evaluation.phase import phase_questions
    base, ev = plan["base_eval"], config.eval
    splits = [qs for qs in phase_questions(selection, "base", ev, config.seed, False).values() if qs]
    assert 0 < base.decode_steps <= sum(math.ceil(len(qs) / ev.batch_size) for qs in splits) * ev.max_new_tokens
    assert plan["sft_eval"].decode_steps > 0
    assert plan["grpo"].train_tokens > 0 and plan["rsft"].sample_decode_steps > 0 and plan["rsft"].decode_steps == 0
    # RL's phases train adapters on frozen weights, timed by a pass with frozen weights (library/train/estimate.py)
    assert plan["rsft"].adapter and plan["grpo"].adapter and plan["sft"].adapter == (config.sft.method == "lora")
    assert est["rates"]["adapter_s_per_token"] > 0 and est["rates"]["train_s_per_token"] > 0
    # a full SFT's optimizer updates every weight once a step: timed apart, counted per Trainer step
    assert est["rates"]["optimizer_s_per_step"] > 0
    sft = config.sft
    assert plan["sft"].optimizer_steps == (0 if sft.method == "lora" else
                                           sft.max_steps or math.ceil(math.ceil(len(rows) / sft.batch_size) / sft.grad_accum))
    assert plan["rsft"].optimizer_steps == plan["grpo"].optimizer_steps == 0
    assert plan["grpo"].sample_decode_steps > 0 and plan["rsft_eval"].sample_decode_steps == 0
    assert isinstance(data.kg, KnowledgeGraph)
    # the ablation's entry is GRPO's sampled work and its greedy evaluation, each at its own rate
    ablated = config.model_copy(update={"ablation": config.ablation.model_copy(update={"enabled": True})})
    entry = plan_work(ablated, selection, tok, data.kg)["ablation"]
    assert entry.sample_decode_steps == plan["grpo"].sample_decode_steps > 0
    assert entry.decode_steps == plan["grpo_eval"].decode_steps > 0


def test_the_calibration_changes_no_weight_and_no_setting_of_the_model():
    """The start-up calibration trains nothing: its timed passes drop their gradients and its
    timed optimizer steps run at a learning rate of 0, so the model comes back bit for bit, with
    its trainable flags and mode as they were."""
    import torch

    from library.model.load import load_model
    from library.train.estimate import calibrate

    model, tok = load_model("tiny")
    model.eval()
    model.requires_grad_(False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rates = calibrate(model, tok, [("Where is Paris? ", "Paris is in France."), ("Where is Rome? ", "Rome is in Italy.")],
                      ["Where is Rome?", "Where is Paris?"], rows=2,
                      generation_precision="bfloat16", sampling_precision="float32")
    assert rates.optimizer_s_per_step > 0 and rates.train_s_per_token > 0
    assert rates.sample_prefill_s_per_token > 0 and rates.sample_decode_s_per_step > 0  # RL's draws, timed apart
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    assert all(p.grad is None for p in model.parameters())


def test_a_run_recorded_before_the_draws_precision_resumes_at_the_generation_precision():
    """A recorded config without generation.sampling_precision drew its RL samples at the
    generation precision: it compares as "generation", and a mismatch names the setting."""
    from library.config import TrainConfig
    from library.train.bookkeeping import comparable_config, config_differences

    recorded = TrainConfig().to_meta()
    recorded["generation"] = {k: v for k, v in recorded["generation"].items() if k != "sampling_precision"}
    old = TrainConfig(generation={"sampling_precision": "generation"})
    assert comparable_config(recorded) == comparable_config(old) != comparable_config(TrainConfig())
    assert config_differences(recorded, TrainConfig()) == \
        "generation.sampling_precision: 'generation' (recorded) vs 'float32'"


def test_a_recorded_config_without_newer_settings_compares_at_their_defaults():
    """Resuming a run recorded before a setting existed: the setting compares at its default, and
    the start-up estimate never counts as a change of what the phases train."""
    from library.train.bookkeeping import comparable_config

    config = load_config("quick")
    recorded = config.to_meta()
    del recorded["estimate"], recorded["eval"]["recall_phases"]
    assert comparable_config(recorded) == comparable_config(config.model_copy(
        update={"eval": config.eval.model_copy(update={"recall_phases": None})}))
    assert comparable_config(config.model_copy(update={"estimate": False})) == comparable_config(config)
    assert comparable_config({**recorded, "seed": 1}) != comparable_config(config)


#: quick's RSFT before finding 66 (3-hop prompts, a 94-token window) and finding 69 (64 prompts,
#: right letters kept), which the older runs trained with
QUICK_RSFT_3HOP = {"rsft": {"prompt_hops": [3], "max_new_tokens": 94, "n_prompts": 64, "winners": "correct"}}



@pytest.mark.parametrize("name, profile, overrides", [
    ("../experiments/quick-rsft-3hop", None, QUICK_RSFT_3HOP),
    ("../experiments/mammals-rsft-3hop", None, QUICK_RSFT_3HOP),
    # the paper profile (the full profile's recipe until 2026-11-28, recorded under its name) at the
    # batch sizes and draws' precision the run was trained with
    ("../experiments/reference-paper", "library/profiles/paper.yaml", {"profile": "full", "eval": {"batch_size": 64},
                                                   "rsft": {"gen_batch_size": 32},
                                                   "generation": {"sampling_precision": "generation"}}),
    ("food", "data/experiments/food-selection/profile.yaml", {}),  # quick's earlier recipe, as recorded
])
def test_the_committed_runs_compare_as_their_profiles_with_the_retired_settings_dropped(name, profile, overrides):
    """meta.json of the committed runs records settings since removed (sft.trace_style "copy",
    sft.path_fact_passes 0, sft.extra_questions {}, grpo.pool off, selection) at the behaviour
    kept: `kgr train --resume` and the experiments still read them as the same settings; a
    retired setting at another value is another training."""
    from library.config import TrainConfig, drop_retired
    from library.experiments import run_profile
    from library.runs.folder import RunDir
    from library.train.bookkeeping import comparable_config

    repo = Path(__file__).resolve().parents[1]
    run = RunDir.open(repo / "data" / "runs" / name)
    recorded = run.read_meta()["config"]
    assert recorded["sft"]["trace_style"] == "copy" and recorded["sft"]["path_fact_passes"] == 0
    TrainConfig.model_validate(drop_retired(recorded))  # every other recorded setting still exists
    config = run_profile(run, None if profile is None else repo / profile, overrides)
    assert comparable_config(recorded) == comparable_config(config)
    for retired in ({"sft": {**recorded["sft"], "trace_style": "clauses"}},
                    {"sft": {**recorded["sft"], "extra_questions": {"1": 150}}},
                    {"grpo": {**recorded["grpo"], "pool": {"by_pass_rate": True}}}):
        assert comparable_config({**recorded, **retired}) != comparable_config(config)


@pytest.mark.parametrize("name", ["quick", "mammals"])
def test_the_canonical_quick_runs_are_todays_quick_profile(name):
    """data/runs/quick and data/runs/mammals were trained (their RL phases forked from an older
    run's SFT, library/train/fork.py) with today's quick profile: `kgr train --resume` reads them as such."""
    from library.experiments import run_profile
    from library.runs.folder import RunDir
    from library.train.bookkeeping import comparable_config

    run = RunDir.open(Path(__file__).resolve().parents[1] / "data" / "runs" / name)
    meta = run.read_meta()
    assert meta["profile"] == "quick" and meta["forked_from"]["phases"] == ["base", "sft"]
    assert comparable_config(meta["config"]) == comparable_config(run_profile(run))


def test_the_reference_run_is_todays_full_profile():
    """data/runs/reference was trained with today's full profile (the run of its recipe before
    2026-11-28 is data/experiments/reference-paper, the paper profile's). Its RL phases may start
    from a committed whole run's SFT (``kgr train --from``): fp32 SFT is deterministic, and that
    run's settings before RL must be today's full profile's too."""
    from library.config import load_config
    from library.runs.folder import RunDir
    from library.train.bookkeeping import comparable_config
    from library.train.fork import AFTER_SFT

    repo = Path(__file__).resolve().parents[1]
    meta = RunDir.open(repo / "data" / "runs" / "reference").read_meta()
    full = comparable_config(load_config("full"))
    assert meta["profile"] == "full" and meta["status"] == "complete"
    assert comparable_config(meta["config"]) == full
    forked = meta.get("forked_from")
    if forked:
        assert forked["phases"] == ["base", "sft"]
        source = RunDir.open(repo / forked["run"]).read_meta()
        assert source["profile"] == "full" and not source.get("forked_from") and source["run_id"] == forked["run_id"]
        before_rl = {k: v for k, v in comparable_config(source["config"]).items() if k not in AFTER_SFT}
        assert before_rl == {k: v for k, v in full.items() if k not in AFTER_SFT}


def test_a_sweep_loads_the_runs_profile_at_the_runs_own_seed(tmp_path):
    """``kgr train --seed 2`` writes the seed into meta.json, not into the profile: a sweep on the
    run's adapters (research/sweeps, research/selection.py) must draw that seed's selection."""
    from library.experiments import ExperimentError, run_profile
    from library.runs.folder import RunDir

    run = RunDir.create(tmp_path, "run")
    run.write_meta({"profile": "quick", "seed": 2, "config": {"model": "tiny", "data_dir": "data/food",
                                                              "kg_path": "data/food/kg.json"}})
    config = run_profile(run, overrides={"grpo": {"max_steps": 3}, "seed": 7})
    assert config.seed == 2 and config.profile == "quick" and config.grpo.max_steps == 3
    # `kgr train --model tiny --data-dir data/food`: the run's model and data, not the profile's
    assert config.model == "tiny" and str(config.data_dir) == "data/food" and str(config.kg_path) == "data/food/kg.json"
    assert run_profile(run, overrides={"model": "embedded"}).model == "embedded"  # a caller's override wins
    assert run_profile(run, "full").profile == "full"
    bare = RunDir.create(tmp_path, "bare")
    bare.write_meta({})
    with pytest.raises(ExperimentError, match="names no profile"):
        run_profile(bare)


def test_the_library_never_imports_research_code():
    """research/ (sweeps, the selection experiment) imports the library, never the other way."""
    import ast

    repo = Path(__file__).resolve().parents[1]
    found = []
    for path in sorted((repo / "library").rglob("*.py")) + sorted((repo / "scenes").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(repo)}: {n}" for n in names if n == "research" or n.startswith("research.")]
    assert found == []


def test_fork_trains_rl_again_on_the_same_sft(trained, tmp_path):
    """kgr train --from: base and SFT copied (episodes, metrics, model), the RL phases trained
    under the new settings; settings that would have trained another SFT are refused."""
    from library.train.bookkeeping import ResumeError
    from library.train.fork import fork_run, is_fork_of
    from library.train.pipeline import run_training

    run, config, _ = trained
    rl = config.model_copy(update={"rsft": config.rsft.model_copy(update={"prompt_hops": [4], "n_prompts": 1}),
                                   "grpo": config.grpo.model_copy(update={"reward_preset": "correctness"})})
    other_sft = config.model_copy(update={"sft": config.sft.model_copy(update={"learning_rate": 1e-3})})
    with pytest.raises(ResumeError, match="sft.learning_rate"):
        fork_run(run.path, tmp_path / "no", other_sft)
    moved_pool = config.model_copy(update={"grpo": config.grpo.model_copy(update={"prompt_hops": [3]})})
    with pytest.raises(ResumeError, match="other sft questions"):
        fork_run(run.path, tmp_path / "no", moved_pool)
    assert not (tmp_path / "no").exists()

    fork = run_training(rl, fork_run(run.path, tmp_path / "fork", rl).path, resume=True)
    meta = fork.read_meta()
    assert meta["status"] == "complete" and meta["forked_from"]["phases"] == ["base", "sft"]
    assert meta["config"]["rsft"]["prompt_hops"] == [4] and meta["reward"]["preset"] == "correctness"
    assert [q for q in meta["selection"]["rsft_prompts"]["splits"]] == ["train_hard"]
    same = lambda r, p: [e.model_dump(mode="json") for e in r.read_episodes(phase=p)]  # noqa: E731
    assert same(fork, "sft") == same(run, "sft") and same(fork, "base") == same(run, "base")
    assert {e.split for e in fork.read_episodes(phase="rsft") if e.kind == "rollout"} == {"train_hard"}
    assert fork.read_metrics()["eval"]["sft"] == run.read_metrics()["eval"]["sft"]
    assert set(fork.read_metrics()["comparisons"]) >= {"rsft-sft", "grpo-sft"}
    with pytest.raises(ResumeError, match="already holds files"):
        fork_run(run.path, fork.path, rl)
    assert is_fork_of(fork.path, run.path) and not is_fork_of(run.path, fork.path)
    assert not list(tmp_path.glob("*.forking")) and not (fork.path / "adapters" / "rsft").samefile(run.path / "adapters" / "rsft")


def test_a_fork_that_changes_only_grpo_copies_rsft_and_grpo_may_add_its_prompts(trained, tmp_path):
    """A fork whose RSFT settings and prompts are its source's copies RSFT too (model, rollouts,
    metrics, monitor) and trains GRPO alone; ``grpo.rsft_prompts`` adds RSFT's prompts to GRPO's
    held-out pool without moving SFT's rows."""
    from library.train.data import load_data, make_selection
    from library.train.fork import fork_run
    from library.train.pipeline import run_training

    run, config, _ = trained
    grpo_only = config.model_copy(update={"grpo": config.grpo.model_copy(update={"reward_preset": "correctness",
                                                                                 "rsft_prompts": True})})
    was, now = (make_selection(c, load_data(c)) for c in (config, grpo_only))
    assert [q.id for q in now.sft] == [q.id for q in was.sft]
    assert [q.id for q in now.grpo_pool] == [q.id for q in was.grpo_pool] + [
        q.id for q in was.rsft_prompts if q.id not in {p.id for p in was.grpo_pool}]

    fork = run_training(grpo_only, fork_run(run.path, tmp_path / "fork", grpo_only).path, resume=True)
    meta = fork.read_meta()
    assert meta["status"] == "complete" and meta["forked_from"]["phases"] == ["base", "sft", "rsft"]
    dump = lambda r, p: [e.model_dump(mode="json") for e in r.read_episodes(phase=p)]  # noqa: E731
    assert dump(fork, "rsft") == dump(run, "rsft")
    m_fork, m_run = fork.read_metrics(), run.read_metrics()
    assert m_fork["eval"]["rsft"] == m_run["eval"]["rsft"] and m_fork["training"]["rsft"] == m_run["training"]["rsft"]
    assert m_fork["comparisons"]["rsft-sft"] == m_run["comparisons"]["rsft-sft"]
    assert "grpo" in m_fork["eval"] and meta["reward"]["preset"] == "correctness"
    # RSFT's settings changed: only base and SFT are copied, as before
    other_rsft = grpo_only.model_copy(update={"rsft": config.rsft.model_copy(update={"learning_rate": 1e-4})})
    assert fork_run(run.path, tmp_path / "fork2", other_rsft).read_meta()["forked_from"]["phases"] == ["base", "sft"]


def test_eval_far_is_answered_after_its_phases_and_decides_nothing_trained(tmp_path):
    """eval.n_eval_far: eval_far (one hop past eval) answered after each of eval.far_phases, in
    its own window, reported apart (metrics["eval_far"], episodes with eval_split "eval_far");
    a run stopped without it resumes with it (it decides nothing trained), and no far question
    reaches a training phase."""
    from library.train.bookkeeping import comparable_config
    from library.train.data import LeakageError, assert_training_only, load_data, make_selection
    from library.train.pipeline import run_training

    data_dir = write_tiny_data(tmp_path / "data")
    kg = KnowledgeGraph.from_dict(json.loads(json.dumps(TINY_KG)))
    rng = random.Random(1)
    # plumbing only: the tiny graph has no 6-hop chain, so its 5-hop ones stand in
    far = [_question(kg, p, "eval_far", f"far-{i + 1:04d}", rng) for i, p in enumerate(_all_paths(kg, 5))]
    write_jsonl_atomic(data_dir / "eval_far.jsonl", far)
    plain = tiny_config(data_dir, eval={"n_eval_far": 0})
    measured = tiny_config(data_dir, eval={"n_eval_far": None, "far_phases": ["sft"], "far_max_new_tokens": 12})
    assert comparable_config(plain) == comparable_config(measured)
    selection = make_selection(measured, load_data(measured))
    assert {q.id for q in selection.eval_far} == {q.id for q in far}
    assert make_selection(plain, load_data(plain)).eval_far == []
    with pytest.raises(LeakageError):
        assert_training_only(far[:1])

    run = run_training(plain, tmp_path / "run", stop_after="base")
    run = run_training(measured, run.path, resume=True, stop_after="sft")
    metrics = run.read_metrics()
    assert set(metrics["eval_far"]) == {"sft"} and metrics["eval_far"]["sft"]["n"] == len(far)
    answered = [e for e in run.read_episodes(phase="sft") if e.eval_split == "eval_far"]
    assert sorted(e.ex_id for e in answered) == sorted(q.id for q in far)
    assert run.read_meta()["selection"]["eval_far"]["n"] == len(far)
