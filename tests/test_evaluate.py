"""library.evaluation.evaluate: Wilson intervals, metrics from episodes, the eval loop and its resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from library.contracts import Episode, Question
from library.evaluation.evaluate import compare_phases, metrics_from_episodes, metrics_from_run
from library.stats import wilson_interval
from library.runs.folder import RunDir


def _ep(i: int, answer: str | None, star: str, hop: int, *, phase="sft", spam=0.0, cov=0.5, edge=None) -> Episode:
    reward = {"correctness": 1.0 if answer == star else -2.0, "path_coverage": cov, "path_reward": cov,
              "spam_penalty": spam, "total": 0.0}
    if edge is not None:
        reward["edge_reward"] = edge
    return Episode(phase=phase, step=0, ex_id=f"q{i}", split="eval", prompt="p", completion="c",
                   parsed={"answer": answer, "trace_text": "", "trace_entities": [], "path_entities": [],
                           "valid_format": answer is not None, "claims": []},
                   reward=reward, hop_len=hop, answer_star=star, kind="eval", eval_split="eval",
                   correct=answer is not None and answer == star)


# ------------------------------------------------------------------------------ wilson
@pytest.mark.parametrize("k,n,lo,hi", [
    (8, 10, 0.4902, 0.9433),    # textbook example
    (0, 20, 0.0, 0.1611),       # zero successes still gets a useful upper bound
    (20, 20, 0.8389, 1.0),
    (120, 300, 0.3462, 0.4564),   # worked by hand: centre 0.4013, half-width 0.0551
    (1, 2, 0.0945, 0.9055),
])
def test_wilson_known_values(k, n, lo, hi):
    got = wilson_interval(k, n)
    assert got == pytest.approx((lo, hi), abs=1e-4)


def test_wilson_symmetry_and_bounds():
    for n in (1, 7, 50):
        for k in range(n + 1):
            lo, hi = wilson_interval(k, n)
            assert 0.0 <= lo <= k / n <= hi <= 1.0
            lo2, hi2 = wilson_interval(n - k, n)
            assert lo == pytest.approx(1 - hi2) and hi == pytest.approx(1 - lo2)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


# ------------------------------------------------------------------------------ metrics
def test_metrics_by_hop_sums_and_components():
    eps = [_ep(0, "A", "A", 4, edge=0.5), _ep(1, "B", "A", 4, edge=-0.25), _ep(2, "C", "C", 5, spam=0.5, edge=0.0),
           _ep(3, None, "D", 5, cov=0.0, edge=0.0), _ep(4, "D", "D", 5, edge=0.5)]
    m = metrics_from_episodes(eps)
    assert (m["n"], m["correct"]) == (5, 3)
    assert m["accuracy"] == pytest.approx(0.6)
    assert m["accuracy_ci"] == pytest.approx(list(wilson_interval(3, 5)))
    assert sum(b["n"] for b in m["by_hop"].values()) == m["n"]
    assert sum(b["correct"] for b in m["by_hop"].values()) == m["correct"]
    assert list(m["by_hop"]) == ["4", "5"]
    assert m["by_hop"]["5"]["accuracy"] == pytest.approx(2 / 3)
    assert m["valid_format_rate"] == pytest.approx(0.8)
    assert m["spam_rate"] == pytest.approx(0.2)
    assert m["path_coverage"] == pytest.approx(0.4)
    assert set(m["reward"]) == {"correctness", "path_coverage", "path_reward", "spam_penalty", "edge_reward", "total"}
    assert m["reward"]["edge_reward"] == pytest.approx(0.15)
    assert m["reward"]["correctness"] == pytest.approx((3 * 1 - 2 * 2) / 5)
    json.dumps(m)  # JSON-ready


def test_metrics_of_nothing_is_well_formed():
    m = metrics_from_episodes([])
    assert m["n"] == 0 and m["accuracy"] == 0.0 and m["accuracy_ci"] == [0.0, 1.0] and m["by_hop"] == {}


def test_compare_phases_paired_bootstrap_is_seeded_and_honest():
    sft = [_ep(i, "A" if i % 2 else "B", "A", 4, phase="sft") for i in range(40)]
    same = [_ep(i, "A" if i % 2 else "B", "A", 4, phase="grpo") for i in range(40)]
    r = compare_phases(sft + same, "eval", "sft", "grpo")
    assert r["diff"] == 0 and r["ci"] == [0, 0]  # identical answers: no difference, no spread
    better = [_ep(i, "A" if i % 2 or i < 10 else "B", "A", 4, phase="grpo") for i in range(40)]
    r1 = compare_phases(sft + better, "eval", "sft", "grpo", seed=3)
    r2 = compare_phases(sft + better, "eval", "sft", "grpo", seed=3)
    assert r1 == r2
    assert r1["n"] == 40 and r1["diff"] == pytest.approx(5 / 40)
    assert 0 < r1["ci"][0] <= r1["diff"] <= r1["ci"][1]
    assert r1["discordant"] == {"a_only": 0, "b_only": 5}
    # two questions' difference out of 20 is noise: the interval must include 0
    few = [_ep(i, "A" if i < 6 else "B", "A", 4, phase="sft") for i in range(20)]
    few_b = [_ep(i, "A" if i < 4 or i in (10,) else "B", "A", 4, phase="rsft") for i in range(20)]
    r3 = compare_phases(few + few_b, "eval", "sft", "rsft")
    assert r3["ci"][0] < 0 < r3["ci"][1] or r3["ci"][0] <= 0 <= r3["ci"][1]


# ------------------------------------------------------------------------------ evaluate
def _questions() -> list[Question]:
    """Hand-built questions over the tiny_kg fixture's graph (conftest.py)."""
    def q(i, hop, ents, rels, options, star, split="eval"):
        edges = [{"src": a, "rel": r, "dst": b} for a, r, b in zip(ents, rels, ents[1:])]
        return Question(id=f"{split}-{i:04d}", split=split, hop_len=hop,
                        question=f"Start at {ents[0]}. Follow {', '.join(rels)}. Where do you end?",
                        options=options, answer_star=star, path_star={"entities": ents, "edges": edges},
                        prompt=f"Start at {ents[0]}; follow {' then '.join(rels)}.\nA) {options['A']}\nB) {options['B']}"
                               f"\nC) {options['C']}\nD) {options['D']}\nAnswer in two lines:\nTRACE: <path>\nANSWER: <letter>",
                        ref={"trace": "t"})
    opts = {"A": "openssl", "B": "chronyc", "C": "restart the service", "D": "renew the certificate"}
    return [
        q(1, 3, ["TLSHandshakeError", "ClockSkew", "NTPSync", "chronyc"], ["caused_by", "fixed_by", "uses_tool"], opts, "B"),
        q(2, 3, ["TLSHandshakeError", "CertificateExpired", "RenewCertificate", "openssl"],
          ["caused_by", "fixed_by", "uses_tool"], opts, "A"),
        q(3, 2, ["HTTP502BadGateway", "ServiceDown", "RestartService"], ["caused_by", "fixed_by"], opts, "C"),
        q(4, 2, ["NTPDrift", "TLSHandshakeError", "CheckCertificateChain"], ["leads_to", "diagnosed_by"],
          {"A": "check the certificate chain", "B": "chronyc", "C": "openssl", "D": "clock skew"}, "A"),
        q(5, 1, ["CertificateExpired", "RenewCertificate"], ["fixed_by"], opts, "D"),
    ]


