"""RDF (Turtle, N-Triples, RDF/XML, read by rdflib): labelled resources become entities.

Each resource with an ``rdfs:label`` is an entity, unless it is a class (the object of an
``rdf:type``, or typed ``rdfs:Class``/``owl:Class``) or a property (used as a predicate, or typed
as one). Its id is its IRI's local name (kept as written where it is a plain id, else made from
it; a blank node's is made from its label); its type is the name of its ``rdf:type`` (the class's
``rdfs:label``, else its local name; of several, the one most entities share). Every other triple
between two entities is an edge, its relation named by the predicate's local name and labelled by
its ``rdfs:label`` (else its local name in words). Literals other than labels, and triples with an
end that is no entity, are skipped and counted. Nothing in RDF is ordered, so everything is
read sorted by IRI: the same file gives the same kg.json.

>>> local_name("http://example.org/drug#Aspirin"), local_name("http://x.org/a/b/"), local_name("urn:isbn:0451")
('Aspirin', 'b', '0451')
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

from library.errors import DataFileError
from library.graph.formats.assemble import Draft, humanize

#: rdflib's name for each format this reads, and the name the summary gives it.
RDF_FORMATS = {"turtle": "Turtle", "ntriples": "N-Triples", "rdfxml": "RDF/XML"}
_RDFLIB_NAME = {"turtle": "turtle", "ntriples": "nt", "rdfxml": "xml"}

LITERAL = "literal value (of a predicate other than rdfs:label)"
NOT_BETWEEN_ENTITIES = "triple with an end that is no entity (no rdfs:label, or a class or property)"
EXTRA_LABEL = "extra label (one kept: untagged, then English, then first in order)"
EXTRA_TYPE = "extra type (one kept: the type most entities share)"


def local_name(iri: str) -> str:
    """The last segment of an IRI, after its last ``/``, ``#`` or ``:``, percent-decoded."""
    return unquote(re.split(r"[/#:]", iri.rstrip("/#"))[-1]) or iri


def read_rdf(path: str | Path, fmt: str) -> Draft:
    """A :class:`Draft` of the RDF file at ``path``; ``fmt`` is a key of :data:`RDF_FORMATS`."""
    from rdflib import BNode, Graph, Literal
    from rdflib.namespace import OWL, RDF, RDFS

    source = str(path)
    graph = Graph()
    try:
        graph.parse(source, format=_RDFLIB_NAME[fmt])
    except Exception as exc:  # noqa: BLE001 -- rdflib's parsers raise many types; each becomes one line naming the file
        line = getattr(exc, "lines", None)  # Turtle's BadSyntax: the 0-based line and the reason alone
        reason = getattr(exc, "_why", None) or (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DataFileError(source, f"cannot read it as {RDF_FORMATS[fmt]}: {reason}",
                            line=line + 1 if isinstance(line, int) else None) from None
    draft = Draft(source, RDF_FORMATS[fmt], type_hint="rdf:type triples for them")
    show = lambda term: term.n3(graph.namespace_manager)  # noqa: E731 -- "ex:Aspirin", as the file wrote it

    def label_of(term) -> Literal | None:
        labels = sorted((o for o in graph.objects(term, RDFS.label) if isinstance(o, Literal)),
                        key=lambda o: (o.language is not None, not (o.language or "").lower().startswith("en"),
                                       str(o.language), str(o)))
        for extra in labels[1:]:
            draft.skip(EXTRA_LABEL, f"{show(term)} {extra.n3()}")
        return labels[0] if labels else None

    schema = {RDFS.Class, OWL.Class, RDF.Property, OWL.ObjectProperty, OWL.DatatypeProperty,
              OWL.AnnotationProperty, OWL.Ontology, OWL.TransitiveProperty, OWL.SymmetricProperty}
    classes = set(graph.objects(None, RDF.type))
    not_entities = classes | set(graph.predicates()) | {s for s, t in graph.subject_objects(RDF.type) if t in schema}
    generic = {OWL.Thing, OWL.NamedIndividual, RDFS.Resource}  # say nothing of what a thing is
    labelled = sorted((s for s in set(graph.subjects(RDFS.label)) if s not in not_entities), key=str)
    labels = {s: label_of(s) for s in labelled}
    entities = [s for s in labelled if labels[s] is not None]
    class_names = {}
    for cls in sorted(classes - generic, key=str):
        name = graph.value(cls, RDFS.label)
        class_names[cls] = str(name).strip() if isinstance(name, Literal) and str(name).strip() else local_name(cls)
    types_of = {s: sorted({class_names[t] for t in graph.objects(s, RDF.type) if t in class_names}) for s in entities}
    shared = Counter(t for names in types_of.values() for t in names)
    for s in entities:
        names = sorted(types_of[s], key=lambda t: (-shared[t], t))
        for extra in names[1:]:
            draft.skip(EXTRA_TYPE, f"{show(s)} {extra!r}")
        draft.entity(str(s), show(s), label=str(labels[s]), type=names[0] if names else None,
                     ident=None if isinstance(s, BNode) else local_name(str(s)))
    keys = {s: str(s) for s in entities}
    relation_labels = {}
    for s, p, o in sorted(graph, key=lambda t: tuple(str(x) for x in t)):
        if p in (RDF.type, RDFS.label):
            continue
        place = f"{show(s)} {show(p)} {show(o)}"
        if isinstance(o, Literal):
            draft.skip(LITERAL, place)
        elif s not in keys or o not in keys:
            draft.skip(NOT_BETWEEN_ENTITIES, place)
        else:
            if p not in relation_labels:
                label = label_of(p)
                relation_labels[p] = str(label) if label is not None else humanize(local_name(str(p)))
            draft.relation(str(p), place, label=relation_labels[p], ident=local_name(str(p)))
            draft.link(keys[s], str(p), keys[o], place)
    return draft
