import json
import random

import pytest

from library.errors import DataFileError
from library.graph.kg import load_kg


def test_reach_and_edges(tiny_kg):
    assert tiny_kg.reach("TLSHandshakeError", ["caused_by", "fixed_by"]) == ["NTPSync", "RenewCertificate"]
    assert tiny_kg.reach("TLSHandshakeError", ["caused_by", "leads_to", "caused_by"]) == ["ServiceDown"]
    assert tiny_kg.has_edge("ClockSkew", "fixed_by", "NTPSync")
    assert not tiny_kg.has_edge("NTPSync", "fixed_by", "ClockSkew")


def test_sampling_is_deterministic_and_simple(tiny_kg):
    a = [tiny_kg.sample_path(random.Random(7), 3) for _ in range(1)]
    b = [tiny_kg.sample_path(random.Random(7), 3) for _ in range(1)]
    assert a == b
    for path in tiny_kg.iter_paths(3):
        assert len(set(path.entities)) == len(path.entities) == 4
        for e in path.edges:
            assert tiny_kg.has_edge(e.src, e.rel, e.dst)


def _write(tmp_path, obj):
    path = tmp_path / "kg.json"
    lines = ["{", f'"version": "x", "domain": "d",', '"entities": [']
    lines += [json.dumps(e) + ("," if i < len(obj["entities"]) - 1 else "") for i, e in enumerate(obj["entities"])]
    lines += ["],", '"relations": [']
    lines += [json.dumps(e) + ("," if i < len(obj["relations"]) - 1 else "") for i, e in enumerate(obj["relations"])]
    lines += ["],", '"edges": [']
    lines += [json.dumps(e) + ("," if i < len(obj["edges"]) - 1 else "") for i, e in enumerate(obj["edges"])]
    lines += ["]", "}"]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda kg: kg["entities"].append(dict(kg["entities"][0], label="other")), "duplicate entity id"),
        (lambda kg: kg["edges"].append({"src": "ClockSkew", "rel": "fixed_by", "dst": "Nope"}), "unknown entity 'Nope'"),
        (lambda kg: kg["edges"].append({"src": "ClockSkew", "rel": "cures", "dst": "NTPSync"}), "unknown relation 'cures'"),
        (lambda kg: kg["entities"].append({"id": "X", "label": "clock skew", "type": "cause"}), "already used"),
        (lambda kg: kg["entities"].append({"id": "Y", "label": "y", "type": "Cause "}), "spelled 'cause' elsewhere"),
        (lambda kg: kg["entities"].append({"id": "Y", "label": "y", "type": " "}), "empty type"),
        (lambda kg: kg["entities"].append({"id": "Y", "label": "y", "type": 3}), "entities[14].type"),
    ],
)
def test_bad_kg_names_file_line_and_problem(tmp_path, tiny_kg_dict, mutate, message):
    mutate(tiny_kg_dict)
    path = _write(tmp_path, tiny_kg_dict)
    with pytest.raises(DataFileError) as exc:
        load_kg(path)
    text = str(exc.value)
    assert str(path) in text and message in text
    assert exc.value.line is not None
    # the named line really holds the offending item
    offending = path.read_text().splitlines()[exc.value.line - 1]
    assert offending.startswith("{")


def test_entity_types_are_the_graphs_own(tmp_path):
    """Any domain's types load (a 12-entity graph typed "thing" was refused for not being a
    troubleshooting type); distractors still come from the answer's type."""
    graph = {"version": "1", "domain": "anything", "relations": [{"id": "r", "label": "relates to"}],
             "entities": [{"id": f"T{i}", "label": f"thing {i}", "type": "thing"} for i in range(12)],
             "edges": [{"src": f"T{i}", "rel": "r", "dst": f"T{i + 1}"} for i in range(11)]}
    kg = load_kg(_write(tmp_path, graph))
    assert kg.type_of("T3") == "thing" and len(kg.entities_of_type("thing")) == 12


def test_json_syntax_error_has_line(tmp_path):
    path = tmp_path / "kg.json"
    path.write_text('{\n"version": "1",\n"domain": x\n}\n')
    with pytest.raises(DataFileError) as exc:
        load_kg(path)
    assert exc.value.line == 3


def test_neighborhood_starts_with_path(tiny_kg):
    hood = tiny_kg.neighborhood(["ClockSkew", "NTPSync"], radius=1)
    assert hood[:2] == ["ClockSkew", "NTPSync"]
    assert "TLSHandshakeError" in hood and "chronyc" in hood


def test_the_second_domain_graph_branches_like_real_graphs():
    """data/food/kg.json: real cooking and nutrition facts of another domain, with types of its own,
    branching (mean fan-out >= 1.8) at the size the product is built for."""
    from pathlib import Path

    from library.graph.check import check_graph

    report = check_graph(load_kg(Path(__file__).resolve().parents[1] / "data" / "food" / "kg.json"))
    assert report["entities"] >= 250 and report["edges"] >= 700 and report["mean_fanout"] >= 1.8
    assert {"dish", "ingredient", "nutrient"} <= set(report["types"])
    assert report["chains"]["4"]["1"] < report["chains"]["4"]["4"]  # its long chains branch
