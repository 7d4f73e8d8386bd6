"""Reading a TRACE against the knowledge graph: entity and relation matching, claimed edges.

The reward (:mod:`library.scoring.reward`) scores what this module finds and stores it with each
episode (claims, entity spans); the monitor, the diagnosis, the demo page and the video read what
it stored and never match again.

Design notes
------------
* Entities are found by ONE compiled regex over every entity id and label, built as a
  character trie (see :func:`_trie_pattern`): the alternation of a trie tries the longer
  continuation first, which gives leftmost-longest matches, and it runs in time linear
  in the text instead of linear in the number of labels (a flat alternation of 600 labels
  was ~7x slower in our measurements). The text is lower-cased once and the pattern is
  compiled case-sensitively over lower-cased labels: ``re.IGNORECASE`` disables the
  literal fast-path of ``sre`` branches and cost another 4x.
* Labels arrive normalised (Unicode NFC, trimmed: library/graph/kg.py), and non-ASCII text is
  brought to NFC before it is matched, so a "café" typed with a combining accent is found.
  The pattern is built without recursion and nests at most :data:`_MAX_NESTING` groups deep,
  so no label length reaches Python's recursion limit (``re`` compiles nested groups recursively).
* Word boundaries are lookarounds ``(?<!\\w)`` / ``(?!\\w)`` rather than ``\\b``, because
  ``\\b`` misbehaves next to labels that start or end with punctuation ("C++", "502.").
* Claims: in each clause (split at ``; . , ! ? :``, newlines, "and", "which", ...) an
  ``entity relation entity`` sequence is a claimed edge; a relation's subject may be
  carried over a clause break ("X is caused by Y, which is fixed by Z"), its object not.
  One exception: "and" right after a claim's object lists another object of the same
  subject and relation ("X leads to Y and Z" claims both edges), which is how a TRACE states
  every successor at a branching hop (library/graph/oracle.py).
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left
from typing import Any, Iterable, Sequence

from library.contracts import BLANK_TAG_RE, Claim
from library.graph.kg import KnowledgeGraph, label_key

__all__ = ["EntityMatcher", "RelationMatcher", "TraceScanner", "departure_index", "extract_claims", "first_departure",
           "held_procedure", "longest_increasing_subsequence", "reads_as_prose"]



#: How deep the trie is factored; below it, each node's aliases are one flat alternation, longest
#: first, which matches the same (leftmost-longest) and keeps the nesting ``re`` recurses over bounded.
_MAX_NESTING = 64


def _alias_regex(alias: str) -> str:
    return "".join(r"\s+" if ch == " " else re.escape(ch) for ch in alias)


def _trie_pattern(aliases: Iterable[str]) -> str:
    """A regex alternation of ``aliases`` factored as a character trie.

    A space inside an alias matches any run of whitespace. At a node where one alias ends
    and a longer one continues, the continuation is tried first (greedy ``?``), which
    makes the match the longest alias at that position. Built bottom-up with an explicit
    stack: an alias of any length nests no Python calls.

    >>> _trie_pattern(["ntp", "ntp drift", "nat"])
    'n(?:at|tp(?:\\\\s+drift)?)'
    >>> re.fullmatch(_trie_pattern(["a b", "a"]), "a   b") is not None
    True
    >>> _trie_pattern(["ab", "ac", "a"])
    'a(?:b|c)?'
    """
    root: dict[str, dict] = {}
    for alias in aliases:
        node = root
        for ch in alias:
            node = node.setdefault(ch, {})
        node[""] = {}

    def flat(node: dict[str, dict]) -> str:
        """The aliases below ``node`` as one alternation, longest first (no nesting)."""
        suffixes, todo = [], [(node, "")]
        while todo:
            at, prefix = todo.pop()
            for ch, child in at.items():
                if ch:
                    todo.append((child, prefix + ch))
                elif prefix:
                    suffixes.append(prefix)
        body = "|".join(_alias_regex(a) for a in sorted(suffixes, key=lambda a: (-len(a), a)))
        if "" in node:
            return f"(?:{body})?" if body else ""
        return body if len(suffixes) == 1 else f"(?:{body})"

    # Post-order over the trie: a node's pattern is made once its children's are.
    done: dict[int, str] = {}
    stack: list[tuple[dict[str, dict], int, bool]] = [(root, 0, False)]
    while stack:
        node, depth, expanded = stack.pop()
        if depth >= _MAX_NESTING:
            done[id(node)] = flat(node)
            continue
        if not expanded:
            stack.append((node, depth, True))
            stack.extend((node[ch], depth + 1, False) for ch in node if ch)
            continue
        branches = [(r"\s+" if ch == " " else re.escape(ch)) + done.pop(id(node[ch])) for ch in sorted(node) if ch]
        if not branches:
            done[id(node)] = ""
        elif "" in node:
            # "(?:x|y)?", not "(?:(?:x|y))?": one group less to nest
            done[id(node)] = f"(?:{'|'.join(branches)})?"
        else:
            done[id(node)] = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    return done[id(root)]


def _nfc(text: str) -> tuple[str, list[int] | None, list[int] | None]:
    """``text`` in Unicode NFC, with the offset in ``text`` where each character starts and
    ends (both None when nothing changed).

    NFC never composes a character with an ASCII one after it, so each run from one ASCII
    character to the next is normalised on its own, and a run that changed maps as a whole.

    >>> _nfc("cafe\u0301 x")
    ('café x', [0, 1, 2, 3, 5, 6], [1, 2, 3, 5, 6, 7])
    >>> _nfc("plain")
    ('plain', None, None)
    """
    if text.isascii() or unicodedata.is_normalized("NFC", text):
        return text, None, None
    parts: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    for m in _NFC_RUN.finditer(text):
        run = unicodedata.normalize("NFC", m.group())
        parts.append(run)
        if len(run) == m.end() - m.start():
            starts.extend(range(m.start(), m.end()))
            ends.extend(range(m.start() + 1, m.end() + 1))
        else:
            starts.extend([m.start()] * len(run))
            ends.extend([m.end()] * len(run))
    return "".join(parts), starts, ends


_NFC_RUN = re.compile(r"[\x00-\x7f]?[^\x00-\x7f]*", re.DOTALL)


class _AliasTable:
    """Aliases (normalised text) -> ids, first writer wins, plus the trie pattern."""

    def __init__(self, pairs: Iterable[tuple[str, str]]):
        self.ids: dict[str, str] = {}
        for alias, ident in pairs:
            key = label_key(alias)
            if key and key not in self.ids:
                self.ids[key] = ident
        # Longest first only matters for readability of the pattern: the trie already
        # prefers longer continuations.
        self.pattern = _trie_pattern(sorted(self.ids, key=lambda a: (-len(a), a)))

    def lookup(self, matched: str) -> str | None:
        hit = self.ids.get(matched)
        if hit is None:
            # Only reached for matches spanning odd whitespace or odd case folds.
            hit = self.ids.get(label_key(matched))
        return hit


_PROSE_WORD = re.compile(r"[^\W\d_]+")


def reads_as_prose(ident: str) -> bool:
    """Whether an entity id could be ordinary words of prose, in any case: every word of it
    letters only, written lower, upper or capitalised. Such an id (an ISO code, a plain
    noun) is never read in a TRACE; ids with digits, underscores or inner capitals are.

    >>> [reads_as_prose(i) for i in ("IN", "IS", "it", "Tcpdump", "New York", "Q668", "ClockSkew", "caused_by")]
    [True, True, True, True, True, False, False, False]
    """
    words = ident.replace("-", " ").split()
    return bool(words) and all(_PROSE_WORD.fullmatch(w) and (w.islower() or w.isupper() or w.istitle())
                               for w in words)


class EntityMatcher:
    """Finds KG entities (by id or label) in text: whole words, leftmost-longest, any case.

    >>> from library.graph.kg import KnowledgeGraph, label_key
    >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "t",
    ...     "entities": [{"id": "Skew", "label": "skew", "type": "cause"},
    ...                  {"id": "ClockSkew", "label": "clock skew", "type": "cause"},
    ...                  {"id": "E502", "label": "HTTP 502 bad gateway", "type": "symptom"}],
    ...     "relations": [], "edges": []})
    >>> m = EntityMatcher(kg)
    >>> m.find("Clock  SKEW, then skewed clocks, skew, http 502 bad gateway and e502")
    ['ClockSkew', 'Skew', 'E502', 'E502']

    Ids that read as words are not matched: a graph keyed by ISO codes is read by its labels.

    >>> iso = KnowledgeGraph.from_dict({"version": "1", "domain": "t", "relations": [], "edges": [],
    ...     "entities": [{"id": i, "label": l, "type": "place"} for i, l in
    ...                  (("IN", "India"), ("IS", "Iceland"), ("IT", "Italy"), ("Q1156", "Mumbai"))]})
    >>> EntityMatcher(iso).find("Mumbai is located in India, and it is on the coast.")
    ['Q1156', 'IN']
    >>> m.spans("See clock skew.")
    [(4, 14, 'ClockSkew')]
    """

    def __init__(self, kg: KnowledgeGraph):
        ents = list(kg.entities.values())
        # Labels before ids: when an id spells another entity's label, the label wins. An id
        # that reads as words ("IN", "IS", "Tcpdump") is not matched at all: prose writes labels.
        self.table = _AliasTable([(e.label, e.id) for e in ents]
                                 + [(e.id, e.id) for e in ents if not reads_as_prose(e.id)])
        self.regex = re.compile(rf"(?<!\w)(?:{self.table.pattern})(?!\w)")

    def find(self, text: str) -> list[str]:
        """Entity ids in order of appearance, repeats included."""
        return [ident for _, _, ident in self.spans(text)]

    def spans(self, text: str) -> list[tuple[int, int, str]]:
        """``(start, end, entity id)`` of each mention, in order, as offsets into ``text``.

        >>> from library.graph.kg import KnowledgeGraph, label_key
        >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "t", "relations": [], "edges": [],
        ...     "entities": [{"id": "C", "label": "caf\u00e9 menu", "type": "t"}]})
        >>> EntityMatcher(kg).spans("A cafe\u0301 menu.")   # the accent typed as a combining mark
        [(2, 12, 'C')]
        """
        normal, starts, ends = _nfc(text)
        lowered = normal.lower()
        # A few characters lower-case to two ("\u0130" -> "i\u0307"); then each offset into
        # ``lowered`` is mapped back to the character of ``text`` it came from.
        origin = None if len(lowered) == len(normal) else [i for i, ch in enumerate(normal) for _ in ch.lower()]
        lookup = self.table.lookup
        out = []
        for m in self.regex.finditer(lowered):
            ident = lookup(m.group())
            if ident is None:
                continue
            first, last = m.start(), m.end() - 1
            if origin is not None:
                first, last = origin[first], origin[last]
            if starts is None:
                out.append((first, last + 1, ident))
            else:
                out.append((starts[first], ends[last], ident))
        return out


def _relation_aliases(rel_id: str, label: str) -> list[str]:
    """The phrases read as relation ``rel_id``: its label, the label without a leading
    copula ("caused by"), its id ("caused_by") and the id spelled with spaces.

    >>> _relation_aliases("caused_by", "is caused by")
    ['is caused by', 'caused by', 'caused_by', 'caused by']
    >>> _relation_aliases("in", "is located in")
    ['is located in', 'located in']
    """
    out = [label]
    words = label.split()
    if len(words) > 1 and words[0].lower() in ("is", "are"):
        out.append(" ".join(words[1:]))
    if not reads_as_prose(rel_id):  # an id "in" or "is" would be read in every sentence
        out += [rel_id, rel_id.replace("_", " ")]
    return out


class RelationMatcher:
    """Finds relation phrases (labels and ids) in text, like :class:`EntityMatcher`.

    >>> from library.graph.kg import KnowledgeGraph, label_key
    >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "t", "entities": [],
    ...     "relations": [{"id": "caused_by", "label": "is caused by"},
    ...                   {"id": "leads_to", "label": "leads to"}], "edges": []})
    >>> RelationMatcher(kg).find("X is caused by Y, which leads_to Z; caused by W")
    ['caused_by', 'leads_to', 'caused_by']
    """

    def __init__(self, kg: KnowledgeGraph):
        pairs = [(a, r.id) for r in kg.relations.values() for a in _relation_aliases(r.id, r.label)]
        self.table = _AliasTable(pairs)
        self.regex = re.compile(rf"(?<!\w)(?:{self.table.pattern})(?!\w)")

    def find(self, text: str) -> list[str]:
        lookup = self.table.lookup
        return [r for r in (lookup(s) for s in self.regex.findall(_nfc(text)[0].lower())) if r is not None]


# Clause boundaries for claim reading. A relation's object must sit in the same clause;
# its subject may be carried over a boundary ("X is caused by Y, which is fixed by Z").
_SEP_CHARS = ";.,!?:\n"
_SEP_WORDS = ("and", "which", "then", "but", "so", "while", "whereas")
_SEPARATOR = rf"[{re.escape(_SEP_CHARS)}]|(?<!\w)(?:{'|'.join(_SEP_WORDS)})(?!\w)"


class TraceScanner:
    """One regex pass over a lower-cased trace yielding entity, relation and clause-break
    events: ``findall`` returns ``(entity_text, relation_text, separator)`` triples."""

    def __init__(self, entities: EntityMatcher, relations: RelationMatcher):
        self.entities = entities.table
        self.relations = relations.table
        self.regex = re.compile(
            rf"(?<!\w)(?:({entities.table.pattern})|({relations.table.pattern}))(?!\w)|({_SEPARATOR})"
        )

    def scan(self, lowered: str) -> tuple[list[str], list[tuple[str, str, str]]]:
        """``(entity ids in order with repeats, claimed edges in order)``.

        A claim is ``entity relation entity`` with nothing recognised in between except
        unrecognised words; chains share their middle entity ("X r1 Y r2 Z"); "and" right after
        an object continues the list of objects ("X r1 Y and Z").

        >>> from library.graph.kg import KnowledgeGraph, label_key
        >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "t", "edges": [],
        ...     "entities": [{"id": i, "label": i.lower(), "type": "t"} for i in "xyzw"],
        ...     "relations": [{"id": "r", "label": "leads to"}]})
        >>> TraceScanner(EntityMatcher(kg), RelationMatcher(kg)).scan("x leads to y and z, w and x")[1]
        [('x', 'r', 'y'), ('x', 'r', 'z')]
        """
        if not lowered.isascii():  # isascii is O(1): ASCII traces, the usual case, skip this
            lowered = unicodedata.normalize("NFC", lowered)
        ent_get = self.entities.ids.get
        rel_get = self.relations.ids.get
        ents: list[str] = []
        claims: list[tuple[str, str, str]] = []
        subject: str | None = None  # the last entity, unless a relation came after it
        pending: tuple[str, str] | None = None  # (subject, relation) awaiting an object
        listing: tuple[str, str] | None = None  # (subject, relation) whose object came last
        for e, r, sep in self.regex.findall(lowered):
            if e:
                ident = ent_get(e) or self.entities.lookup(e)
                if ident is None:
                    continue
                ents.append(ident)
                listing = None
                if pending is not None:
                    claims.append((pending[0], pending[1], ident))
                    listing, pending = pending, None
                subject = ident
            elif r:
                rel = rel_get(r) or self.relations.lookup(r)
                pending = (subject, rel) if subject is not None and rel is not None else None
                subject = listing = None
            else:
                pending = listing if sep == "and" else None
                listing = None
        return ents, claims


def extract_claims(kg: KnowledgeGraph, trace: str) -> list[tuple[str, str, str]]:
    """Claimed edges ``(src, rel, dst)`` of a trace, in order (convenience; compiles the
    matchers on every call, so use :class:`RewardModel` in loops).

    >>> from library.graph.kg import KnowledgeGraph, label_key
    >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "t",
    ...     "entities": [{"id": "S", "label": "TLS handshake error", "type": "symptom"},
    ...                  {"id": "C", "label": "clock skew", "type": "cause"},
    ...                  {"id": "F", "label": "sync clocks with NTP", "type": "fix"}],
    ...     "relations": [{"id": "caused_by", "label": "is caused by"},
    ...                   {"id": "fixed_by", "label": "is fixed by"}], "edges": []})
    >>> extract_claims(kg, "TLS handshake error is usually caused by clock skew, which is fixed by sync clocks with NTP.")
    [('S', 'caused_by', 'C'), ('C', 'fixed_by', 'F')]
    >>> extract_claims(kg, "clock skew and TLS handshake error; is fixed by sync clocks with NTP")
    [('S', 'fixed_by', 'F')]
    """
    return TraceScanner(EntityMatcher(kg), RelationMatcher(kg)).scan(BLANK_TAG_RE.sub("", trace).lower())[1]


#: What :func:`first_departure` can say of a TRACE, in the order a reader checks it.
DEPARTURES = ("on_path", "relation", "fact", "subject", "branch", "short", "long")
#: Each kind in a reader's words (the demo page's; :func:`first_departure` says what each means).
DEPARTURE_WORDS = {"on_path": "right path, wrong letter", "relation": "lost its place in the chain",
                   "fact": "a fact not recalled", "subject": "a step from the wrong entity",
                   "branch": "dropped a branch", "short": "stopped early", "long": "went on past the end"}


def first_departure(claims: Sequence[Claim], gold_edges: Sequence[Any],
                    procedure: Sequence[tuple[str, str, str, int]] | None = None) -> tuple[str, int | None]:
    """Where a TRACE's claims first leave the procedure: ``(kind, hop)``, hop 1-based.

    ``procedure`` lists the claims an honest TRACE makes, in order, each with its hop:
    ``(src, rel, dst, hop)`` (library/graph/oracle.py: walk_claims; where a hop branches, one claim
    per successor of every held entity). Without it, the gold path: one claim per hop. Claim *i*
    is held against the procedure's claim *i*, and the first mismatch is named by what went
    wrong there:

    - ``relation``: another relation than the hop's: the model lost its place in the question's
      chain (a procedure error, whatever it knows);
    - ``branch``: a claim the procedure makes, out of its turn: a branch dropped (or reordered)
      at this hop;
    - ``subject``: the right relation from another entity than one held;
    - ``fact``: the right relation from the right entity, a wrong object: a fact not recalled;
    - ``short``: every claim matches but the TRACE stopped before the last hop;
    - ``long``: the whole procedure, then more claims;
    - ``on_path`` (hop None): exactly the procedure (a wrong answer then is the letter's fault).

    >>> from library.contracts import PathEdge
    >>> gold = [PathEdge(src="A", rel="r", dst="B"), PathEdge(src="B", rel="s", dst="C")]
    >>> c = lambda s, r, d: Claim(src=s, rel=r, dst=d, in_kg=True, on_gold_path=False)
    >>> first_departure([c("A", "r", "B"), c("B", "s", "C")], gold)
    ('on_path', None)
    >>> first_departure([c("A", "r", "B"), c("B", "r", "D")], gold), first_departure([c("A", "r", "X")], gold)
    (('relation', 2), ('fact', 1))
    >>> first_departure([c("A", "r", "B")], gold), first_departure([c("A", "r", "B"), c("X", "s", "C")], gold)
    (('short', 2), ('subject', 2))

    Where hop 1 branches (A leads to B and D), the TRACE must carry D's branch too:

    >>> walk = [("A", "r", "B", 1), ("A", "r", "D", 1), ("B", "s", "C", 2), ("D", "s", "E", 2)]
    >>> first_departure([c("A", "r", "B"), c("A", "r", "D"), c("B", "s", "C"), c("D", "s", "E")], gold, walk)
    ('on_path', None)
    >>> first_departure([c("A", "r", "B"), c("A", "r", "D"), c("B", "s", "C")], gold, walk)
    ('short', 2)
    >>> first_departure([c("A", "r", "B"), c("B", "s", "C")], gold, walk)   # D was dropped
    ('branch', 1)
    """
    expected = held_procedure(gold_edges, procedure)
    i = departure_index(claims, expected)
    if i == len(expected):
        if len(claims) > len(expected):
            return "long", (expected[-1][3] + 1) if expected else 1
        return "on_path", None
    src, rel, _, hop = expected[i]
    if i >= len(claims):
        return "short", hop
    claim = claims[i]
    if (claim.src, claim.rel, claim.dst) in {(s, r, d) for s, r, d, _ in expected}:
        return "branch", hop
    if claim.rel != rel:
        return "relation", hop
    if claim.src != src:
        return "subject", hop
    return "fact", hop


def held_procedure(gold_edges: Sequence[Any], procedure: Sequence[tuple[str, str, str, int]] | None = None
                   ) -> list[tuple[str, str, str, int]]:
    """The claims a TRACE is held against: ``procedure`` where given, else the gold path, one claim per hop.

    >>> from library.contracts import PathEdge
    >>> held_procedure([PathEdge(src="A", rel="r", dst="B"), PathEdge(src="B", rel="s", dst="C")])
    [('A', 'r', 'B', 1), ('B', 's', 'C', 2)]
    """
    return (list(procedure) if procedure is not None
            else [(e.src, e.rel, e.dst, i) for i, e in enumerate(gold_edges, start=1)])


def departure_index(claims: Sequence[Claim], procedure: Sequence[tuple[str, str, str, int]]) -> int:
    """The index of the first claim the procedure does not make at its turn (or of the first one
    missing); ``len(procedure)`` when the claims make the whole procedure (perhaps with more after).

    >>> c = lambda s, r, d: Claim(src=s, rel=r, dst=d, in_kg=True, on_gold_path=False)
    >>> walk = [("A", "r", "B", 1), ("B", "s", "C", 2)]
    >>> departure_index([c("A", "r", "B"), c("B", "r", "X")], walk), departure_index([c("A", "r", "B")], walk)
    (1, 1)
    >>> departure_index([c("A", "r", "B"), c("B", "s", "C"), c("C", "s", "D")], walk)
    2
    """
    for i, (src, rel, dst, _) in enumerate(procedure):
        if i >= len(claims) or (claims[i].src, claims[i].rel, claims[i].dst) != (src, rel, dst):
            return i
    return len(procedure)


def longest_increasing_subsequence(seq: list[int]) -> int:
    """Length of the longest strictly increasing subsequence: how many gold edges a TRACE
    claims in path order.

    >>> longest_increasing_subsequence([0, 2, 1, 3])
    3
    """
    tails: list[int] = []
    for x in seq:
        i = bisect_left(tails, x)
        if i == len(tails):
            tails.append(x)
        else:
            tails[i] = x
    return len(tails)
