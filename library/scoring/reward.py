"""The reward: read a completion back against the knowledge graph and score it.

A completion has the form (docs/DESIGN.md, "Completion format and reward")::

    TRACE: <one or two sentences naming the entities along the path>
    ANSWER: <A|B|C|D>

and is scored by a :class:`RewardModel` built once per KG and :class:`RewardConfig`:

>>> from library.graph.kg import KnowledgeGraph
>>> from library.contracts import Question
>>> kg = KnowledgeGraph.from_dict({
...     "version": "1", "domain": "toy",
...     "entities": [{"id": "S", "label": "TLS handshake error", "type": "symptom"},
...                  {"id": "C", "label": "clock skew", "type": "cause"},
...                  {"id": "F", "label": "sync clocks with NTP", "type": "fix"}],
...     "relations": [{"id": "caused_by", "label": "is caused by"},
...                   {"id": "fixed_by", "label": "is fixed by"}],
...     "edges": [{"src": "S", "rel": "caused_by", "dst": "C"},
...               {"src": "C", "rel": "fixed_by", "dst": "F"}]})
>>> q = Question(id="q1", split="train", hop_len=2, question="...", prompt="...",
...              options={"A": "S", "B": "F", "C": "C", "D": "S"}, answer_star="B",
...              path_star=kg.path_from_entities(["S", "C", "F"], ["caused_by", "fixed_by"]),
...              ref={"trace": ""})
>>> honest = ("TRACE: TLS handshake error is caused by clock skew; "
...           "clock skew is fixed by sync clocks with NTP.\\nANSWER: B")
>>> s = RewardModel.from_preset(kg, "toy+edges").score(q, honest)
>>> s.parsed.path_entities, s.correct, s.reward.correctness, s.reward.path_reward, s.reward.edge_reward, s.reward.total
(['S', 'C', 'F'], True, 1.0, 0.5, 0.5, 2.0)

With what readers show, found in the same pass: whether the answer is grounded (every gold edge
claimed in order), the entities the completion names and the TRACE's steps as a card shows them:

>>> s.grounded, s.parsed.spans[:2], s.parsed.steps_hidden
(True, [(7, 26, 'S'), (40, 50, 'C')], [])
>>> [step.text for step in s.parsed.steps]
['TLS handshake error is caused by clock skew; clock skew is fixed by sync clocks with NTP.']

The same names in a false chain lose the edge credit and pay for each false claim:

>>> liar = ("TRACE: TLS handshake error is fixed by clock skew; "
...         "clock skew is caused by sync clocks with NTP.\\nANSWER: B")
>>> s = RewardModel.from_preset(kg, "toy+edges").score(q, liar)
>>> s.reward.path_reward, s.reward.edge_reward, s.reward.false_edges, s.reward.total
(0.5, -0.5, 2, 1.0)
>>> [(c.src, c.rel, c.dst, c.in_kg) for c in s.parsed.claims]
[('S', 'fixed_by', 'C', False), ('C', 'caused_by', 'F', False)]

Components of the total, for every preset::

    total = correctness + path_reward - spam_penalty + edge_reward   (edge_verified)
    total = correctness + path_reward - spam_penalty                 (toy, paper)
    total = correctness                                              (correctness_only)

``edge_reward`` is measured and logged under every preset, so a run trained without it
still shows whether its model learned to state false chains; so is ``max_mentions`` (the most
times the TRACE names one entity), so that entity spam shows under the paper preset too.

Spam is what goes beyond the honest TRACE. A TRACE of a tree walk names an entity at most twice
(as an object, then as the subject of the next clause); where two held entities share a successor
(a merge, library/graph/oracle.py) the procedure itself names it once more per clause that states
it. Those repetitions are not counted: ``max_mentions`` is the most times a TRACE names one entity
less the honest TRACE's own repetitions of it past two, and the paper preset's repetition factor
starts where the honest TRACE's own token repetition ends. On a tree walk nothing is excused:

>>> merge = KnowledgeGraph.from_dict({"version": "1", "domain": "toy",
...     "entities": [{"id": i, "label": i.lower(), "type": "t"} for i in ("S", "A", "B", "X", "Y")],
...     "relations": [{"id": "r", "label": "leads to"}, {"id": "q", "label": "is fixed by"}],
...     "edges": [{"src": "S", "rel": "r", "dst": "A"}, {"src": "S", "rel": "r", "dst": "B"},
...               {"src": "A", "rel": "q", "dst": "X"}, {"src": "B", "rel": "q", "dst": "X"},
...               {"src": "X", "rel": "r", "dst": "Y"}]})
>>> qm = Question(id="m", split="train", hop_len=3, question="...", prompt="...", answer_star="A",
...               options={"A": "y", "B": "s", "C": "a", "D": "b"}, ref={"trace": ""},
...               path_star=merge.path_from_entities(["S", "A", "X", "Y"], ["r", "q", "r"]))
>>> honest = "TRACE: s leads to a and b, a is fixed by x, b is fixed by x, x leads to y.\\nANSWER: A"
>>> r = RewardModel.from_preset(merge, "toy+edges").score(qm, honest).reward
>>> r.max_mentions, r.spam_penalty, r.total   # x is named three times, as the procedure does
(2, 0.0, 2.0)
>>> r = RewardModel.from_preset(merge, "toy+edges").score(qm, honest.replace("x leads", "x x leads")).reward
>>> r.max_mentions, r.spam_penalty   # a fourth time is one too many
(3, 0.5)

``path_reward`` is the path term before the spam penalty and ``spam_penalty`` the amount
the penalty removes, so the four bars of the video add up to the total under both presets.

Design notes
------------
* Entities, relations and claimed edges are found by :mod:`library.scoring.matching` (one scanner).
  Edge credit = in-order gold edges / hops, times precision (distinct edges of the procedure
  claimed / claims: the gold path, plus on a branching graph the branches the procedure
  carries, library/graph/oracle.py), so a dump of every true edge or the path repeated ten
  times earns little, and an honest set-valued TRACE as much as the gold path alone.
* Everything per question (gold entity set, gold edge order, path tokens) is computed
  once and cached by question id.
"""

