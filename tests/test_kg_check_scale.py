"""`kgr kg check` on a graph too big to count exactly (library/graph/check.py): long chains are
estimated from a sample of starts within a budget and said to be, small graphs keep their exact
counts, advice never judges hop lengths it did not count, and its commands and errors are fit to
paste and to read. The 50k-entity timing is benchmarks/big_graph.py's; no timing is asserted here."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from library.graph.check import (BUDGET, chain_counts, check_graph, count_chains, counting_note, estimated_hops,
                                 recommend)
from library.graph.kg import load_kg
from library.graph.oracle import grows_tree, step

REPO = Path(__file__).resolve().parents[1]
SMALL_BUDGET = 200_000  # a few hundred of the 5k graph's starts: forces the sampling path in well under a second


def _make_graph(entities: int, edges: int, **options) -> dict:
    """benchmarks/big_graph.py's generator (benchmarks/ is no package, so it is loaded by path)."""
    spec = importlib.util.spec_from_file_location("big_graph", REPO / "benchmarks" / "big_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_graph(entities, edges, **options)


@pytest.fixture(scope="module")
def big_kg_path(tmp_path_factory) -> Path:
    """A 5k-entity, 20k-edge generated graph, in a folder whose name has a space."""
    path = tmp_path_factory.mktemp("scale") / "my graphs" / "kg.json"
    path.parent.mkdir()
    path.write_text(json.dumps(_make_graph(5000, 20000)))
    return path


def _reference_count(kg, max_hops: int, widths=(1, 2, 3, 4)) -> dict[int, Counter]:
    """The count as it was first written, one oracle Hop per relation tried: what the fast walk
    must reproduce exactly."""
    cap = max(widths)
    counts: dict[int, Counter] = {h: Counter() for h in range(1, max_hops + 1)}

    def extend(held, seen, hops, widest):
        for rel in sorted(kg.relations):
            hop = step(kg.successors, held, rel)
            if len(hop.held) > cap or not grows_tree(hop, seen):
                continue
            width = max(widest, len(hop.held))
            for w in widths:
                if width <= w:
                    counts[hops + 1][w] += 1
            if hops + 1 < max_hops:
                extend(hop.held, seen | set(hop.held), hops + 1, width)

    for start in kg.entities:
        extend((start,), frozenset([start]), 0, 1)
    return counts


@pytest.mark.parametrize("source", ["data/kg.json", "data/food/kg.json", "generated"])
def test_exact_counts_are_unchanged_and_a_budget_they_fit_in_keeps_them_exact(tmp_path, source):
    if source == "generated":  # the reference tries every relation at every hop: few of them, few entities
        (tmp_path / "kg.json").write_text(json.dumps(_make_graph(300, 1200, relations=10)))
        kg = load_kg(tmp_path / "kg.json")
    else:
        kg = load_kg(REPO / source)
    assert count_chains(kg, 5) == _reference_count(kg, 5)
    assert count_chains(kg, 3, (1, 3)) == _reference_count(kg, 3, (1, 3))
    budgeted = check_graph(kg, budget=BUDGET)
    assert budgeted["chains"] == check_graph(kg)["chains"]
    assert budgeted["counting"]["exact_hops"] == [1, 2, 3, 4, 5] and not estimated_hops(budgeted)
    assert budgeted["counting"]["ci95"] == {} and counting_note(budgeted).startswith("chain counts exact")


def test_a_small_budget_estimates_long_chains_from_a_sample_and_says_so(big_kg_path):
    kg = load_kg(big_kg_path)
    report = check_graph(kg, budget=SMALL_BUDGET)
    counting = report["counting"]
    guessed = estimated_hops(report)
    assert 30 <= counting["sample"] < counting["starts"] == 5000
    assert guessed and guessed == list(range(guessed[0], 6)) and 5 in guessed
    assert counting["exact_hops"] == list(range(1, guessed[0]))
    assert set(counting["ci95"]) == {str(h) for h in guessed}
    assert all(ci > 0 for h in guessed for ci in counting["ci95"][str(h)].values())
    note = counting_note(report)
    assert f"estimated from a sample of {counting['sample']:,} of 5,000 starts" in note and "--budget 0" in note
    if counting["exact_hops"]:  # hop lengths it calls exact are
        assert {str(h): {str(w): n for w, n in c.items()} for h, c in count_chains(kg, guessed[0] - 1).items()} \
            == {h: report["chains"][h] for h in map(str, counting["exact_hops"])}
    advice = " ".join(recommend(report, n_eval=300, n_train_hard=300, n_dev=100))
    assert "(estimated" in advice  # the verdict on 4/5 hops rests on the estimate, and says so


def test_estimates_land_near_the_exact_count(tmp_path):
    (tmp_path / "kg.json").write_text(json.dumps(_make_graph(1000, 4000)))
    kg = load_kg(tmp_path / "kg.json")
    exact = count_chains(kg, 4)
    guess = chain_counts(kg, 4, budget=40_000)
    assert guess.sample < guess.starts and guess.ci95
    for h, by_width in guess.ci95.items():
        for w, ci in by_width.items():
            # Seeded, so not flaky; twice the 95% interval leaves room for the odd cell of 16.
            assert abs(guess.counts[h][w] - exact[h][w]) <= 2 * ci, (h, w, guess.counts[h][w], exact[h][w], ci)
    assert all(guess.counts[h] == exact[h] for h in range(1, 5) if h not in guess.ci95)


def test_advice_never_judges_hop_lengths_it_did_not_count(big_kg_path):
    report = check_graph(load_kg(big_kg_path), max_hops=2)
    assert set(report["chains"]) == {"1", "2"}
    advice = " ".join(recommend(report, n_eval=300, n_train_hard=300, n_dev=100))
    assert "at 4 hops" not in advice and "at 5 hops" not in advice and "too few" not in advice
    assert "were not counted (--max-hops 2)" in advice
    assert f"kgr kg check {shlex.quote(str(big_kg_path))} --max-hops 5" in advice


def test_kgr_kg_check_flags_estimates_and_quotes_a_path_with_a_space(big_kg_path):
    proc = subprocess.run([sys.executable, "-m", "library.cli", "kg", "check", str(big_kg_path), "--budget",
                           str(SMALL_BUDGET), "--progress"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "counting chains" in proc.stderr  # the progress bar, asked for off a terminal
    text = " ".join(proc.stdout.split())  # rich folds lines at 120 columns off a terminal
    assert "estimated from a sample of" in text and " ±" in text and "~" in text
    assert "peak memory" in text
    quoted = shlex.quote(str(big_kg_path))
    assert quoted != str(big_kg_path)  # the space needs quoting
    command = text.split("run `kgr data ")[1].split("`")[0]
    assert shlex.split(command) == ["--kg", str(big_kg_path)]


def test_kgr_kg_check_max_hops_2_says_long_chains_were_not_counted(big_kg_path):
    proc = subprocess.run([sys.executable, "-m", "library.cli", "kg", "check", str(big_kg_path), "--max-hops", "2"],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr  # no bar off a terminal unless asked
    text = " ".join(proc.stdout.split())
    assert "were not counted (--max-hops 2)" in text and "at 4 hops" not in text and "at 5 hops" not in text
    assert "chain counts exact" in text


def _check_out(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "library.cli", "kg", "check", "data/kg.json", "--out", str(out)],
                          capture_output=True, text=True, cwd=REPO)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into read-only folders")
def test_kgr_kg_check_out_to_a_read_only_folder_is_one_line_and_exit_2(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        proc = _check_out(folder / "report.json")
    finally:
        folder.chmod(0o700)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"error: {folder / 'report.json'}: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert not (folder / "report.json").exists()


def test_kgr_kg_check_out_it_cannot_write_is_one_line_and_exit_2(tmp_path):
    # A file where the folder should be fails for root too.
    (tmp_path / "file").write_text("")
    proc = _check_out(tmp_path / "file" / "report.json")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and proc.stdout == "", proc.stderr
