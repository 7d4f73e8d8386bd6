"""`kgr kg slice` (library/graph/slice.py): a connected part of any graph, written as a kg.json the
loader and `kgr data` accept; and a profile naming a data folder trains that folder's own KG."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest
from typer.testing import CliRunner

from library.cli import app
from library.config import load_config
from library.graph.formats import kg_text
from library.graph.kg import KnowledgeGraph, load_kg
from library.graph.slice import best_connected, connected_slice
from user_graphs import cyclic_graph, merge_heavy_graph

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("graph", ["food", "merge_heavy", "cyclic"])
def test_a_slice_is_connected_closed_and_loads(graph):
    kg = (load_kg(REPO / "data" / "food" / "kg.json") if graph == "food"
          else KnowledgeGraph.from_dict(merge_heavy_graph() if graph == "merge_heavy" else cyclic_graph()))
    part = connected_slice(kg, 60)
    sliced = KnowledgeGraph.from_dict(part)  # the loader's every rule holds
    assert len(sliced.entities) == 60 and best_connected(kg) in sliced.entities
    assert nx.is_connected(sliced.graph.to_undirected())
    keep = set(sliced.entities)
    # every fact of the graph among the kept entities, none other, in the file's order
    assert [e.model_dump() for e in kg.edges if e.src in keep and e.dst in keep] == part["edges"]
    assert {e["rel"] for e in part["edges"]} == {r["id"] for r in part["relations"]}
    assert all(sliced.entities[i] == kg.entities[i] for i in keep)


def test_the_slice_grows_by_distance_from_its_start():
    kg = load_kg(REPO / "data" / "kg.json")
    start = best_connected(kg)
    dist = nx.single_source_shortest_path_length(kg.graph.to_undirected(), start)
    kept = {e["id"] for e in connected_slice(kg, 100)["entities"]}
    # no entity left out lies nearer the start than one kept
    assert max(dist[e] for e in kept) <= min(d for e, d in dist.items() if e not in kept)
    assert connected_slice(kg, 100) == connected_slice(kg, 100)


def test_kg_slice_writes_once_and_refuses_to_lose_a_graph(tmp_path):
    runner = CliRunner()
    out = tmp_path / "part.json"
    kg = REPO / "data" / "kg.json"
    first = runner.invoke(app, ["kg", "slice", str(kg), "--entities", "40", "--out", str(out)])
    assert first.exit_code == 0, first.output
    assert "40 entities" in first.output and "kgr kg check" in first.output
    assert out.read_text() == kg_text(connected_slice(load_kg(kg), 40))
    again = runner.invoke(app, ["kg", "slice", str(kg), "--entities", "40", "--out", str(out)])
    assert again.exit_code == 0, again.output  # the same slice: nothing to lose
    other = runner.invoke(app, ["kg", "slice", str(kg), "--entities", "41", "--out", str(out)])
    assert other.exit_code == 2 and "--force" in other.output and len(load_kg(out).entities) == 40
    copy = tmp_path / "kg.json"
    copy.write_text(kg.read_text())
    onto = runner.invoke(app, ["kg", "slice", str(copy), "--entities", "40", "--out", str(copy)])
    assert onto.exit_code == 2 and copy.read_text() == kg.read_text()
    bad = runner.invoke(app, ["kg", "slice", str(kg), "--entities", "40", "--start", "Nope", "--out", str(tmp_path / "x.json")])
    assert bad.exit_code == 2 and "'Nope'" in bad.output and not (tmp_path / "x.json").exists()


def test_a_profile_naming_a_data_folder_trains_that_folders_kg(tmp_path):
    data = tmp_path / "part"
    data.mkdir()
    (data / "stats.json").write_text(json.dumps({"kg": {"source": str(tmp_path / "part.json")}}))
    (tmp_path / "part.json").write_text(kg_text(connected_slice(load_kg(REPO / "data" / "kg.json"), 30)))
    assert load_config("quick", {"data_dir": str(data)}).kg_path == tmp_path / "part.json"
    assert load_config("quick").kg_path == Path("data/kg.json")  # data/keyed was made from it
    assert load_config("demo").kg_path == Path("data/demo/kg.json")
    assert load_config("quick", {"data_dir": str(data), "kg_path": "data/kg.json"}).kg_path == Path("data/kg.json")