from __future__ import annotations

import re
import unicodedata
from collections import OrderedDict
from dataclasses import asdict, dataclass, fields
from operator import eq as _eq
from typing import Any, Callable, Iterable, Sequence

from library.contracts import BLANK_TAG_RE, Claim, ParsedCompletion, Question, RewardBreakdown, Scored, TraceStep
from library.scoring.answer_format import is_correct, is_grounded, parse_completion, trace_steps
from library.graph.kg import KnowledgeGraph
from library.graph.oracle import question_walk, walk_edges
from library.questions.wording import reference_trace, step_order_of
from library.scoring.matching import EntityMatcher, RelationMatcher, TraceScanner, longest_increasing_subsequence
from library.scoring.presets import PRESET_NAMES, PresetName, parse_preset

try:  # the C helper behind Counter(); counting into a plain dict skips Counter's overhead
    from collections import _count_elements  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - every CPython has it

    def _count_elements(mapping: dict, iterable: Iterable) -> None:  # type: ignore[misc]
        for x in iterable:
            mapping[x] = mapping.get(x, 0) + 1

__all__ = [
    "COMPONENTS",
    "PRESET_NAMES",
    "RewardConfig",
    "RewardModel",
    "Scored",
    "parse_completion",
    "path_tokens",
    "tokenize",
]

# --------------------------------------------------------------------------- tokens

_TOKEN_RE = re.compile(r"[^\W_]+")
# Function words inside labels ("renew the certificate", "sync clocks with NTP") would
# otherwise earn path coverage for any fluent sentence.
_STOPWORDS = frozenset("a an the of to in on at by for with from and or is are be it its this that".split())


# For ASCII text, [^\W_]+ runs are exactly the whitespace-split words once every other
# character is blanked; str.translate + str.split is about twice as fast as findall.
_TOKEN_BLANK = str.maketrans({chr(i): " " for i in range(128) if not chr(i).isalnum()})


def _tokens(lowered: str) -> list[str]:
    """``_TOKEN_RE.findall(lowered)``, faster for ASCII text (``isascii`` is O(1))."""
    return lowered.translate(_TOKEN_BLANK).split() if lowered.isascii() else _TOKEN_RE.findall(lowered)


def tokenize(text: str) -> list[str]:
    """Word tokens for the ``paper`` preset: maximal runs of letters/digits, lower-cased;
    underscores and punctuation split tokens.

    >>> tokenize("HTTP 502 bad-gateway; caused_by NTP.")
    ['http', '502', 'bad', 'gateway', 'caused', 'by', 'ntp']
    """
    return _TOKEN_RE.findall(text.lower())