@pytest.fixture(scope="module")
def tiny_model():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(2)
    from library.model.load import load_model

    return load_model("tiny")


@pytest.mark.train
def test_evaluate_writes_valid_episodes_and_metrics(tiny_model, tiny_kg, tmp_path):
    from library.evaluation.evaluate import evaluate
    from library.scoring.reward import RewardModel

    model, tok = tiny_model
    reward = RewardModel.from_preset(tiny_kg, "toy+edges")
    questions = _questions()
    run = RunDir.create(tmp_path, run_id="r")
    run.write_metrics({"timings": {"sft": 1.0}})
    block = evaluate(model, tok, questions, reward, phase="base", split="eval", run=run,
                     batch_size=4, max_new_tokens=8, progress=False)
    episodes = run.read_episodes(phase="base", split="eval")  # validated against the contract
    assert [e.ex_id for e in episodes] == [q.id for q in questions]
    for ep, q in zip(episodes, questions):
        assert ep.prompt == q.prompt and ep.step == 0
        assert ep.hop_len == q.hop_len and ep.answer_star == q.answer_star and ep.kind == "eval"
        scored = reward.score(q, ep.completion)
        parsed, rew = scored.parsed, scored.reward
        assert ep.parsed == parsed and ep.reward == rew  # stored scores are the reward model's
    assert run.read_metrics() == {"timings": {"sft": 1.0}}  # metrics.json is the caller's to write
    assert block == metrics_from_episodes(episodes)
    assert block == metrics_from_run(run, phase="base", split="eval", ex_ids=[q.id for q in questions])
    assert block["n"] == 5 and sum(b["n"] for b in block["by_hop"].values()) == 5
    # The random model cannot follow the format: every answer is invalid and scored worst.
    assert block["valid_format_rate"] == 0.0 and block["correct"] == 0


