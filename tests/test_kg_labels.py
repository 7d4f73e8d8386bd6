"""Label rules of the graph loader (library/graph/kg.py) and the matcher over odd labels
(library/scoring/matching.py): Unicode form, surrounding spaces, length, completion-format
markers, empty graphs and over-nested JSON ("Hardening II")."""

from __future__ import annotations

import json
import unicodedata
import random
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from library.errors import DataFileError
from library.graph.kg import MAX_LABEL_CHARS, Entity, KnowledgeGraph, load_kg, normalise_label
from library.scoring.matching import EntityMatcher, _trie_pattern, extract_claims

REPO = Path(__file__).resolve().parents[1]
NFC_CAFE, NFD_CAFE = "caf\u00e9", "cafe\u0301"


def _graph(*labels: str, edges: bool = True) -> dict:
    """A chain E0 -r-> E1 -r-> ... with the given labels."""
    return {"version": "1", "domain": "d", "relations": [{"id": "r", "label": "leads to"}],
            "entities": [{"id": f"E{i}", "label": label, "type": "t"} for i, label in enumerate(labels)],
            "edges": [{"src": f"E{i}", "rel": "r", "dst": f"E{i + 1}"} for i in range(len(labels) - 1)] if edges else []}


def _write(tmp_path: Path, graph: dict) -> Path:
    """kg.json with one item a line, so a line number names one item."""
    lines = ["{", f'"version": {json.dumps(graph["version"])}, "domain": {json.dumps(graph["domain"])},']
    for section in ("entities", "relations", "edges"):
        items = [json.dumps(item) for item in graph[section]]
        lines += [f'"{section}": [', ",\n".join(items), "]" + ("," if section != "edges" else "")]
    path = tmp_path / "kg.json"
    path.write_text("\n".join(lines + ["}"]) + "\n", encoding="utf-8")
    return path


def _load_error(tmp_path: Path, graph: dict) -> DataFileError:
    path = _write(tmp_path, graph)
    with pytest.raises(DataFileError) as exc:
        load_kg(path)
    assert str(path) in str(exc.value)
    return exc.value


def _line(err: DataFileError) -> str:
    return Path(err.path).read_text(encoding="utf-8").splitlines()[err.line - 1]


def test_composed_and_decomposed_labels_are_one_label(tmp_path):
    err = _load_error(tmp_path, _graph(NFC_CAFE, "menu", NFD_CAFE))
    assert "'E2'" in str(err) and "is already used by 'E0'" in str(err)
    assert "Unicode form" in str(err)
    assert '"E2"' in _line(err)  # the line of the second spelling


def test_labels_are_stored_nfc_and_trimmed(tmp_path):
    kg = load_kg(_write(tmp_path, _graph(f"  {NFD_CAFE} menu ", "clock skew\t", "x")))
    assert kg.label("E0") == f"{NFC_CAFE} menu" and kg.label("E1") == "clock skew"
    assert kg.entity_by_label(f"{NFC_CAFE} menu") == "E0"
    assert kg.entity_by_label(f"{NFD_CAFE} menu ") == "E0"  # questions written before the fix
    assert normalise_label(f" {NFD_CAFE} ") == NFC_CAFE


def test_labels_differing_only_in_case_or_spacing_clash(tmp_path):
    err = _load_error(tmp_path, _graph("clock skew", "x", "Clock  Skew"))
    assert "is already used by 'E0'" in str(err) and err.line is not None


def _question_with_labels_ending(suffix: str):
    """data/kg.json with ``suffix`` added to the labels on the first keyed eval question's path,
    and that question made again over it."""
    from library.contracts import Question
    from library.questions.multiple_choice import make_question

    graph = json.loads((REPO / "data" / "kg.json").read_text())
    q0 = Question.model_validate_json((REPO / "data" / "keyed" / "eval.jsonl").read_text().splitlines()[0])
    for ent in graph["entities"]:
        if ent["id"] in q0.path_star.entities:
            ent["label"] += suffix
    kg = KnowledgeGraph.from_dict(graph)
    return kg, make_question(kg, q0.path_star, random.Random(0), "eval", 0, step_order="keyed")


def test_a_trailing_space_does_not_reach_prompts_or_traces():
    """A label with a trailing space wrote doubled spaces into every question and TRACE naming it."""
    from library.scoring.reward import RewardModel

    kg, q = _question_with_labels_ending(" ")
    assert "  " not in q.question and "  " not in q.ref.completion
    scored = RewardModel.from_preset(kg, "paper+edges").score(q, q.ref.completion)
    assert scored.correct and scored.reward.edge_hits == q.hop_len