def path_tokens(kg: KnowledgeGraph, entity_ids: Sequence[str]) -> frozenset[str]:
    """The path's tokens: word tokens of its entity labels, minus function words.

    >>> from library.graph.kg import KnowledgeGraph
    >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "t", "relations": [], "edges": [],
    ...     "entities": [{"id": "F", "label": "sync clocks with NTP", "type": "fix"}]})
    >>> sorted(path_tokens(kg, ["F"]))
    ['clocks', 'ntp', 'sync']
    """
    return frozenset(t for e in entity_ids for t in tokenize(kg.label(e)) if t not in _STOPWORDS)


# --------------------------------------------------------------------------- config

@dataclass(frozen=True)
class RewardConfig:
    """Every weight of the reward, in one place. ``RewardConfig()`` is ``toy+edges``.

    Named presets: ``toy``, ``paper`` (as docs/DESIGN.md describes them, no edge component),
    ``toy+edges``, ``paper+edges`` (plus the edge-verified component) and ``correctness``
    (the ablation: total = toy correctness only, every other component still logged).
    A ``+correctness`` suffix makes any preset correctness-only (``paper+correctness``).

    >>> RewardConfig.preset_named("paper+edges").name
    'paper+edges'
    >>> RewardConfig.preset_named("correctness").name
    'toy+edges+correctness'
    >>> RewardConfig().as_dict()["toy_wrong"]
    -2.0
    """

    preset: PresetName = "toy"
    edge_verified: bool = True
    correctness_only: bool = False
    # toy: correctness + toy_path_weight * path - spam
    toy_correct: float = 1.0
    toy_wrong: float = -2.0
    toy_path_weight: float = 0.5
    toy_min_hits: int = 2
    toy_spam_penalty: float = 0.5
    toy_spam_max_mentions: int = 2  # an entity named more often than this is spam
    # paper: min(w*coverage + bonus*[hits >= min_hits], cap) * repetition_factor
    paper_correct: float = 0.1
    paper_wrong: float = -1.0
    paper_coverage_weight: float = 1.2
    paper_hits_bonus: float = 0.3
    paper_min_hits: int = 2
    paper_path_cap: float = 1.5
    paper_top_share_free: float = 0.35
    paper_top_share_slope: float = 3.0
    paper_run_free: int = 3
    paper_run_slope: float = 0.05
    # edge-verified: weight * (gold edges claimed in order / hops) * (distinct gold edges
    # claimed / claims) - min(cap, per_false * false claims)
    # The credit equals the toy path term at full coverage, so a true chain is worth as
    # much again as naming the right entities; two false claims cancel a full chain's credit.
    edge_weight: float = 0.5
    edge_false_penalty: float = 0.25
    edge_false_cap: float = 1.0

    def __post_init__(self) -> None:
        if self.preset not in ("toy", "paper"):
            raise ValueError(f"unknown reward preset {self.preset!r}; expected 'toy' or 'paper'")

    @property
    def name(self) -> str:
        return self.preset + ("+edges" if self.edge_verified else "") + ("+correctness" if self.correctness_only else "")

    @classmethod
    def preset_named(cls, name: str, **overrides: Any) -> "RewardConfig":
        """Parse ``base[+edges][+correctness]`` (base: toy | paper); ``correctness`` alone
        is ``toy+edges+correctness`` (library/scoring/presets.py). ``overrides`` set individual weights."""
        base, edge_verified, correctness_only = parse_preset(name)
        return cls(preset=base, edge_verified=edge_verified, correctness_only=correctness_only, **overrides)  # type: ignore[arg-type]

    def as_dict(self) -> dict[str, Any]:
        """For meta.json: the preset name and every field."""
        return {"name": self.name, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RewardConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


# --------------------------------------------------------------------------- the model


#: The most times a TRACE of a tree walk names one entity: as an object, then as the next subject.
TREE_MENTIONS = 2


class _QuestionData:
    """What scoring needs from a question, computed once (``excused`` and ``honest_repetition``,
    from the honest TRACE, the first time a completion repeats itself)."""

    __slots__ = ("entities", "gold", "n_gold", "edge_index", "procedure", "hops", "tokens", "n_tokens", "excused",
                 "honest_repetition")

    def __init__(self, kg: KnowledgeGraph, q: Question):
        self.entities = list(q.path_star.entities)
        self.gold = frozenset(self.entities)
        self.n_gold = len(self.gold)
        self.edge_index: dict[tuple[str, str, str], int] = {}
        for i, e in enumerate(q.path_star.edges):
            self.edge_index.setdefault((e.src, e.rel, e.dst), i)
        # Every edge the procedure states (the gold path, and where a hop branches, the branches
        # it carries): true claims that follow the procedure never cost precision.
        self.procedure = frozenset(walk_edges(question_walk(kg, q))).union(self.edge_index)
        self.hops = len(q.path_star.edges)
        self.tokens = path_tokens(kg, [e for e in self.entities if e in kg.entities])
        self.n_tokens = len(self.tokens)
        # entity -> mentions the honest TRACE makes past TREE_MENTIONS (merges); None until needed
        self.excused: dict[str, int] | None = None
        self.honest_repetition: tuple[float, int] = (0.0, 0)  # its top token share and longest run


def _token_stats(tokens: list[str]) -> tuple[int, int]:
    """``(count of the most frequent token, longest run of one repeated token)``, with the
    loops in C: the paper preset's repetition statistics.

    >>> _token_stats("a b b a b c c c".split()), _token_stats([]), _token_stats(["x"])
    ((3, 3), (0, 0), (1, 1))
    """
    n = len(tokens)
    if n < 2:
        return n, n
    counts: dict[str, int] = {}
    _count_elements(counts, tokens)
    if len(counts) == n:  # no token repeats: the common case for a short trace
        return 1, 1
    same = bytes(map(_eq, tokens, tokens[1:]))  # 1 where a token equals the one before
    run = 1 + max(map(len, same.split(b"\x00"))) if 1 in same else 1
    return max(counts.values()), run


COMPONENTS: tuple[str, ...] = ("correctness", "path_coverage", "path_reward", "spam_penalty", "edge_reward", "total")


class RewardModel:
    """The KG as a reward model. Build once (compiles the matchers), score many.

    ``score`` returns a :class:`~library.contracts.Scored`: the parse with its typed claims,
    entity spans and TRACE steps, the breakdown, the correctness verdict and whether the answer
    is grounded, which is everything an episode stores, so no reader parses the completion
    again. ``components`` returns the same numbers as a plain dict and is several times faster
    (no model construction, no spans or steps), which is what a trainer's reward function should call.
    """

    def __init__(self, kg: KnowledgeGraph, config: RewardConfig | None = None):
        self.kg = kg
        self.config = config or RewardConfig()
        self.entity_matcher = EntityMatcher(kg)
        self.relation_matcher = RelationMatcher(kg)
        self._scanner = TraceScanner(self.entity_matcher, self.relation_matcher)
        self._edges = frozenset((e.src, e.rel, e.dst) for e in kg.edges)
        self._name = self.config.name
        self._questions: dict[tuple[str, str], _QuestionData] = {}
        self._memo: OrderedDict[tuple[str, str, str], dict[str, Any]] = OrderedDict()

    @classmethod
    def from_preset(cls, kg: KnowledgeGraph, name: str | None = None, **overrides: Any) -> "RewardModel":
        """The reward under a named preset (:meth:`RewardConfig.preset_named`); None: the defaults."""
        return cls(kg, RewardConfig.preset_named(name, **overrides) if name else RewardConfig(**overrides))

    def _question(self, q: Question) -> _QuestionData:
        key = (q.id, q.split)
        data = self._questions.get(key)
        # Ids are not unique across files that reuse them (eval vs eval_shuffled), so the
        # cached gold path is checked, which costs one list comparison.
        if data is None or data.entities != q.path_star.entities:
            data = self._questions[key] = _QuestionData(self.kg, q)
        return data

    def _honest(self, q: Question, qd: _QuestionData) -> dict[str, int]:
        """``qd.excused``, read (once) from the question's honest TRACE, with its token repetition."""
        if qd.excused is None:
            try:
                trace = reference_trace(self.kg, q.path_star, step_order=step_order_of(q.question))
            except (ValueError, KeyError):  # the procedure does not walk it in this KG: nothing to excuse
                qd.excused = {}
                return qd.excused
            lowered = BLANK_TAG_RE.sub("", trace).lower()
            mentions: dict[str, int] = {}
            _count_elements(mentions, self._scanner.scan(lowered)[0])
            qd.excused = {e: n - TREE_MENTIONS for e, n in mentions.items() if n > TREE_MENTIONS}
            tokens = _tokens(lowered)
            top, run = _token_stats(tokens)
            qd.honest_repetition = (top / len(tokens) if tokens else 0.0, run)
        return qd.excused

    # The whole computation lives in one function with local names: attribute lookups
    # and intermediate objects were a measurable share of the per-completion cost.
    def _evaluate(self, q: Question, completion: str, entities: bool = True) -> tuple[dict[str, Any], Scored | None]:
        """The components, and (when ``entities``) the whole :class:`Scored` result."""
        cfg = self.config
        qd = self._question(q)
        trace, answer, valid = parse_completion(completion)
        # Blank tags ("[K]", "[?]") are the TRACE's bookkeeping, not claims or path words.
        lowered = BLANK_TAG_RE.sub("", trace).lower()
        if not lowered.isascii():  # a decomposed "café" is the label's word too (labels are NFC)
            lowered = unicodedata.normalize("NFC", lowered)
        ents, claims = self._scanner.scan(lowered)
        gold, edge_index, kg_edges = qd.gold, qd.edge_index, self._edges
        n_ents = len(ents)
        distinct = set(ents)
        # The most times one entity is named, less what the honest TRACE repeats of it (merges):
        # measured under every preset (the toy spam rule reads it; the paper preset prices token
        # repetition instead, so a multi-word label repeated ten times passes it, and the RL
        # monitor needs the count to see that spam anyway).
        if n_ents == len(distinct):
            max_mentions = 1 if n_ents else 0
        else:
            mentions: dict[str, int] = {}
            _count_elements(mentions, ents)
            excused = self._honest(q, qd)
            max_mentions = (max(max(1, n - excused.get(e, 0)) for e, n in mentions.items()) if excused
                            else max(mentions.values()))
        hits = len(gold.intersection(distinct)) if n_ents else 0
        right = is_correct(answer, valid, q.answer_star)

        # edge-verified component (always measured, added only when enabled)
        order = []
        false_edges = 0
        procedure = qd.procedure
        followed = set()
        for c in claims:
            i = edge_index.get(c)
            if i is not None:
                order.append(i)
            elif c not in kg_edges:
                false_edges += 1
            if c in procedure:
                followed.add(c)
        edge_hits = longest_increasing_subsequence(order) if order else 0
        edge_raw = 0.0
        if valid:
            share = edge_hits / qd.hops if qd.hops else 0.0
            # Precision: each claim must state a new edge of the procedure (the gold path, or a
            # branch the procedure carries), so burying the path among other true edges or
            # repeating it earns proportionally less.
            precision = len(followed) / len(claims) if order else 0.0
            edge_raw = cfg.edge_weight * share * precision - min(cfg.edge_false_cap, cfg.edge_false_penalty * false_edges)
        edge_reward = edge_raw if cfg.edge_verified else 0.0

        extra: dict[str, Any]
        if cfg.preset == "toy":
            correctness = cfg.toy_correct if right else cfg.toy_wrong
            coverage = hits / qd.n_gold if qd.n_gold else 0.0
            path_reward = spam = 0.0
            k = cfg.toy_spam_max_mentions
            spammed = max_mentions > k
            if valid:
                if hits >= cfg.toy_min_hits:
                    path_reward = cfg.toy_path_weight * min(coverage, 1.0)
                if spammed:
                    spam = cfg.toy_spam_penalty
            extra = {"spammed": spammed}
        else:
            correctness = cfg.paper_correct if right else cfg.paper_wrong
            tokens = _tokens(lowered)
            n = len(tokens)
            coverage = len(qd.tokens.intersection(tokens)) / qd.n_tokens if qd.n_tokens else 0.0
            top, run = _token_stats(tokens)
            top_share = top / n if n else 0.0
            free_share, free_run = cfg.paper_top_share_free, cfg.paper_run_free
            if top_share > free_share or run > free_run:  # priced from where the honest TRACE's own ends
                self._honest(q, qd)
                free_share, free_run = max(free_share, qd.honest_repetition[0]), max(free_run, qd.honest_repetition[1])
            rep = max(
                0.0,
                (1.0 - cfg.paper_top_share_slope * max(0.0, top_share - free_share))
                * (1.0 - cfg.paper_run_slope * max(0, run - free_run)),
            )
            path_reward = spam = 0.0
            if valid:
                bonus = cfg.paper_hits_bonus if hits >= cfg.paper_min_hits else 0.0
                path_reward = min(cfg.paper_coverage_weight * coverage + bonus, cfg.paper_path_cap)
                spam = path_reward * (1.0 - rep)
            extra = {"spammed": rep < 1.0, "repetition_factor": rep, "top_token_share": top_share, "longest_repeat_run": run}

        total = correctness if cfg.correctness_only else correctness + path_reward - spam + edge_reward
        comp = {
            "correctness": correctness,
            "path_coverage": coverage,
            "path_reward": path_reward,
            "spam_penalty": spam,
            "total": total,
            "edge_reward": edge_raw,
            "edge_hits": edge_hits,
            "false_edges": false_edges,
            "claimed_edges": len(claims),
            "hits": hits,
            "max_mentions": max_mentions,
            "preset": self._name,
            **extra,
        }
        if not entities:
            return comp, None
        trace_entities = list(dict.fromkeys(ents))
        # what readers show, found here once: the entities the completion names, the TRACE's
        # fact clauses as a card shows them, and whether the answer is grounded
        spans = self.entity_matcher.spans
        steps, hidden = trace_steps(trace)
        parsed = ParsedCompletion(
            answer=answer, trace_text=trace, trace_entities=trace_entities,
            path_entities=[e for e in trace_entities if e in gold], valid_format=valid,
            claims=[Claim(src=src, rel=rel, dst=dst, in_kg=(src, rel, dst) in kg_edges,
                          on_gold_path=(src, rel, dst) in edge_index) for src, rel, dst in claims],
            spans=spans(completion), steps=[TraceStep(text=t, spans=spans(t)) for t in steps], steps_hidden=hidden,
        )
        grounded = is_grounded(valid, qd.hops, edge_hits)
        return comp, Scored(parsed=parsed, reward=RewardBreakdown(**comp), correct=right, grounded=grounded)

    def components(self, question: Question, completion: str) -> dict[str, Any]:
        """Every component as a plain dict (the RewardBreakdown fields and extras).

        ``edge_reward`` is always measured and logged; it enters ``total`` only when
        ``config.edge_verified`` is on.
        """
        return self._evaluate(question, completion, False)[0]

    def score(self, question: Question, completion: str) -> Scored:
        """Parse and score ``completion`` once: what an :class:`~library.contracts.Episode` stores."""
        scored = self._evaluate(question, completion)[1]
        assert scored is not None
        return scored

    def score_many(self, questions: Sequence[Question], completions: Sequence[str]) -> list[Scored]:
        """``score`` over aligned sequences (one question per completion)."""
        if len(questions) != len(completions):
            raise ValueError(f"{len(questions)} questions for {len(completions)} completions")
        return [self.score(q, c) for q, c in zip(questions, completions)]

    def components_many(self, questions: Sequence[Question], completions: Sequence[str]) -> list[dict[str, Any]]:
        if len(questions) != len(completions):
            raise ValueError(f"{len(questions)} questions for {len(completions)} completions")
        ev = self._evaluate
        return [ev(q, c, False)[0] for q, c in zip(questions, completions)]

    def component_fn(self, name: str, memo_size: int = 8192) -> Callable[[Question, str], float]:
        """A ``(question, completion) -> float`` for one component, e.g. for one TRL
        reward function per component. The functions of one model share a bounded memo,
        so asking for five components of the same batch scores each completion once.

        >>> # rm.component_fn("edge_reward")(question, completion) -> 0.5
        """
        if name not in COMPONENTS:
            raise ValueError(f"unknown reward component {name!r}; expected one of {', '.join(COMPONENTS)}")

        def fn(question: Question, completion: str) -> float:
            key = (question.id, question.split, completion)
            comp = self._memo.get(key)
            if comp is None or comp.get("_entities") != question.path_star.entities:
                comp = dict(self._evaluate(question, completion, False)[0], _entities=question.path_star.entities)
                self._memo[key] = comp
                while len(self._memo) > memo_size:
                    self._memo.popitem(last=False)
            return float(comp[name])

        fn.__name__ = f"reward_{name}"
        return fn
