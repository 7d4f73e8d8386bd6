"""Every number names its own n. The quick profile evaluates the base model on 30 questions and
the later phases on 150, so quick's SFT - base difference is paired over 30 questions
(metrics.json ``comparisons``): the videos and their upload texts say so, and never call it
paired on 150."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scenes.build import upload_text
from scenes.resolve import RunData, resolve_shots, resolve_upload
from scenes.storyboard import load_storyboard

REPO = Path(__file__).resolve().parents[1]


def load(storyboard: str, run: str):
    sb = load_storyboard(REPO / "storyboards" / f"{storyboard}.yaml")
    data = RunData.load(REPO / "data" / "runs" / run, kg_default=REPO / sb.kg, questions_default=REPO / sb.questions)
    return sb, data


def test_quick_names_the_30_questions_its_sft_gain_is_paired_on():
    comparisons = json.loads((REPO / "data" / "runs" / "quick" / "metrics.json").read_text())["comparisons"]
    assert comparisons["sft-base"]["n"] == 30 and comparisons["rsft-sft"]["n"] == 150
    sb, data = load("short", "quick")
    assert [(s["phase"], s["n"]) for s in data.steps()] == [("sft", 30), ("rsft", 150), ("grpo", 150)]
    shots = resolve_shots(sb, data)
    title, end = shots[0], shots[-1]
    assert "Paired on 150" not in end.payload["footer"]
    # what the graph's check refused comes first, then the pairing
    assert end.payload["footer"].startswith("The graph's check: RSFT refused 7 of 150 questions whose right answers "
                                            "had a wrong path. Paired on 30 (SFT), 150 (RSFT), 150 (GRPO) questions")
    assert "SFT added 73 points, on 30 shared questions;" in end.narration
    assert "n = 150 (Base: 30)" in title.payload["footer"]
    description = resolve_upload(sb, data)["description"]
    assert "Base 0% (n = 30)" in description and "SFT 81% (n = 150)" in description
    assert "SFT +73.3 points (95% CI +56.7 to +86.7, n = 30)" in description


@pytest.mark.parametrize("storyboard", ["short", "explainer"])
def test_a_run_that_evaluated_every_phase_on_the_same_questions_names_one_n(storyboard):
    sb, data = load(storyboard, "reference")
    said = " ".join(s.narration + " " + s.caption + " " + json.dumps(s.payload) for s in resolve_shots(sb, data))
    assert "both were asked" not in said and "shared questions" not in said and "(Base:" not in said
    if storyboard == "short":
        assert "Paired on 300 questions;" in said
    assert "n = 300" in upload_text(resolve_upload(sb, data), [], [])


def test_the_explainer_says_the_base_models_smaller_n():
    sb, data = load("explainer", "quick")
    text = " ".join(s.narration for s in resolve_shots(sb, data))
    assert "for the Base model, asked 30 of them," in text
    assert "Each phase is scored on 150 questions, the Base model on 30," in text
    assert "SFT added 73 points, on the 30 questions both were asked" in text
