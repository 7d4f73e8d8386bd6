"""`kgr kg import` (library/graph/formats/) and kg.json's JSON Schema (library/graph/kg.schema.json):
each format round-trips a graph, clashes are named by the rows that cause them, and the schema,
the pydantic models and the loader agree on what a kg.json is."""

from __future__ import annotations

import csv
import json
from importlib.resources import files
from pathlib import Path

import networkx as nx
import pytest
from rdflib import Graph, Literal, Namespace
from rdflib.namespace import RDF, RDFS
from typer.testing import CliRunner

from library.cli import app
from library.errors import DataFileError
from library.graph.formats import detect_format, import_graph, write_kg
from library.graph.kg import KGFile, KnowledgeGraph, load_kg

REPO = Path(__file__).resolve().parents[1]
GRAPHS = [REPO / "data" / "kg.json", REPO / "data" / "food" / "kg.json"]
EX = Namespace("http://example.org/kg/")
TYPE = Namespace("http://example.org/type/")


# ------------------------------------------------------------------ writers: a kg.json as triples
def write_table(kg: dict, path: Path, delimiter: str = ",") -> Path:
    ents = {e["id"]: e for e in kg["entities"]}
    rels = {r["id"]: r["label"] for r in kg["relations"]}
    with path.open("w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle, delimiter=delimiter)
        out.writerow(["head", "head_label", "head_type", "relation", "relation_label", "tail", "tail_label", "tail_type"])
        for e in kg["edges"]:
            h, t = ents[e["src"]], ents[e["dst"]]
            out.writerow([h["id"], h["label"], h["type"], e["rel"], rels[e["rel"]], t["id"], t["label"], t["type"]])
    return path


def write_rdf(kg: dict, path: Path, fmt: str) -> Path:
    g = Graph()
    g.bind("ex", EX)
    g.bind("type", TYPE)
    for e in kg["entities"]:
        cls = TYPE[e["type"].replace(" ", "_")]
        g.add((EX[e["id"]], RDFS.label, Literal(e["label"])))
        g.add((EX[e["id"]], RDF.type, cls))
        g.add((cls, RDFS.label, Literal(e["type"])))
    for r in kg["relations"]:
        g.add((EX[r["id"]], RDFS.label, Literal(r["label"])))
    for e in kg["edges"]:
        g.add((EX[e["src"]], EX[e["rel"]], EX[e["dst"]]))
    g.serialize(str(path), format=fmt, encoding="utf-8")
    return path


def write_graphml(kg: dict, path: Path) -> Path:
    g = nx.MultiDiGraph()
    rels = {r["id"]: r["label"] for r in kg["relations"]}
    for e in kg["entities"]:
        g.add_node(e["id"], label=e["label"], type=e["type"])
    for e in kg["edges"]:
        g.add_edge(e["src"], e["dst"], relation=e["rel"], relation_label=rels[e["rel"]])
    nx.write_graphml(g, str(path))
    return path


def canon(kg: dict) -> tuple:
    """A graph as sets: file order differs between formats (RDF has none)."""
    return ({(e["id"], e["label"], e["type"]) for e in kg["entities"]},
            {(r["id"], r["label"]) for r in kg["relations"]},
            {(e["src"], e["rel"], e["dst"]) for e in kg["edges"]})


WRITERS = {
    "kg.csv": lambda kg, p: write_table(kg, p),
    "kg.tsv": lambda kg, p: write_table(kg, p, "\t"),
    "kg.ttl": lambda kg, p: write_rdf(kg, p, "turtle"),
    "kg.nt": lambda kg, p: write_rdf(kg, p, "nt"),
    "kg.rdf": lambda kg, p: write_rdf(kg, p, "xml"),
    "kg.graphml": write_graphml,
}


def _import(tmp_path: Path, name: str, text: str, **options) -> dict:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return import_graph(path, **options).kg


def _refused(tmp_path: Path, name: str, text: str, **options) -> DataFileError:
    with pytest.raises(DataFileError) as exc:
        _import(tmp_path, name, text, **options)
    return exc.value


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("name", list(WRITERS))
def test_each_format_round_trips_a_graph(tmp_path, tiny_kg_dict, name):
    source = WRITERS[name](tiny_kg_dict, tmp_path / name)
    imported = import_graph(source, domain="software-troubleshooting")
    out = tmp_path / "out" / "kg.json"
    write_kg(imported, out)
    kg = load_kg(out)  # what `kgr data` reads
    assert canon(json.loads(out.read_text())) == canon(tiny_kg_dict)
    assert kg.domain == "software-troubleshooting" and len(kg.edges) == len(tiny_kg_dict["edges"])
    assert not imported.skipped


@pytest.mark.parametrize("name", ["kg.csv", "kg.ttl", "kg.nt", "kg.graphml"])
def test_the_food_graph_exported_as_triples_comes_back_the_same(tmp_path, name):
    food = json.loads(GRAPHS[1].read_text())
    imported = import_graph(WRITERS[name](food, tmp_path / name))
    assert canon(imported.kg) == canon(food)  # ids, labels, types, relations and edges


def test_written_layout_is_the_shipped_one(tmp_path):
    """One item a line, as data/kg.json: the shipped graph written back is byte for byte itself."""
    shipped = json.loads(GRAPHS[0].read_text())
    imported = import_graph(write_table(shipped, tmp_path / "t.csv"), domain=shipped["domain"])
    imported.kg["version"] = shipped["version"]
    for section in ("entities", "relations"):  # a table lists them in the order its rows first name them
        order = [e["id"] for e in shipped[section]]
        imported.kg[section].sort(key=lambda item: order.index(item["id"]))
    write_kg(imported, tmp_path / "kg.json")
    assert (tmp_path / "kg.json").read_text() == GRAPHS[0].read_text()


def test_a_table_of_names_gets_ids_made_from_them(tmp_path):
    kg = _import(tmp_path, "drugs.csv", "Source,Relation,Target,Source Type,Target Type\n"
                                        "olive oil,made from,olives,ingredient,ingredient\n"
                                        "olive-oil,made from,olives,ingredient,ingredient\n")
    assert [(e["id"], e["label"]) for e in kg["entities"]] == [
        ("OliveOil", "olive oil"), ("Olives", "olives"), ("OliveOil_2", "olive-oil")]
    assert kg["relations"] == [{"id": "made_from", "label": "made from"}]


def test_semicolon_csv_bom_and_quoted_cells(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes("\ufeffhead;relation;tail;head_type;tail_type\n"
                     '"salt; fine";source of;sodium;ingredient;nutrient\n'.encode())
    kg = import_graph(path).kg
    assert kg["entities"][0] == {"id": "SaltFine", "label": "salt; fine", "type": "ingredient"}


def test_duplicates_and_self_loops_are_skipped_and_counted(tmp_path):
    imported = import_graph(write_table({
        "entities": [{"id": i, "label": i.lower(), "type": "t"} for i in "AB"],
        "relations": [{"id": "r", "label": "leads to"}],
        "edges": [{"src": "A", "rel": "r", "dst": "B"}, {"src": "A", "rel": "r", "dst": "B"},
                  {"src": "B", "rel": "r", "dst": "B"}]}, tmp_path / "t.csv"))
    assert imported.skipped == {"duplicate edge (kept once)": ["row 3"],
                                "self-loop (a question never walks back to the entity it stands on)": ["row 4"]}
    assert len(imported.kg["edges"]) == 1
    assert "skipped duplicate edge (kept once): 1 (row 3)" in imported.summary()


# ------------------------------------------------------------------ errors name the rows
def test_two_ids_for_one_label_names_both_rows(tmp_path):
    err = _refused(tmp_path, "t.csv", "head,head_label,relation,tail,tail_label\n"
                                      "ASPIRIN,Aspirin,treats,Headache,headache\n"
                                      "aspirin_1,aspirin,treats,Fever,fever\n", default_type="thing")
    assert str(err).startswith(f"{tmp_path / 't.csv'}: rows 2 and 3 give 'Aspirin' and 'aspirin' two ids: "
                               "ASPIRIN, aspirin_1; labels must differ by more than case")


@pytest.mark.parametrize("rows, message", [
    ("a,a1,r,b,b1\na,a2,r,c,c1\n", "rows 2 and 3 give entity 'a' two labels: 'a1', 'a2'"),
    ("a,a1,r,b,b1\nc,c1,r,b,b1\nd,B1,r,e,e1\n", "rows 2 and 4 give 'b1' and 'B1' two ids: b, d"),
])
def test_clashes_name_their_rows(tmp_path, rows, message):
    err = _refused(tmp_path, "t.csv", "head,head_label,relation,tail,tail_label\n" + rows, default_type="t")
    assert message in str(err)


def test_missing_types_are_named_with_their_rows(tmp_path):
    text = "subject,predicate,object,subject_type\naspirin,treats,headache,drug\nibuprofen,treats,fever,\n"
    err = _refused(tmp_path, "t.csv", text)
    assert ("3 of 4 entities have no type: 'headache' (row 2); 'ibuprofen' (row 3); 'fever' (row 3); "
            "give their head_type or tail_type cells, or pass --default-type TYPE") in str(err)
    kg = _import(tmp_path, "t.csv", text, default_type="thing")
    assert [e["type"] for e in kg["entities"]] == ["drug", "thing", "thing", "thing"]


def test_a_type_spelled_two_ways_and_two_types_for_one_entity(tmp_path):
    err = _refused(tmp_path, "t.csv", "h,r,t,h_type,t_type\na,r,b,Drug,x\nc,r,d,drug,x\n")
    assert "rows 2 and 3 spell one type two ways: 'Drug', 'drug'; one type, one spelling" in str(err)
    err = _refused(tmp_path, "t.csv", "h,r,t,h_type,t_type\na,r,b,drug,x\na,r,c,food,x\n")
    assert "rows 2 and 3 give entity 'a' two types: 'drug', 'food'" in str(err)


def test_missing_columns_say_which_were_found(tmp_path):
    err = _refused(tmp_path, "t.csv", "from,to,weight\na,b,1\n")
    assert err.line == 1 and "no relation column: the header row names 'from', 'to', 'weight'" in str(err)


@pytest.mark.parametrize("text, line, message", [
    ("head,relation,tail\na,r,b\nc,,d\n", 3, "the 'relation' cell is empty"),
    ("head,relation,tail\na,r,b,extra\n", 2, "4 cells, but the header names 3 columns"),
])
def test_bad_rows_name_their_line(tmp_path, text, line, message):
    err = _refused(tmp_path, "t.csv", text, default_type="t")
    assert err.line == line and message in str(err)


def test_what_the_loader_refuses_is_named_by_its_rows(tmp_path):
    err = _refused(tmp_path, "t.csv", "head,relation,tail\na,r,b\nb,r,ANSWER: c\n", default_type="t")
    assert err.line == 3 and str(err).startswith(f"{tmp_path / 't.csv'}:3: label 'ANSWER: c'")


def test_nothing_to_import_says_what_was_skipped(tmp_path):
    err = _refused(tmp_path, "t.ttl", '@prefix ex: <http://x.org/> .\nex:a ex:weight "3" .\n')
    assert "found no entities to import (skipped: 1 literal value" in str(err)


# ------------------------------------------------------------------ RDF
TURTLE = """@prefix ex: <http://example.org/> .
@prefix other: <http://other.org/> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
@prefix owl: <http://www.w3.org/2002/07/owl#> .
ex:Drug a owl:Class ; rdfs:label "drug" .
ex:treats rdfs:label "is a treatment for" .
ex:aspirin a ex:Drug, ex:Medicine ; rdfs:label "aspirin", "Aspirin"@de ; ex:mass "180.16" ; ex:treats ex:headache .
ex:paracetamol a ex:Drug ; rdfs:label "paracetamol" ; ex:treats ex:headache, other:fever .
ex:headache a ex:Symptom ; rdfs:label "headache" ; ex:seeAlso ex:unlabelled .
other:headache a ex:Symptom ; rdfs:label "tension headache" .
other:fever a ex:Symptom ; rdfs:label "fever" .
"""


def test_rdf_labels_types_and_edges(tmp_path):
    path = tmp_path / "drugs.ttl"
    path.write_text(TURTLE)
    imported = import_graph(path)
    ents = {e["id"]: (e["label"], e["type"]) for e in imported.kg["entities"]}
    # ex:Drug is a class and ex:treats a property, not entities; other:headache's local name is
    # taken by ex:headache (sorted first), so it gets _2
    assert ents == {"aspirin": ("aspirin", "drug"), "headache": ("headache", "Symptom"),
                    "paracetamol": ("paracetamol", "drug"), "fever": ("fever", "Symptom"),
                    "headache_2": ("tension headache", "Symptom")}
    assert imported.kg["relations"] == [{"id": "treats", "label": "is a treatment for"}]
    assert canon(imported.kg)[2] == {("aspirin", "treats", "headache"), ("paracetamol", "treats", "headache"),
                                     ("paracetamol", "treats", "fever")}
    assert {what: len(p) for what, p in imported.skipped.items()} == {
        "extra label (one kept: untagged, then English, then first in order)": 1,
        "extra type (one kept: the type most entities share)": 1,
        "literal value (of a predicate other than rdfs:label)": 1,
        "triple with an end that is no entity (no rdfs:label, or a class or property)": 1}
    assert "renamed (id taken by another): 'http://other.org/headache' (other:headache) -> headache_2" in imported.notes


def test_rdf_untyped_resources_are_named(tmp_path):
    err = _refused(tmp_path, "t.nt", "<http://x.org/a> <http://www.w3.org/2000/01/rdf-schema#label> \"a\" .\n"
                                     "<http://x.org/b> <http://www.w3.org/2000/01/rdf-schema#label> \"b\" .\n"
                                     "<http://x.org/a> <http://x.org/p> <http://x.org/b> .\n")
    assert ("2 of 2 entities have no type: 'a' (<http://x.org/a>); 'b' (<http://x.org/b>); "
            "give rdf:type triples for them, or pass --default-type TYPE") in str(err)


def test_bad_turtle_names_its_line(tmp_path):
    err = _refused(tmp_path, "t.ttl", '@prefix ex: <http://x.org/> .\nex:a ex:p ex:b .\nex:a ex:p "x\n')
    assert err.line == 3 and "cannot read it as Turtle" in str(err)


# ------------------------------------------------------------------ GraphML
def _graphml(tmp_path: Path, g: nx.Graph) -> Path:
    path = tmp_path / "g.graphml"
    nx.write_graphml(g, str(path))
    return path


def test_graphml_relation_attribute_by_name_or_option(tmp_path):
    g = nx.DiGraph()
    g.add_node("a", type="t")
    g.add_node("b", type="t", weight=2)
    g.add_edge("a", "b", kind="leads_to", weight=0.5)
    with pytest.raises(DataFileError, match=r"no edge attribute names the relation \(looked for relation, rel, "
                                            r"predicate, label, type; the edges carry kind, weight\)"):
        import_graph(_graphml(tmp_path, g))
    imported = import_graph(_graphml(tmp_path, g), relation_attr="kind")
    assert imported.kg["edges"] == [{"src": "A", "rel": "leads_to", "dst": "B"}]
    assert imported.kg["relations"] == [{"id": "leads_to", "label": "leads to"}]
    assert imported.notes == ["ignored node attributes: weight", "ignored edge attributes: weight"]


def test_graphml_names_edges_without_a_relation_and_refuses_undirected(tmp_path):
    g = nx.MultiDiGraph()
    g.add_nodes_from("abc", type="t")
    g.add_edge("a", "b", relation="r")
    g.add_edge("b", "c")
    with pytest.raises(DataFileError, match=r"1 of 2 edges have no 'relation' attribute .*: edge b -> c"):
        import_graph(_graphml(tmp_path, g))
    with pytest.raises(DataFileError, match="the graph is undirected"):
        import_graph(_graphml(tmp_path, nx.Graph(g)))


# ------------------------------------------------------------------ formats and the command line
def test_format_by_extension_content_or_option(tmp_path):
    empty = {"entities": [], "relations": [], "edges": []}
    ml, rdf = write_graphml(empty, tmp_path / "g.xml"), write_rdf(empty, tmp_path / "r.xml", "xml")
    assert (detect_format(ml), detect_format(rdf), detect_format("x.TSV"), detect_format("x.txt", "ttl")) == (
        "graphml", "rdfxml", "tsv", "turtle")
    with pytest.raises(ValueError, match=r"cannot tell the format from '.txt'.*pass --format"):
        detect_format("x.txt")


def test_cli_imports_and_refuses(tmp_path, tiny_kg_dict):
    source = write_table(tiny_kg_dict, tmp_path / "t.csv")
    out = tmp_path / "kg.json"
    result = CliRunner().invoke(app, ["kg", "import", str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"{source} (CSV): 14 entities, 18 edges, 6 relations, 5 types" in result.output
    assert f"wrote {out}; next: kgr kg check {out}" in result.output
    assert canon(json.loads(out.read_text())) == canon(tiny_kg_dict)
    again = CliRunner().invoke(app, ["kg", "import", str(source), "--out", str(out)])
    assert again.exit_code == 2 and "exists; pass --force" in again.output
    bad = tmp_path / "bad.csv"
    bad.write_text("head,relation,tail\na,r,b\n")
    result = CliRunner().invoke(app, ["kg", "import", str(bad), "--out", str(tmp_path / "x.json")])
    assert result.exit_code == 2 and "have no type" in "".join(result.output.split("\n"))
    assert not (tmp_path / "x.json").exists()


# ------------------------------------------------------------------ the JSON Schema
SCHEMA = json.loads(files("library.graph").joinpath("kg.schema.json").read_text(encoding="utf-8"))


def _validator():
    """jsonschema is a dev dependency (`make test` installs it; missing, these tests fail, never skip)."""
    import jsonschema

    return jsonschema.Draft202012Validator


def _schema_ok(obj: dict) -> bool:
    return _validator()(SCHEMA).is_valid(obj)


def test_schema_is_draft_2020_12_shipped_as_package_data():
    _validator().check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert '"library.graph" = ["kg.schema.json"]' in (REPO / "pyproject.toml").read_text()


@pytest.mark.parametrize("path", GRAPHS, ids=lambda p: p.parent.name)
def test_the_committed_graphs_validate(path):
    _validator()(SCHEMA).validate(json.loads(path.read_text()))


def test_schema_has_the_models_fields():
    """Every model's fields, required ones and types, and extra fields refused, as in library/graph/kg.py."""
    models = KGFile.model_json_schema()
    pairs = [(SCHEMA, models)] + [(SCHEMA["$defs"][name], models["$defs"][model])
                                  for name, model in (("Entity", "Entity"), ("Relation", "Relation"),
                                                      ("Edge", "PathEdge"))]
    for ours, theirs in pairs:
        assert ours["additionalProperties"] is theirs["additionalProperties"] is False
        assert list(ours["properties"]) == list(theirs["properties"])
        assert sorted(ours["required"]) == sorted(theirs["required"])
        for name, prop in ours["properties"].items():
            assert prop["type"] == theirs["properties"][name]["type"], name
            assert prop["description"], name


def _mutations():
    """(name, change): kg.json documents the schema refuses."""
    def ent(**kw):
        return lambda kg: kg["entities"][0].update(kw)

    return [
        ("name instead of label", lambda kg: kg["entities"][0].update(name=kg["entities"][0].pop("label"))),
        ("extra field", ent(note="x")),
        ("extra top-level field", lambda kg: kg.update(author="me")),
        ("missing type", lambda kg: kg["entities"][0].pop("type")),
        ("number as id", ent(id=3)),
        ("blank label", ent(label="  ")),
        ("blank type", ent(type="\t")),
        ("blank id", ent(id=" ")),
        ("id too long", ent(id="x" * 201)),
        ("blank relation label", lambda kg: kg["relations"][0].update(label="")),
        ("blank relation id", lambda kg: kg["relations"][0].update(id="")),
        ("no edges", lambda kg: kg.update(edges=[])),
        ("no entities", lambda kg: kg.update(entities=[])),
        ("version as number", lambda kg: kg.update(version=2.0)),
        ("edge without dst", lambda kg: kg["edges"][0].pop("dst")),
    ]


@pytest.mark.parametrize("name, change", _mutations(), ids=[m[0] for m in _mutations()])
def test_what_the_schema_refuses_the_loader_refuses(tmp_path, tiny_kg_dict, name, change):
    assert _schema_ok(tiny_kg_dict)
    change(tiny_kg_dict)
    assert not _schema_ok(tiny_kg_dict)
    path = tmp_path / "kg.json"
    path.write_text(json.dumps(tiny_kg_dict))
    with pytest.raises(DataFileError):
        load_kg(path)


@pytest.mark.parametrize("change, message", [
    (lambda kg: kg["entities"][0].update(id=" "), "entities[0]: entity 'TLS handshake error' has an empty id"),
    (lambda kg: kg["relations"][0].update(id=""), "relations[0]: relation 'is caused by' has an empty id"),
    (lambda kg: kg["relations"][0].update(label=" "), "relations[0]: relation 'caused_by' has an empty label"),
])
def test_the_loader_refuses_blank_ids_and_relation_labels_as_the_schema_does(tiny_kg_dict, change, message):
    """The loader accepted these before the schema was written down; no graph can use them."""
    change(tiny_kg_dict)
    with pytest.raises(DataFileError) as exc:
        KnowledgeGraph.from_dict(tiny_kg_dict)
    assert str(exc.value) == f"<memory>: {message}"


@pytest.mark.parametrize("change, message", [
    (lambda kg: kg["entities"].append({"id": "X", "label": "Clock  Skew", "type": "cause"}), "already used"),
    (lambda kg: kg["edges"].append({"src": "ClockSkew", "rel": "fixed_by", "dst": "ClockSkew"}), "self-loop"),
    (lambda kg: kg["edges"].append(dict(kg["edges"][0])), "duplicate edge"),
    (lambda kg: kg["entities"].append({"id": "Y", "label": "y [Q]", "type": "cause"}), r"contains '\[Q\]'"),
])
def test_rules_beyond_the_schema_are_the_loaders(tiny_kg_dict, change, message):
    """Rules across items and on label contents: the schema lets them through, the loader does not,
    and the schema's description lists them."""
    change(tiny_kg_dict)
    assert _schema_ok(tiny_kg_dict)
    with pytest.raises(DataFileError, match=message):
        KnowledgeGraph.from_dict(tiny_kg_dict)
    for rule in ("labels unique", "self-loop", "duplicate edge", "markers"):
        assert rule in SCHEMA["description"]


def test_imports_validate_against_the_schema(tmp_path):
    kg = _import(tmp_path, "drugs.ttl", TURTLE)
    assert _schema_ok(kg)


def test_an_unclosed_quote_names_the_row_where_it_starts(tmp_path):
    from library.errors import DataFileError
    from library.graph.formats import import_graph

    path = tmp_path / "bad.csv"
    path.write_text("head,relation,tail\na,\"r,b\n" + "".join(f"x{i},r,y{i}\n" for i in range(20000)))
    with pytest.raises(DataFileError, match="unclosed quote") as err:
        import_graph(path)
    assert err.value.line == 2
