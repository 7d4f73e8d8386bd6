"""Import a graph that comes as triples (``kgr kg import FILE --out kg.json``): CSV or TSV rows,
RDF (Turtle, N-Triples, RDF/XML) or GraphML, each read by its own module, all assembled and
validated alike (``assemble.py``), then written in the shipped graphs' layout.

>>> detect_format("drugs.ttl"), detect_format("g.xml", "nt")
('turtle', 'ntriples')
>>> print(kg_text({"version": "1.0", "domain": "d", "entities": [{"id": "A", "label": "a", "type": "t"}],
...                "relations": [], "edges": []}))
{
  "version": "1.0",
  "domain": "d",
  "entities": [
    {"id": "A", "label": "a", "type": "t"}
  ],
  "relations": [],
  "edges": []
}
<BLANKLINE>
"""

from __future__ import annotations

import json
from pathlib import Path

from library.errors import DataFileError
from library.graph.formats.assemble import Imported, assemble
from library.graph.formats.graphml import read_graphml
from library.graph.formats.rdf import read_rdf  # rdflib itself is imported only when an RDF file is read
from library.graph.formats.table import read_table_file
from library.jsonl import atomic_write_text

#: Formats by the name ``--format`` takes, with the name the summary gives each.
FORMATS = {"csv": "CSV", "tsv": "TSV", "turtle": "Turtle", "ntriples": "N-Triples", "rdfxml": "RDF/XML",
           "graphml": "GraphML"}
_ALIASES = {"ttl": "turtle", "nt": "ntriples", "n-triples": "ntriples", "rdf": "rdfxml", "owl": "rdfxml",
            "rdf/xml": "rdfxml", "xml-rdf": "rdfxml"}
EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".ttl": "turtle", ".nt": "ntriples",
              ".rdf": "rdfxml", ".owl": "rdfxml", ".graphml": "graphml"}

__all__ = ["FORMATS", "Imported", "detect_format", "import_graph", "kg_text", "write_kg"]


def detect_format(path: str | Path, fmt: str | None = None) -> str:
    """The format to read ``path`` as: ``fmt`` where given, else by its extension; a ``.xml``
    file is GraphML or RDF/XML by its root element."""
    if fmt is not None:
        name = _ALIASES.get(fmt.lower(), fmt.lower())
        if name not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
        return name
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".xml" and path.is_file():
        head = path.read_bytes()[:4096]
        if b"<graphml" in head:
            return "graphml"
        if b"RDF" in head and b"http://www.w3.org/1999/02/22-rdf-syntax-ns#" in head:
            return "rdfxml"
    if suffix not in EXTENSIONS:
        raise ValueError(f"{path}: cannot tell the format from {suffix or 'no extension'!r} (known: "
                         f"{', '.join(EXTENSIONS)}, .xml holding GraphML or RDF/XML); pass --format "
                         f"{'|'.join(FORMATS)}")
    return EXTENSIONS[suffix]


def import_graph(path: str | Path, fmt: str | None = None, *, default_type: str | None = None,
                 domain: str | None = None, relation_attr: str | None = None) -> Imported:
    """Read ``path`` and build the kg.json it holds (not written: see :func:`write_kg`); raises
    DataFileError naming the file and the rows, nodes or triples at fault, ValueError for a bad
    option."""
    path = Path(path)
    fmt = detect_format(path, fmt)
    if relation_attr is not None and fmt != "graphml":
        raise ValueError("--relation-attr is for GraphML; a table has a relation column, RDF its predicates")
    if not path.exists():
        raise DataFileError(path, "file not found")
    if path.is_dir():
        raise DataFileError(path, "is a folder; pass the file to import")
    if fmt in ("csv", "tsv"):
        draft = read_table_file(path, "," if fmt == "csv" else "\t")
    elif fmt == "graphml":
        draft = read_graphml(path, relation_attr)
    else:
        draft = read_rdf(path, fmt)
    return assemble(draft, default_type=default_type, domain=domain)


def kg_text(kg: dict) -> str:
    """kg.json text in the shipped graphs' layout: one entity, relation or edge a line, so a
    loader error's line number names one item and a diff shows one changed fact a line."""
    def block(name: str, items: list[dict]) -> str:
        rows = ",\n".join("    " + json.dumps(item, ensure_ascii=False) for item in items)
        return f'  "{name}": [\n{rows}\n  ]' if items else f'  "{name}": []'

    return "\n".join(["{", f'  "version": {json.dumps(kg["version"], ensure_ascii=False)},',
                      f'  "domain": {json.dumps(kg["domain"], ensure_ascii=False)},',
                      block("entities", kg["entities"]) + ",", block("relations", kg["relations"]) + ",",
                      block("edges", kg["edges"]), "}"]) + "\n"


def write_kg(imported: Imported, out: str | Path) -> None:
    """Write the imported graph to ``out`` atomically: a killed import leaves no half file."""
    atomic_write_text(out, kg_text(imported.kg))
