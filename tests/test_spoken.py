"""Narration reads well aloud: on every committed run, every storyboard's narration is spoken
in words (no digit, no symbol read by name), while its captions keep the written form; the
project's own interval forms are said as a person says them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scenes.resolve import RunData, resolve_shots
from scenes.spoken import spoken
from scenes.storyboard import ci, points, load_storyboard

REPO = Path(__file__).resolve().parents[1]
RUNS = {"reference": None, "quick": None, "food": REPO / "data" / "food"}
UNSAID = re.compile(r"[0-9%+=→&×~≈≤≥()\[\]✓✗·–]")


@pytest.mark.parametrize("run", sorted(RUNS))
@pytest.mark.parametrize("storyboard", ["short", "explainer"])
def test_every_narration_is_said_in_words(run, storyboard):
    sb = load_storyboard(REPO / "storyboards" / f"{storyboard}.yaml")
    data_dir = RUNS[run]
    data = RunData.load(REPO / "data" / "runs" / run,
                        kg_default=(data_dir / "kg.json") if data_dir else REPO / sb.kg,
                        questions_default=(data_dir / "eval.jsonl") if data_dir else REPO / sb.questions)
    shots = resolve_shots(sb, data)
    for s in shots:
        assert not UNSAID.search(s.spoken), (run, s.index + 1, s.spoken)
    # the captions are not touched: the results shot still shows its figures
    (results,) = [s for s in shots if s.scene == "results_table"]
    assert "%" in results.caption and "%" in results.narration


def test_the_interval_forms_are_said_as_a_person_says_them():
    step = {"diff": 0.05, "ci": [0.02, 0.08], "n": 300}
    assert spoken(f"RSFT {points(step)}.") == "R S F T plus five points, interval two to eight, on three hundred questions."
    assert spoken(f"GRPO: 84% ({ci([0.79, 0.88])})") == "G R P O: eighty-four percent, interval seventy-nine to eighty-eight percent"
    assert spoken("Lost " + points({"diff": -0.023, "ci": [-0.04, -0.007]})) == \
        "Lost minus two point three points, interval minus four to minus zero point seven"


def test_lists_and_chains_of_numbers():
    from scenes.spoken import spoken

    assert spoken("hops 1,2,3 and 4,5") == "Hops one, two, three and four, five"
    assert spoken("unseen 3-4-5-hop questions") == "Unseen three to five-hop questions"
    assert spoken("1,250 steps") == "One thousand two hundred fifty steps"
