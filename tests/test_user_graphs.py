"""Graphs as users bring them (tests/user_graphs.py): branches that merge, cycles, chains no longer
than 4. `kgr data` with no size flag makes as many questions as each graph honestly gives (merges
held once, only a walk back to an entity dropped), `kgr kg check` says what that is from the same
selection run dry, and the command it prints succeeds."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from library.cli import app
from library.contracts import Question
from library.graph.check import check_graph
from library.graph.kg import KnowledgeGraph, load_kg
from library.graph.oracle import (admissible_walks, composable, merged, question_walk, set_walk, walk_edges,
                                  walk_width)
from library.jsonl import read_jsonl
from library.questions import SPLIT_FILES, reference_trace
from library.scoring.matching import extract_claims
from user_graphs import cyclic_graph, merge_heavy_graph, shallow_graph

GRAPHS = {"merge_heavy": merge_heavy_graph, "cyclic": cyclic_graph, "shallow": shallow_graph}
HELD_OUT = ("eval", "train_hard", "dev")


def _kgr(*args: str | Path):
    """``kgr ARGS`` in this process (off a terminal: no bars, no questions asked)."""
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def _stats(folder: Path) -> dict:
    return json.loads((folder / "stats.json").read_text())


@pytest.fixture(scope="module")
def graphs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("user graphs")  # a space, as users' folders have
    paths = {}
    for name, make in GRAPHS.items():
        (root / name).mkdir()
        paths[name] = root / name / "kg.json"
        paths[name].write_text(json.dumps(make()))
    return paths


@pytest.fixture(scope="module")
def checked(graphs) -> dict[str, tuple[str, list[str], Path]]:
    """``kgr kg check`` of every graph: its words (unwrapped), the command it prints, and where
    that command writes; and the command run once."""
    out = {}
    for name, path in graphs.items():
        planned = path.parent / "planned"
        result = _kgr("kg", "check", path, "--data-out", planned)
        assert result.exit_code == 0, result.output
        runs = [line[len("- run: "):] for line in result.output.splitlines() if line.startswith("- run: ")]
        assert len(runs) == 1, result.output
        command = shlex.split(runs[0])
        assert command[:2] == ["kgr", "data"], runs
        made = _kgr(*command[1:])
        assert made.exit_code == 0, made.output
        out[name] = (" ".join(result.output.split()), command, planned)
    return out


def test_a_walk_holds_a_merged_entity_once_and_drops_only_a_walk_back():
    kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
        "entities": [{"id": i, "label": i.lower() * 3, "type": "t"} for i in "SABXY"],
        "relations": [{"id": "r", "label": "leads to"}, {"id": "q", "label": "is fixed by"},
                      {"id": "p", "label": "prevents"}],
        "edges": [{"src": "S", "rel": "r", "dst": "A"}, {"src": "S", "rel": "r", "dst": "B"},
                  {"src": "A", "rel": "q", "dst": "X"}, {"src": "B", "rel": "q", "dst": "X"},
                  {"src": "X", "rel": "p", "dst": "Y"}, {"src": "Y", "rel": "r", "dst": "S"}]})
    merge = set_walk(kg.successors, "S", ["r", "q", "p"])
    assert [hop.held for hop in merge] == [("A", "B"), ("X",), ("Y",)] and merged(merge)
    assert walk_width("S", merge) is None and walk_width("S", merge, merges=True) == 2
    back = set_walk(kg.successors, "S", ["r", "q", "p", "r"])  # ... Y leads to S: the start again
    assert walk_width("S", back, merges=True) is None
    path = kg.path_from_entities(["S", "B", "X", "Y"], ["r", "q", "p"])
    assert composable(kg, path, 2, merges=True) and not composable(kg, path, 4)
    assert [c for c, _ in admissible_walks(kg.successors, sorted(kg.relations), "S", 4, 4, True)] == []
    # the TRACE states each claim the procedure makes: both facts of the merge, the entity held once after
    trace = reference_trace(kg, path)
    assert "aaa is fixed by [" in trace and "bbb is fixed by [" in trace and trace.count("xxx") == 3, trace
    assert extract_claims(kg, trace) == walk_edges(merge)


@pytest.mark.parametrize("name", list(GRAPHS))
def test_kg_check_prints_a_kgr_data_command_that_makes_what_it_said(checked, name):
    text, command, planned = checked[name]
    stats = _stats(planned)
    # what the dry run said it makes is what the command made, split by split and hop by hop
    for split in ("train", *HELD_OUT):
        counts = stats["counts"][split]
        said = f"{sum(counts.values()):,} {split} (" + ", ".join(f"{h}: {n:,}" for h, n in counts.items()) + ")"
        assert said in text, (said, text)
    assert sum(stats["counts"]["eval"].values()) >= 100
    assert all(stats["oracle"]["kg"][split] >= 0.95 for split in HELD_OUT), stats["oracle"]
    assert all(n == 0 for n in stats["leakage"].values())
    assert all(ok == n for ok, n in stats["unique_verified"].values())


@pytest.mark.parametrize("name", ["merge_heavy", "cyclic"])
def test_kgr_data_with_no_size_flag_takes_a_graph_that_merges_and_cycles(graphs, checked, name, tmp_path):
    kg = load_kg(graphs[name])
    report = check_graph(kg)
    assert report["cycles"]["entities_on_cycles"] > 50
    # tree walks alone do not give 5-hop chains enough for the default splits (350 a hop length)
    assert report["chains"]["5"]["4"] < 350 <= report["chains_merging"]["5"]["4"]
    result = _kgr("data", "--kg", graphs[name], "--out", tmp_path)
    assert result.exit_code == 0, result.output
    stats = _stats(tmp_path)
    assert stats["counts"]["eval"] == {"4": 150, "5": 150} and stats["merges"]["eval"] > 100
    # the same selection the check ran dry: the same bytes as the command it printed
    planned = checked[name][2]
    for fname in [*SPLIT_FILES.values(), "stats.json"]:
        assert (tmp_path / fname).read_bytes() == (planned / fname).read_bytes(), fname
    for q in read_jsonl(tmp_path / SPLIT_FILES["eval"], Question):
        walk = question_walk(kg, q)
        assert walk_width(q.path_star.entities[0], walk, merges=True) is not None  # never back to an entity
        assert extract_claims(kg, q.ref.trace) == walk_edges(walk)  # every claim of the procedure, once


def test_a_shallow_graph_trains_on_1_2_and_is_evaluated_on_3_4(graphs, checked, tmp_path):
    assert check_graph(load_kg(graphs["shallow"]))["chains"]["5"]["4"] == 0  # no chain longer than 4
    result = _kgr("data", "--kg", graphs["shallow"], "--out", tmp_path)
    assert result.exit_code == 2 and not (tmp_path / "eval.jsonl").exists()
    said = " ".join(result.output.split())
    assert "the graph gives no 4-5-hop eval questions" in said and "tries shorter hop lengths" in said, said
    text, command, planned = checked["shallow"]
    assert "at 1-3 / 4-5 hops `kgr data` refuses" in text and "at 1-2 / 3-4 hops makes" in text
    assert command[command.index("--train-hops") + 1] == "1-2" and command[command.index("--eval-hops") + 1] == "3-4"
    counts = _stats(planned)["counts"]
    assert set(counts["train"]) == {"1", "2"} and all(set(counts[s]) == {"3", "4"} for s in HELD_OUT)
    with pytest.raises(ValueError, match="longer than every training chain"):
        from library.questions import DatasetConfig

        DatasetConfig(train_hops=(1, 2, 3), eval_hops=(3, 4))


def test_sizes_fit_the_graph_and_a_refusal_names_what_it_gives(graphs, tmp_path):
    cyclic = graphs["cyclic"]
    # trees at most 2 wide: fewer 5-hop chains than the defaults ask; every split is sized down together
    result = _kgr("data", "--kg", cyclic, "--out", tmp_path / "fit", "--max-width", "2", "--no-merges")
    assert result.exit_code == 0, result.output
    counts = _stats(tmp_path / "fit")["counts"]
    n = {split: sum(counts[split].values()) for split in HELD_OUT}
    assert 100 <= n["eval"] < 300 and 0 < n["dev"] < n["train_hard"] < n["eval"], n
    assert counts["eval"]["4"] == counts["eval"]["5"]  # still balanced over hop lengths
    # sizes given are made exactly, or refused naming the sizes the graph gives, and a command for them
    result = _kgr("data", "--kg", cyclic, "--out", tmp_path / "asked", "--n-eval", "300", "--max-width", "2",
                  "--no-merges")
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "could only make" in said and "the graph gives" in said, said
    command = shlex.split(said.split("the graph gives", 1)[1].split("`")[1])
    assert command[command.index("--n-eval") + 1] == str(n["eval"])
    assert _kgr(*command[1:], "--out", tmp_path / "named").exit_code == 0
    # under the floor: refused, naming the eval it gives and the command that makes it anyway
    result = _kgr("data", "--kg", cyclic, "--out", tmp_path / "narrow", "--max-width", "1")
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "under the 100 an eval needs" in said, said
    command = shlex.split(said.split("`")[1])
    assert _kgr(*command[1:], "--out", tmp_path / "narrow").exit_code == 0
    assert sum(_stats(tmp_path / "narrow")["counts"]["eval"].values()) == int(command[command.index("--n-eval") + 1])


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_the_quick_profile_finds_every_phase_its_questions_on_each_graph(graphs, checked, name):
    """The quick profile on each graph's `kgr data` output: SFT on its longest training chain, RSFT
    one hop past it from train_hard (a shallow graph's 600 SFT rows take every 2-hop question, so
    RSFT could draw none from train), GRPO on held-out training questions; nothing from eval or dev."""
    from library.config import load_config
    from library.train.data import assert_training_only, load_data, make_selection

    _, _, planned = checked[name]
    config = load_config("quick", {"data_dir": str(planned), "kg_path": str(graphs[name]),
                                   "rsft": {"prompt_hops": ["next"]}})
    longest = max(int(h) for h in _stats(planned)["counts"]["train"])
    data = load_data(config)
    sel = make_selection(config, data)
    assert {q.hop_len for q in sel.sft} == {longest} and sel.grpo_pool
    assert len(sel.rsft_prompts) == config.rsft.n_prompts and {q.hop_len for q in sel.rsft_prompts} == {longest + 1}
    assert {q.split for q in sel.rsft_prompts} == {"train_hard"}
    held_out = {q.id for q in data.eval + data.eval_shuffled + data.dev}
    for part in (sel.sft, sel.rsft_prompts, sel.grpo_pool):
        assert_training_only(part, held_out)
