"""GraphML (as networkx, yEd or a graph database writes it), read by networkx.

A node is an entity: its ``label`` attribute (else ``name``) is its label and the node id its id
(kept as written where it is a plain id); without either attribute the node id is the label and
the id is made from it. Its ``type`` attribute is its type. An edge is an edge, its relation the
value of one edge attribute: ``--relation-attr``, else the first of :data:`RELATION_ATTRS` that
the edges carry; a ``relation_label`` edge attribute, where present, labels the relation. The
graph must be directed: a relation reads one way.

>>> import networkx as nx, tempfile, os
>>> g = nx.MultiDiGraph()
>>> g.add_node("aspirin", type="drug"); g.add_node("headache", type="symptom")
>>> _ = g.add_edge("aspirin", "headache", relation="treats")
>>> path = os.path.join(tempfile.mkdtemp(), "drugs.graphml"); nx.write_graphml(g, path)
>>> draft = read_graphml(path)
>>> draft.links, [(e.key, e.type[0]) for e in draft.entities.values()]
([('aspirin', 'treats', 'headache', 'edge aspirin -> headache')], [('aspirin', 'drug'), ('headache', 'symptom')])
"""

from __future__ import annotations

from pathlib import Path
from xml.etree.ElementTree import ParseError

import networkx as nx

from library.errors import DataFileError
from library.graph.formats.assemble import Draft, describe

#: Edge attributes that commonly name the relation, tried in this order.
RELATION_ATTRS = ("relation", "rel", "predicate", "label", "type")
LABEL_ATTRS = ("label", "name")


def _text(value: object) -> str | None:
    """An attribute's value as text; None where it is missing or blank (GraphML keeps numbers typed)."""
    return None if value is None or not str(value).strip() else str(value)


def read_graphml(path: str | Path, relation_attr: str | None = None) -> Draft:
    """A :class:`Draft` of the GraphML file at ``path``."""
    source = str(path)
    try:
        graph = nx.read_graphml(source, force_multigraph=True)
    except ParseError as exc:
        raise DataFileError(source, f"not valid XML: {exc.msg if hasattr(exc, 'msg') else exc}",
                            line=exc.position[0]) from None
    except (nx.NetworkXError, KeyError, ValueError, StopIteration) as exc:
        raise DataFileError(source, f"cannot read it as GraphML: {exc or type(exc).__name__}") from None
    if not graph.is_directed():
        raise DataFileError(source, 'the graph is undirected (edgedefault="undirected"), but a relation reads one '
                                    "way: save a directed graph (networkx: a DiGraph or MultiDiGraph)")
    draft = Draft(source, "GraphML", type_hint="a 'type' attribute on those nodes")
    node_attrs = sorted({a for _, data in graph.nodes(data=True) for a in data})
    label_attr = next((a for a in LABEL_ATTRS if a in node_attrs), None)
    unread = [a for a in node_attrs if a not in (label_attr, "type")]
    if unread:
        draft.notes.append(f"ignored node attributes: {', '.join(unread)}")
    for node, data in graph.nodes(data=True):
        label = _text(data.get(label_attr)) if label_attr else None
        draft.entity(node, f"node {node!r}", label=label, type=_text(data.get("type")),
                     ident=node if label is not None else None)
    edges = list(graph.edges(data=True))
    edge_attrs = sorted({a for *_, data in edges for a in data})
    attr = relation_attr or next((a for a in RELATION_ATTRS if a in edge_attrs), None)
    if attr is None and edges:
        raise DataFileError(source, f"no edge attribute names the relation (looked for {', '.join(RELATION_ATTRS)}; "
                                    f"the edges carry {', '.join(edge_attrs) or 'none'}): pass --relation-attr NAME")
    bare = [f"edge {u} -> {v}" for u, v, data in edges if _text(data.get(attr)) is None]
    if bare:
        raise DataFileError(source, f"{len(bare)} of {len(edges)} edges have no {attr!r} attribute to name their "
                                    f"relation: {describe(bare)}")
    unread = [a for a in edge_attrs if a not in (attr, "relation_label", "id")]
    if unread:
        draft.notes.append(f"ignored edge attributes: {', '.join(unread)}")
    for u, v, data in edges:
        place = f"edge {u} -> {v}"
        rel = str(data[attr]).strip()
        draft.relation(rel, place, label=_text(data.get("relation_label")))
        draft.link(u, rel, v, place)
    return draft