@pytest.mark.train
def test_evaluate_resumes_without_regenerating(tiny_model, tiny_kg, tmp_path):
    from library.evaluation.evaluate import evaluate
    from library.scoring.reward import RewardModel

    model, tok = tiny_model
    reward = RewardModel(tiny_kg)
    questions = _questions()
    run = RunDir.create(tmp_path, run_id="r")
    # An interrupted eval: only the first two questions were logged.
    evaluate(model, tok, questions[:2], reward, phase="sft", split="eval", run=run, max_new_tokens=6, progress=False)
    full = evaluate(model, tok, questions, reward, phase="sft", split="eval", run=run, max_new_tokens=6, progress=False)
    assert len(run.read_episodes(phase="sft")) == 5  # the missing three only
    # Done: recomputed from the log; the model is never called (None would fail).
    again = evaluate(None, tok, questions, reward, phase="sft", split="eval", run=run, progress=False)
    assert again == full and len(run.read_episodes(phase="sft")) == 5
    # The shuffled split and train-sample key are separate evals of the same phase.
    shuffled = [q.model_copy(update={"split": "eval_shuffled"}) for q in questions[:3]]
    shuffled_block = evaluate(model, tok, shuffled, reward, phase="sft", split="eval_shuffled", run=run,
                              max_new_tokens=6, progress=False)
    train = [q.model_copy(update={"split": "train", "id": q.id.replace("eval", "train")}) for q in questions[3:]]
    train_block = evaluate(model, tok, train, reward, phase="sft", split="train_sample", run=run, max_new_tokens=6,
                           progress=False)
    assert full["n"] == 5 and shuffled_block["n"] == 3 and train_block["n"] == 2
    eps = run.read_episodes(phase="sft")
    assert {e.split for e in eps} == {"eval", "eval_shuffled", "train"}  # train_sample is a metrics key, not a split
    assert sorted(e.eval_split for e in eps).count("train_sample") == 2


def test_grounded_counts_right_answers_whose_trace_states_the_gold_path():
    """Right for the right reason: a right letter after a copied question is correct but not
    grounded; the reference TRACE is both."""
    from library.contracts import Episode, Question
    from library.evaluation.evaluate import metrics_from_episodes
    from library.graph.kg import load_kg
    from library.jsonl import iter_jsonl
    from library.questions.wording import reference_completion
    from library.scoring.reward import RewardModel

    repo = Path(__file__).resolve().parents[1]
    kg = load_kg(repo / "data" / "kg.json")
    reward = RewardModel.from_preset(kg, "paper+edges")
    qs = [q for _, q in iter_jsonl(repo / "data" / "eval.jsonl", Question)][:3]
    completions = [reference_completion(qs[0]), f"TRACE: {qs[1].question}\nANSWER: {qs[1].answer_star}",
                   "TRACE: no idea\nANSWER: " + ("A" if qs[2].answer_star != "A" else "B")]
    eps = [Episode.from_scored(reward.score(q, c), q, c, phase="sft", step=0, kind="eval", eval_split="eval")
           for q, c in zip(qs, completions)]
    m = metrics_from_episodes(eps)
    assert m["correct"] == 2 and m["grounded"]["correct"] == 1 and m["grounded"]["share_of_correct"] == 0.5
    assert m["grounded"]["accuracy_ci"][0] < 1 / 3 < m["grounded"]["accuracy_ci"][1]
