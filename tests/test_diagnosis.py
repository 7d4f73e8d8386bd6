"""Where wrong answers leave the gold path (library/evaluation/diagnosis.py, `kgr diagnose`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from library.questions.wording import reference_completion
from library.cli import app
from library.errors import DataFileError
from library.contracts import Episode
from library.evaluation.diagnosis import departure_block, diagnose_run, repair_block
from library.jsonl import iter_jsonl
from library.contracts import Question
from library.graph.kg import load_kg
from library.scoring.reward import RewardModel

REPO = Path(__file__).resolve().parents[1]


def _questions(n: int = 6) -> list[Question]:
    return [q for _, q in iter_jsonl(REPO / "data" / "eval.jsonl", Question)][:n]


def _episode(reward: RewardModel, q: Question, completion: str) -> Episode:
    return Episode.from_scored(reward.score(q, completion), q, completion, phase="sft", step=0, kind="eval",
                               eval_split="eval")


def test_departures_name_the_first_wrong_step():
    kg = load_kg(REPO / "data" / "kg.json")
    reward = RewardModel.from_preset(kg, "paper+edges")
    q1, q2, q3 = _questions(3)
    right = reference_completion(q1)
    # q2: the reference TRACE cut after its first fact clause (stops early at step 2)
    first_clause = reference_completion(q2).split(", which")[0]
    short = f"TRACE: {first_clause.removeprefix('TRACE: ')}.\nANSWER: {q2.answer_star}"
    # q3: the first hop with another object than the gold one (a fact not recalled)
    edge = q3.path_star.edges[0]
    other = next(e.dst for e in kg.edges if e.rel == edge.rel and e.dst != edge.dst)
    wrong_fact = (f"TRACE: {kg.label(edge.src)} {kg.relation_label(edge.rel)} {kg.label(other)}.\n"
                  f"ANSWER: {'A' if q3.answer_star != 'A' else 'B'}")
    block = departure_block([_episode(reward, q1, right), _episode(reward, q2, short), _episode(reward, q3, wrong_fact)],
                            {q.id: q for q in (q1, q2, q3)})
    assert block["n"] == 3 and block["n_wrong"] == 1
    assert block["right"] == {"on_path": 1, "short": 1}  # q2's letter is right, its TRACE stopped at step 2
    assert block["wrong"] == {"fact": 1} and block["wrong_by_step"] == {"fact@1": 1}


def test_repairs_count_the_earlier_wrong_answers_by_kind_that_the_later_phase_gets_right():
    kg = load_kg(REPO / "data" / "kg.json")
    reward = RewardModel.from_preset(kg, "paper+edges")
    q1, q2, q3, q4 = _questions(4)
    right = {q.id: reference_completion(q) for q in (q1, q2, q3, q4)}

    def wrong_fact(q):
        edge = q.path_star.edges[0]
        other = next(e.dst for e in kg.edges if e.rel == edge.rel and e.dst != edge.dst)
        return (f"TRACE: {kg.label(edge.src)} {kg.relation_label(edge.rel)} {kg.label(other)}.\n"
                f"ANSWER: {'A' if q.answer_star != 'A' else 'B'}")

    before = [_episode(reward, q1, wrong_fact(q1)), _episode(reward, q2, wrong_fact(q2)),
              _episode(reward, q3, right[q3.id]), _episode(reward, q4, right[q4.id])]
    # q1 repaired, q2 still wrong, q3 broken; q4 is not answered by the later phase and not counted
    after = [_episode(reward, q1, right[q1.id]), _episode(reward, q2, wrong_fact(q2)),
             _episode(reward, q3, wrong_fact(q3))]
    block = repair_block(before, after, {q.id: q for q in (q1, q2, q3, q4)}, kg)
    assert block["n"] == 3 and block["broken"] == 1
    assert block["wrong"] == {"fact": 2} and block["repaired"] == {"fact": 1}
    assert block["wrong_by_step"] == {"fact@1": 2} and block["repaired_by_step"] == {"fact@1": 1}
    # two answers to one question of a phase are refused, not silently counted once
    with pytest.raises(ValueError, match="two answers to question"):
        departure_block(before + before[:1], {q.id: q for q in (q1, q2, q3, q4)}, kg)
    # a phase against itself repairs and breaks nothing
    same = repair_block(before, before, {q.id: q for q in (q1, q2, q3, q4)}, kg)
    assert same["repaired"] == {"fact": 0} and same["broken"] == 0


def test_committed_chain_order_reference_loses_its_place_more_than_its_facts():
    # The measurement behind docs/FINDINGS.md finding 40, read from the committed log.
    # the run was trained on the splits of its day, kept beside it (data/ has moved on: refused, below)
    run = REPO / "data" / "experiments" / "reference-chain"
    with pytest.raises(DataFileError, match="not the data"):
        diagnose_run(run)
    report = diagnose_run(run, data_dir=run / "data")
    assert set(report) == {"base", "sft", "rsft", "grpo"}
    sft = report["sft"]
    assert sft["n"] == 300 and sft["n_wrong"] == 126 == sum(sft["wrong"].values()) == sum(sft["wrong_by_step"].values())
    assert sft["wrong"]["relation"] == 83 and sft["wrong_by_step"]["relation@5"] == 62
    assert sft["wrong"]["fact"] == 21
    assert report["base"]["wrong"] == {"short": 300}
    # what RL repaired of SFT's wrong answers, kind by kind, adds up to the accuracy change
    rsft = report["rsft"]["from"]
    assert rsft["before"] == "sft" and sum(rsft["wrong"].values()) == 126
    assert sft["n_wrong"] - sum(rsft["repaired"].values()) + rsft["broken"] == report["rsft"]["n_wrong"]


def test_cli_prints_each_phase_and_writes_json(tmp_path):
    out = tmp_path / "diagnosis.json"
    result = CliRunner().invoke(app, ["diagnose", str(REPO / "data" / "runs" / "quick"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "sft" in result.output and "relation" in result.output
    assert "right now, of sft's wrong: " in result.output
    report = json.loads(out.read_text())
    assert report["phases"]["sft"]["n"] == 150


def test_cli_clear_error_without_episodes_of_the_split(tmp_path):
    result = CliRunner().invoke(app, ["diagnose", str(REPO / "data" / "runs" / "quick"), "--split", "eval_shuffled"])
    assert result.exit_code == 2
    assert "no 'eval_shuffled' eval episodes" in result.output


def test_diagnose_reads_the_train_sample_split_of_a_committed_run():
    # train_sample answers are logged with split "train" and eval_split "train_sample": the
    # reader's eval_episodes selects them by the metrics split, as evaluation wrote them
    report = diagnose_run(REPO / "data" / "runs" / "quick", split="train_sample")
    assert {phase: block["n"] for phase, block in report.items()} == {"base": 8, "sft": 8, "rsft": 8, "grpo": 8}


def test_on_a_branching_graph_a_trace_is_held_against_every_branch_it_must_carry():
    """On data/food (a branching graph) the reference TRACE states every branch and is on the
    procedure; the gold path alone is a TRACE that dropped a branch; a missing successor in a
    list departs there too."""
    from library.graph.oracle import question_walk

    kg = load_kg(REPO / "data" / "food" / "kg.json")
    reward = RewardModel.from_preset(kg, "paper+edges")
    qs = {q.id: q for _, q in iter_jsonl(REPO / "data" / "food" / "eval.jsonl", Question)}
    branching = [q for q in qs.values() if any(len(h.held) > 1 for h in question_walk(kg, q))]
    q = next(x for x in branching if len(question_walk(kg, x)[0].held) == 1)
    hop = next(i for i, h in enumerate(question_walk(kg, q), start=1) if len(h.held) > 1)
    honest = reference_completion(q)
    gold_only = "TRACE: " + ", ".join(f"{kg.label(e.src)} {kg.relation_label(e.rel)} {kg.label(e.dst)}"
                                      for e in q.path_star.edges) + f".\nANSWER: {q.answer_star}"
    block = departure_block([_episode(reward, q, honest)], qs, kg)
    assert block["right"] == {"on_path": 1}
    dropped = departure_block([_episode(reward, q, gold_only)], qs, kg)
    assert dropped["right"] == {"branch": 1} or dropped["right"] == {"short": 1}
    # the gold path alone is still grounded and scores as much as the honest set TRACE
    assert reward.score(q, gold_only).reward.total == reward.score(q, honest).reward.total
    assert len(branching) >= 50 and hop >= 1
    # without the KG the reader holds it against the gold path only, as on a functional graph
    assert departure_block([_episode(reward, q, gold_only)], qs)["right"] == {"on_path": 1}


def test_repairs_on_a_branching_graph_add_up_to_each_phase_change():
    # data/runs/food: the quick profile on a graph whose hops branch, read with its own KG
    report = diagnose_run(REPO / "data" / "runs" / "food")
    phases = list(report)
    assert phases[0] == "base" and len(phases) >= 3
    for before, after in zip(phases, phases[1:]):
        came = report[after]["from"]
        assert came["before"] == before
        assert came["wrong"] == report[before]["wrong"]
        assert (report[before]["n_wrong"] - sum(came["repaired"].values()) + came["broken"]
                == report[after]["n_wrong"])


def test_a_graph_that_lacks_the_questions_entities_is_a_clear_error(tmp_path):
    # the food run's questions read against the troubleshooting graph: named, not a traceback
    result = CliRunner().invoke(app, ["diagnose", str(REPO / "data" / "runs" / "food"), "--kg", str(REPO / "data" / "kg.json")])
    assert result.exit_code == 2, result.output
    assert "data/kg.json: not the data" in result.output and "point --data (or --questions) and --kg" in " ".join(result.output.split())
    # a run that recorded no data hashes (made by hand, or before they were recorded) gets as far as the questions
    run = tmp_path / "food"
    shutil.copytree(REPO / "data" / "runs" / "food", run, ignore=shutil.ignore_patterns("*_dev", "*sweep*"))
    meta = json.loads((run / "meta.json").read_text())
    del meta["data"]
    (run / "meta.json").write_text(json.dumps(meta))
    result = CliRunner().invoke(app, ["diagnose", str(run), "--kg", str(REPO / "data" / "kg.json")])
    assert result.exit_code == 2, result.output
    assert "kg.json" in result.output and "which this graph does not hold" in result.output


def test_reach_tells_what_a_three_step_training_chain_can_show_of_a_departure():
    """A 4-5-hop answer that takes the question's last step at step 3 and ends there, or leaves
    the path after step 3, chose what every 3-step training chain rewards as right: ``beyond``;
    a fact not recalled is ``fact`` at any step; an early stop at step 3 is ``within``."""
    kg = load_kg(REPO / "data" / "kg.json")
    reward = RewardModel.from_preset(kg, "paper+edges")
    q = next(x for x in _questions(60) if x.hop_len == 5)
    e = q.path_star.edges
    wrong_letter = "A" if q.answer_star != "A" else "B"

    def trace(claims):
        return "TRACE: " + ", ".join(f"{kg.label(s)} {kg.relation_label(r)} {kg.label(d)}" for s, r, d in claims) + \
            f".\nANSWER: {wrong_letter}"

    gold = [(x.src, x.rel, x.dst) for x in e]
    other = lambda src, rel, not_dst: next(x.dst for x in kg.edges if x.rel == rel and x.dst != not_dst)
    last_rel = e[-1].rel
    answers = {
        "took_last": trace(gold[:2] + [(e[2].src, last_rel, other(e[2].src, last_rel, e[2].dst))]),
        "fact4": trace(gold[:3] + [(e[3].src, e[3].rel, other(e[3].src, e[3].rel, e[3].dst))]),
        "stopped4": trace(gold[:3]),
        "stopped3": trace(gold[:2]),
    }
    expected = {"took_last": "beyond", "fact4": "fact", "stopped4": "beyond", "stopped3": "within"}
    for name, completion in answers.items():
        block = departure_block([_episode(reward, q, completion)], {q.id: q}, kg, longest_trained=3)
        assert block["n_wrong"] == 1, name
        assert block["wrong_by_reach"] == {w: int(w == expected[name]) for w in ("fact", "within", "beyond")}, name
    # with 5-step training chains every one of them could show on a training prompt
    block = departure_block([_episode(reward, q, answers["took_last"])], {q.id: q}, kg, longest_trained=5)
    assert block["wrong_by_reach"] == {"fact": 0, "within": 1, "beyond": 0}
    # without a training length nothing is placed
    assert "wrong_by_reach" not in departure_block([_episode(reward, q, answers["fact4"])], {q.id: q}, kg)


def test_committed_quick_sft_leaves_most_wrong_answers_beyond_what_training_chains_show():
    # The measurement behind docs/FINDINGS.md finding 65 (seed 0), read from the committed log of
    # the quick run it measured (RSFT on 3-hop prompts; data/runs/quick until finding 66).
    report = diagnose_run(REPO / "data" / "experiments" / "quick-rsft-3hop")
    sft = report["sft"]
    assert sft["longest_trained"] == 3
    assert sft["wrong_by_reach"] == {"fact": 6, "within": 2, "beyond": 20}
    assert sum(sft["wrong_by_reach"].values()) == sft["n_wrong"]
    came = report["rsft"]["from"]
    assert came["wrong_by_reach"] == sft["wrong_by_reach"]
    assert sum(came["repaired_by_reach"].values()) == sum(came["repaired"].values())


def test_reach_needs_the_runs_training_split_and_a_broken_one_is_an_error(tmp_path):
    import shutil

    from library.errors import DataFileError
    from library.evaluation.diagnosis import diagnose_view, longest_trained
    from library.runs.reader import RunView

    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(REPO / "data" / "keyed" / "eval.jsonl", data / "eval.jsonl")
    run = RunView.open(REPO / "data" / "runs" / "quick", data_dir=data)
    # no training split: nothing placed, not even zeros for a phase with no wrong answer
    assert longest_trained(run) is None
    report = diagnose_view(run, split="eval")
    assert all("wrong_by_reach" not in block and "longest_trained" not in block for block in report.values())
    (data / "train.jsonl").write_text("{not json\n")
    with pytest.raises(DataFileError):
        longest_trained(RunView.open(REPO / "data" / "runs" / "quick", data_dir=data))
    # RSFT on 4-5-hop prompts (train_hard) lengthens what the run trained on; quick's RSFT draws
    # 4-hop prompts (prompt_hops [4]: one past SFT's 3), and a run without RL prompt lengths reads 3
    hard = RunView.open(REPO / "data" / "runs" / "quick")
    hard.config["rsft"] = {**hard.config.get("rsft", {}), "distribution": "hard"}
    assert longest_trained(hard) == 5 and longest_trained(RunView.open(REPO / "data" / "runs" / "quick")) == 4
    sft_only = RunView.open(REPO / "data" / "runs" / "quick")
    sft_only.config["rsft"] = {**sft_only.config["rsft"], "prompt_hops": [3]}
    assert longest_trained(sft_only) == 3


def test_on_the_branching_food_run_every_wrong_answer_is_placed_once():
    report = diagnose_run(REPO / "data" / "runs" / "food")
    for block in report.values():
        assert block["longest_trained"] == 3
        assert sum(block["wrong_by_reach"].values()) == block["n_wrong"]
    came = report["rsft"]["from"]
    assert came["wrong_by_reach"] == report["sft"]["wrong_by_reach"]
    assert sum(came["repaired_by_reach"].values()) == sum(came["repaired"].values())
