"""README.md is the front door: short, no project history, every link alive, and its results
table read from the canonical runs' metrics.json (no torch; reads files only)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
RUNS = REPO / "data" / "runs"
CANONICAL_RUNS = ("reference", "quick", "food")
HEADER = ("run", "phase", "correct / n", "accuracy [95% CI]", "grounded right", "paired",
          "difference, points [95% CI]", "only later / only earlier")


def _lines() -> list[str]:
    return README.read_text(encoding="utf-8").splitlines()


def _metrics(run: str) -> dict:
    return json.loads((RUNS / run / "metrics.json").read_text(encoding="utf-8"))


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _results_rows() -> list[list[str]]:
    """The rows of the one results table (the table whose header is HEADER)."""
    lines = _lines()
    starts = [i for i, line in enumerate(lines) if line.startswith("|") and tuple(_cells(line)) == HEADER]
    assert len(starts) == 1, f"expected one results table with header {HEADER}, found {len(starts)}"
    rows = []
    for line in lines[starts[0] + 2:]:  # after the header and its --- row
        if not line.startswith("|"):
            break
        rows.append(_cells(line))
    return rows


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _points(x: float) -> str:
    return f"{100 * x:+.1f}"


def _comparison(metrics: dict, key: str) -> dict:
    """A paired comparison named as in the table: ``b-a`` is metrics.json ``comparisons["b-a"]``;
    ``ablation-<phase>`` is ``ablation["vs_<phase>"]`` (the experiment's own section)."""
    if key in metrics["comparisons"]:
        return metrics["comparisons"][key]
    later, earlier = key.split("-", 1)
    assert later in EXPERIMENT_ROWS, f"no comparison {key!r} in metrics.json"
    return metrics[later][f"vs_{earlier}"]


#: Experiments with a row of their own, and where that row's accuracy block is in their section.
#: (The selection experiment is research, research/selection.py: its sections stay in the runs' logs, not the table.)
EXPERIMENT_ROWS = {"ablation": lambda section: section}


def _block(metrics: dict, phase: str) -> dict:
    if phase in EXPERIMENT_ROWS:
        return EXPERIMENT_ROWS[phase](metrics[phase])
    return metrics["eval"][phase]


def test_readme_has_at_most_150_lines():
    assert len(_lines()) <= 150


def test_results_section_is_short():
    """The front door shows the table and a few lines; findings live in docs/RESULTS.md."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Results"):text.index("\n## ", text.index("## Results") + 1)]
    prose = [line for line in section.splitlines()[1:] if not line.startswith("|")]
    assert len(" ".join(prose).split()) <= 120


def test_readme_tells_no_project_history():
    offending = [line for line in _lines() if re.search(r"\bsession", line, re.IGNORECASE)]
    assert not offending, offending


def test_results_table_covers_every_phase_of_the_canonical_runs():
    rows = [(row[0].strip("`"), row[1]) for row in _results_rows()]
    expected = []
    for run in CANONICAL_RUNS:
        metrics = _metrics(run)
        expected += [(run, phase) for phase in metrics["eval"]]
        expected += [(run, name) for name in EXPERIMENT_ROWS if name in metrics]
    assert sorted(rows) == sorted(expected)
    assert len(rows) == len(set(rows)), "a (run, phase) row appears twice"


@pytest.mark.parametrize("row", _results_rows(), ids=lambda row: f"{row[0].strip('`')}-{row[1]}")
def test_results_table_numbers_come_from_metrics_json(row):
    assert len(row) == len(HEADER), row
    run, phase, correct_n, accuracy, grounded, paired, difference, discordant = row
    metrics = _metrics(run.strip("`"))
    block = _block(metrics, phase)
    assert correct_n == f"{block['correct']} / {block['n']}"
    lo, hi = block["accuracy_ci"]
    assert accuracy == f"{_pct(block['accuracy'])}% [{_pct(lo)}, {_pct(hi)}]"
    g = block.get("grounded")
    assert grounded == ("–" if g is None else "0" if block["correct"] == 0
                        else f"{g['correct']} ({100 * g['share_of_correct']:.0f}%)"), (grounded, g)
    if not paired:
        assert difference == "" and discordant == "", row
        return
    key = paired.strip("`")
    comparison = _comparison(metrics, key)
    assert comparison["phase_b"] == phase == key.split("-", 1)[0], (key, comparison["phase_b"], phase)
    assert comparison["phase_a"] == key.split("-", 1)[1]
    assert comparison["split"] == "eval" and comparison["n"] == block["n"]
    c_lo, c_hi = comparison["ci"]
    assert difference == f"{_points(comparison['diff'])} [{_points(c_lo)}, {_points(c_hi)}]"
    assert discordant == f"{comparison['discordant']['b_only']} / {comparison['discordant']['a_only']}"


def test_every_relative_link_in_readme_exists():
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", text)
    assert targets, "no links found"
    missing = []
    for target in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # absolute URL or an anchor in the README itself
        path = target.split("#", 1)[0]
        if not (REPO / path).exists():
            missing.append(target)
    assert not missing, missing
