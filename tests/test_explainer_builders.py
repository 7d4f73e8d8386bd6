"""The explainer's pictures from committed runs' logs (scenes/builders.py): signs, labels and
runs that lack a block. No rendering: payloads only, validated as a render would."""

from __future__ import annotations

from pathlib import Path

import pytest

from scenes.builders import BUILDERS
from scenes.payloads import validate_payload
from scenes.query import ShotError, select_episode
from scenes.run_data import RunData
from scenes.storyboard import load_storyboard

REPO = Path(__file__).resolve().parents[1]


def run(name: str) -> RunData:
    return RunData.load(REPO / "data" / "runs" / name)


def build(data: RunData, scene: str, params: dict, sel=None) -> dict:
    payload = BUILDERS[scene](data, params, sel)
    validate_payload(scene, payload)
    return payload


def test_what_each_phase_added_keeps_each_differences_sign():
    data = run("reference")
    bars = build(data, "intervals", {"source": "steps", "after": "sft", "ablation": True})["bars"]
    steps = {s["phase"]: s for s in data.steps()}
    assert [b["label"] for b in bars] == ["SFT → RSFT", "RSFT → GRPO", "path reward over answer-only"]
    assert bars[0]["value"] == pytest.approx(100 * steps["rsft"]["diff"])
    # the ablation logs answer-only minus path reward; the bar says what the path reward added
    ablation = data.metrics["ablation"]["vs_grpo"]
    assert bars[-1]["value"] == pytest.approx(-100 * ablation["diff"]) and bars[-1]["lo"] <= bars[-1]["value"] <= bars[-1]["hi"]
    with pytest.raises(ShotError):
        build(data, "intervals", {"source": "steps", "after": "ppo"})


def test_the_graphs_reward_chart_says_what_the_path_reward_added():
    data = run("food")
    payload = build(data, "intervals", {"source": "selection"})
    over = data.metrics["selection"]["over_seeds"]
    assert payload["bars"][-1]["value"] == pytest.approx(-100 * over["diff"])  # logged: answer-only minus path
    assert payload["y_label"].startswith("path reward minus right answers only")


def test_phase_flow_colours_a_measurable_loss_apart_from_a_gain():
    data = run("reference")
    gain = build(data, "phase_flow", {})
    assert [b["label"] for b in gain["boxes"]] == ["Base", "SFT", "RSFT", "GRPO"]
    assert gain["arrows"][1]["measurable"] and gain["arrows"][1]["diff"] > 0
    assert not gain["arrows"][2]["measurable"] and "nothing measurable" in gain["arrows"][2]["text"]
    data.__dict__["_steps"] = [dict(s, diff=-abs(s["diff"]) - 0.02, ci=[-0.09, -0.01], measurable=True)
                               for s in data.steps()]
    loss = build(data, "phase_flow", {})
    assert all(a["diff"] < 0 and a["text"].startswith("-") for a in loss["arrows"])
    # a run that logged no training block still draws its phases, with nothing said of their sizes
    del data.metrics["training"]
    assert all(not b["lines"] for b in build(data, "phase_flow", {})["boxes"][1:])


def test_the_monitor_chart_shows_falls_below_zero_and_marks_its_verdicts():
    data = run("reference")
    payload = build(data, "monitor", {})
    lo, hi = payload["y_range"]
    assert lo < 0 < 2 <= hi  # "rise in false edges" fell below 0 at some step
    block = data.metrics["monitor"]["grpo"]
    assert {"x": float(block["stop_step"]), "kind": "stop"} in payload["marks"]
    assert payload["phase_boundaries"] == [{"x": float(block["stop_step"]), "label": f"stopped at step {block['stop_step']}"}]
    assert payload["x_label"] == "GRPO step" and min(p[0] for s in payload["series"] for p in s["points"]) == 1


def test_question_build_and_overview_follow_the_selected_question():
    data = run("reference")
    sb = load_storyboard(REPO / "storyboards" / "explainer.yaml")
    sel = select_episode(data, "hero", sb, 0)
    built = build(data, "question_build", {}, sel)
    q = sel.question
    assert [h["dst"] for h in built["hops"]] == [data.kg.label(e.dst) for e in q.path_star.edges]
    assert [o["answer"] for o in built["options"]].count(True) == 1
    assert built["checks"][0]["label"].startswith("one option reachable")
    # the far splits' four leakage counts are one line: every check fits the scene's 12
    leakage = data.data_stats["leakage"]
    assert len(built["checks"]) == 1 + len([k for k in leakage if "far" not in k]) + 1
    assert built["checks"][-1] == {"label": "6-hop splits apart: 0", "ok": True}
    overview = build(data, "kg_overview", {}, sel)
    assert overview["walk"] == list(q.path_star.entities)
    assert overview["counts"][0] == f"{len(data.kg.entities)} entities"


def test_the_branching_section_reads_a_run_whose_answers_branched():
    assert run("food").branched_answers > 0
    assert run("reference").branched_answers == 0  # a functional graph carries no branch