def test_a_decomposed_label_in_a_completion_matches():
    kg = KnowledgeGraph.from_dict(_graph(f"{NFC_CAFE} menu", "Cr\u00e8me br\u00fbl\u00e9e"))
    text = "The CAFE\u0301 menu leads to cre\u0300me bru\u0302le\u0301e."
    assert extract_claims(kg, text) == [("E0", "r", "E1")]
    matcher = EntityMatcher(kg)
    assert [text[a:b] for a, b, _ in matcher.spans(text)] == ["CAFE\u0301 menu", "cre\u0300me bru\u0302le\u0301e"]


def test_a_decomposed_trace_earns_the_reward_of_the_composed_one():
    from library.scoring.reward import RewardModel

    kg, q = _question_with_labels_ending(" caf\u00e9")
    reward = RewardModel.from_preset(kg, "paper+edges")
    composed = reward.score(q, q.ref.completion)
    decomposed = reward.score(q, unicodedata.normalize("NFD", q.ref.completion))
    assert composed.correct and composed.reward.edge_hits == q.hop_len
    assert decomposed.reward == composed.reward


def test_a_long_label_is_refused_at_load(tmp_path):
    err = _load_error(tmp_path, _graph("a", "x" * 5000, "c"))
    assert f"label of 'E1' is 5000 characters long" in str(err) and f"at most {MAX_LABEL_CHARS}" in str(err)
    assert '"E1"' in _line(err)


def test_the_committed_graphs_already_follow_the_label_rules():
    """Loading changes none of their labels, so questions and stored rewards stay as they are."""
    for path in (REPO / "data" / "kg.json", REPO / "data" / "food" / "kg.json"):
        raw = json.loads(path.read_text())
        kg = load_kg(path)
        assert [e["label"] for e in raw["entities"]] == [e.label for e in kg.entities.values()]
        assert [r["label"] for r in raw["relations"]] == [r.label for r in kg.relations.values()]
        assert max(len(e.label) for e in kg.entities.values()) * 4 < MAX_LABEL_CHARS


def test_the_matcher_takes_a_1000_character_label_without_recursion():
    """The trie was emitted recursively: a 500-character label raised RecursionError in `kgr train`."""
    long = "x" * 999 + "y"
    kg = SimpleNamespace(entities={"L": Entity(id="L", label=long, type="t"), "S": Entity(id="S", label="x", type="t")})
    matcher = EntityMatcher(kg)
    assert matcher.find(f"see {long.upper()}, then x") == ["L", "S"]
    # Aliases that nest 1000 deep (each a prefix of the next) compile too, longest match first.
    nested = re.compile(rf"(?<!\w)(?:{_trie_pattern(['a' * n for n in range(1, 1001)] + ['a' * 700 + 'b'])})(?!\w)")
    assert nested.fullmatch("a" * 1000) and nested.fullmatch("a" * 700 + "b") and not nested.fullmatch("a" * 1001)
    assert nested.search("a" * 400 + " a").span() == (0, 400)


@pytest.mark.parametrize("label, marker", [
    ("disk full [Q] ANSWER: B", "[Q]"),
    ("disk full ANSWER: B", "ANSWER:"),
    ("**trace** : disk", "trace** :"),
    ("disk answer\uff1a B", "answer\uff1a"),
    ("the last [?]", "[?]"),
    ("disk full (B)", "(B)"),
    ("disk\nfull", "\n"),
])
def test_labels_holding_completion_format_markers_are_refused(tmp_path, label, marker):
    err = _load_error(tmp_path, _graph("a", label, "c"))
    assert "'E1'" in str(err) and f"contains {marker!r}" in str(err) and "reword the label" in str(err)
    assert '"E1"' in _line(err)


def test_ordinary_words_near_markers_load(tmp_path):
    kg = load_kg(_write(tmp_path, _graph("trace system calls", "answer rate (per s)", "vitamin A [1]")))
    assert kg.label("E0") == "trace system calls"


def test_a_relation_label_holding_a_marker_is_refused(tmp_path):
    graph = _graph("a", "b")
    graph["relations"][0]["label"] = "leads to [K]"
    err = _load_error(tmp_path, graph)
    assert "relation label 'leads to [K]' of 'r' contains '[K]'" in str(err) and '"r"' in _line(err)


@pytest.mark.parametrize("graph, message", [
    ({"version": "1", "domain": "d", "entities": [], "relations": [], "edges": []}, "has no entities"),
    (_graph("a", "b", edges=False), "has no edges: nothing to ask questions about"),
])
def test_an_empty_graph_is_one_sentence(tmp_path, graph, message):
    err = _load_error(tmp_path, graph)
    assert message in str(err)
    assert str(err).endswith("nothing to ask questions about")


def test_deeply_nested_json_is_one_sentence(tmp_path):
    path = tmp_path / "kg.json"
    path.write_text('{"version": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(DataFileError) as exc:
        load_kg(path)
    assert str(exc.value) == f"{path}: JSON nested too deeply to read"
