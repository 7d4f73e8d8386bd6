"""Every question a graph gives at one hop length, for where random paths find too few.

``kgr data`` draws its questions from random simple paths (library/questions/splits.py); on a
graph where walks the procedure answers by are rare among paths (branches everywhere, merges,
cycles), random paths stop finding new ones long before the graph runs out. :class:`Candidates`
lists them all instead: every (start, relation chain) whose walk is admissible at a width, with
and without merges (library/graph/oracle.py: :func:`admissible_walks`), and for each entity the
walk ends holding, the gold path to it (:func:`path_through`: where branches merged, the first
way in TRACE order).

>>> from library.graph.kg import KnowledgeGraph
>>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
...     "entities": [{"id": i, "label": i.lower(), "type": "t"} for i in "SABXY"],
...     "relations": [{"id": "r", "label": "leads to"}, {"id": "q", "label": "is fixed by"}],
...     "edges": [{"src": "S", "rel": "r", "dst": "A"}, {"src": "S", "rel": "r", "dst": "B"},
...               {"src": "A", "rel": "q", "dst": "X"}, {"src": "B", "rel": "q", "dst": "X"},
...               {"src": "B", "rel": "q", "dst": "Y"}]})
>>> [p.entities for p in Candidates(kg).paths(2, 2, merges=True)]   # S's walk merges on X
[['S', 'A', 'X'], ['S', 'B', 'Y']]
>>> Candidates(kg).paths(2, 2, merges=False)
[]
"""

from __future__ import annotations

import random

from library.contracts import GoldPath
from library.graph.kg import KnowledgeGraph
from library.graph.oracle import admissible_walks, path_through

#: The most candidate paths listed per (hop length, width, merges): beyond it a graph has more
#: than any split needs, and the list is a sample over starts in a fixed shuffled order.
MAX_CANDIDATES = 200_000

#: The most hops tried (one relation applied to one held set) listing them: a big graph whose
#: random paths stall is listed from as many starts as this affords.
MAX_STEPS = 5_000_000


class Candidates:
    """The admissible gold paths of ``kg``, listed once per (hops, width, merges) and kept."""

    def __init__(self, kg: KnowledgeGraph):
        self.kg = kg
        self._lists: dict[tuple[int, int, bool], list[GoldPath]] = {}

    def paths(self, hops: int, width: int, merges: bool) -> list[GoldPath]:
        """Every admissible gold path of ``hops`` edges, by start (in a fixed shuffled order),
        relation chain and end."""
        key = (hops, width, merges)
        if key not in self._lists:
            self._lists[key] = self._list(hops, width, merges)
        return self._lists[key]

    def shuffled(self, hops: int, width: int, merges: bool, rng: random.Random) -> list[GoldPath]:
        """:meth:`paths` in ``rng``'s order (a copy)."""
        order = list(self.paths(hops, width, merges))
        rng.shuffle(order)
        return order

    def _list(self, hops: int, width: int, merges: bool) -> list[GoldPath]:
        kg = self.kg
        steps = 0

        def successors(entity: str, rel: str) -> list[str]:
            nonlocal steps
            steps += 1
            return kg.successors(entity, rel)

        starts = list(kg.entities)
        random.Random("candidates").shuffle(starts)  # a capped list is still spread over the graph
        relations = sorted(kg.relations)
        out: list[GoldPath] = []
        for start in starts:
            for chain, walk in admissible_walks(successors, relations, start, hops, width, merges):
                for end in walk[-1].held:
                    out.append(kg.path_from_entities(path_through(start, walk, end), list(chain)))
                if len(out) >= MAX_CANDIDATES:
                    return out
            if steps > MAX_STEPS:
                break
        return out
