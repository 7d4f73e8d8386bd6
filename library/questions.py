"""Multi-hop multiple-choice questions generated from knowledge-graph paths.

A question names the start entity and the whole relation chain, so exactly one option is
reachable; the three distractors are near misses of the answer's type that the chain
provably does not reach (docs/DESIGN.md, "Lessons").

>>> from library.kg import KnowledgeGraph
>>> kg = KnowledgeGraph.from_dict({
...     "version": "1", "domain": "toy",
...     "entities": [{"id": "S", "label": "TLS handshake error", "type": "symptom"},
...                  {"id": "C", "label": "clock skew", "type": "cause"},
...                  {"id": "F", "label": "sync clocks with NTP", "type": "fix"}],
...     "relations": [{"id": "caused_by", "label": "is caused by"},
...                   {"id": "fixed_by", "label": "is fixed by"}],
...     "edges": [{"src": "S", "rel": "caused_by", "dst": "C"},
...               {"src": "C", "rel": "fixed_by", "dst": "F"}]})
>>> path = kg.path_from_entities(["S", "C", "F"], ["caused_by", "fixed_by"])
>>> question_text(kg, "S", ["caused_by", "fixed_by"])
'Start at TLS handshake error. It is caused by [L], which is fixed by [?]. (2 steps)'
>>> reference_trace(kg, path)
'TLS handshake error is caused by [L] clock skew [L], clock skew is fixed by [?] sync clocks with NTP.'

Everything is deterministic under a seed: every random choice goes through a seeded
``random.Random`` over a sorted (or otherwise order-fixed) list; sets are used only for
membership tests, never iterated. Per-split generators are seeded with strings
(``f"{seed}:eval"``), which ``random`` hashes with SHA-512, not ``hash()``, so
``PYTHONHASHSEED`` cannot change the output.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
import weakref
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from tqdm import tqdm

from library.answer_format import FORMAT_INSTRUCTIONS, render_completion, tag_answer
from library.contracts import BLANK_TAG_POOL, FINAL_TAG, LETTERS, GoldPath, PathEdge, Question, Reference
from library.facts import fact_clause
from library.jsonl import atomic_write_json, write_jsonl_atomic
from library.kg import KnowledgeGraph, load_kg

SPLIT_FILES = {
    "train": "train.jsonl",
    "eval": "eval.jsonl",
    "train_hard": "train_hard.jsonl",
    "eval_shuffled": "eval_shuffled.jsonl",
    "dev": "dev.jsonl",
}
STATS_FILE = "stats.json"
ID_FORMATS = {"train": "train-{:05d}", "eval": "eval-{:04d}", "train_hard": "hard-{:04d}", "dev": "dev-{:04d}"}

# Where a distractor came from (recorded in meta.distractors[].source), in tiers, best first:
#  tier 0  wrong_relation: break the chain at one hop by following another relation, then
#                          follow the rest of the chain;
#          sibling:        at one hop take another target of the same relation (one that a
#                          different source entity points to), then follow the rest;
#  tier 1  stop_early (an intermediate path entity), overshoot (one hop past the answer),
#          neighbour (adjacent to a path entity);
#  tier d  nearby_<d>: same type at undirected distance d (2..max_distance) from the path.
# Neither tier ever reaches across types or into kg.reach(start, chain).
DISTRACTOR_SOURCES = ("wrong_relation", "sibling", "stop_early", "overshoot", "neighbour", "nearby_<d>")


class DatasetError(ValueError):
    """The KG cannot supply the requested questions under the uniqueness and leakage rules."""


# --------------------------------------------------------------------------- config
@dataclass(frozen=True)
class DatasetConfig:
    """Every knob of the generator, with its default, in one place.

    >>> DatasetConfig().n_eval, DatasetConfig().eval_hops, DatasetConfig().train_hops
    (300, (4, 5), (1, 2, 3))
    """

    kg_path: Path = Path("data/kg.json")
    out_dir: Path = Path("data")
    seed: int = 0
    # The functional KG (one successor per entity and relation, docs/KG.md) has 779 edges, so
    # 1-3-hop questions with three admissible distractors run out near 2,470.
    n_train: int = 2400
    n_eval: int = 300  # split evenly over eval_hops
    n_train_hard: int = 300  # split evenly over eval_hops
    # Recipe sweeps choose on dev (4-5 hops, disjoint in paths from eval and train_hard);
    # eval.jsonl only reports a chosen recipe.
    n_dev: int = 100
    train_hops: tuple[int, ...] = (1, 2, 3)
    train_hop_weights: tuple[int, ...] = (1, 2, 2)  # target mix of train_hops; spills over where the graph runs out
    eval_hops: tuple[int, ...] = (4, 5)
    max_distance: int = 3  # farthest same-type fallback distractor, in undirected hops from the path
    attempts_per_question: int = 200  # sampling budget before giving up on a 4-5-hop split
    progress: bool | None = None  # tqdm bars; None = only on a terminal

    def __post_init__(self) -> None:
        object.__setattr__(self, "kg_path", Path(self.kg_path))
        object.__setattr__(self, "out_dir", Path(self.out_dir))
        if len(self.train_hop_weights) != len(self.train_hops):
            raise ValueError("train_hop_weights needs one weight per entry of train_hops")
        if set(self.train_hops) & set(self.eval_hops):
            raise ValueError("train_hops and eval_hops must not overlap: eval hops are the unseen ones")


# --------------------------------------------------------------------------- graph index
class _Index:
    """Sorted adjacency lists built once per KG (the KG class offers per-relation lookups;
    distractor search needs any-relation and undirected views, many thousands of times)."""

    def __init__(self, kg: KnowledgeGraph):
        undirected: dict[str, set[str]] = defaultdict(set)
        incoming: dict[str, list[PathEdge]] = defaultdict(list)
        for e in kg.edges:
            undirected[e.src].add(e.dst)
            undirected[e.dst].add(e.src)
            incoming[e.dst].append(e)
        self.undirected = {k: sorted(v) for k, v in undirected.items()}
        self.incoming = {k: sorted(v, key=lambda e: (e.rel, e.src)) for k, v in incoming.items()}
        self.label_to_id = {ent.label: ent.id for ent in kg.entities.values()}

    def neighbours(self, entity: str) -> list[str]:
        return self.undirected.get(entity, [])


_INDEXES: "weakref.WeakKeyDictionary[KnowledgeGraph, _Index]" = weakref.WeakKeyDictionary()


def _index(kg: KnowledgeGraph) -> _Index:
    if kg not in _INDEXES:
        _INDEXES[kg] = _Index(kg)
    return _INDEXES[kg]


# --------------------------------------------------------------------------- wording
def blank_tags(start: str, chain: Sequence[str]) -> list[str]:
    """The tags of a question's blanks: random capitals for the inner blanks, ``?`` for the last.

    Drawn from a generator seeded by the question's start and chain, so a question's wording
    is a function of its path alone (the demo page reads typed questions back the same way)
    and no tag says where in the chain its blank is.

    >>> blank_tags("s", ["caused_by"])
    ['?']
    >>> len(set(blank_tags("s", ["leads_to"] * 5))), blank_tags("s", ["leads_to"] * 5)[-1]
    (5, '?')
    """
    rng = random.Random("blank-tags:" + start + ":" + ",".join(chain))
    return rng.sample(BLANK_TAG_POOL, len(chain) - 1) + [FINAL_TAG]


def question_text(kg: KnowledgeGraph, start: str, chain: Sequence[str], tags: Sequence[str] | None = None) -> str:
    """The question: the start entity, then every relation of the chain in order, each blank tagged.

    The step count is stated too, so the question can only be read one way (the public
    attempt named only the first relation, leaving most questions with several answers).
    Every blank carries a tag (:func:`blank_tags`), the last one ``[?]``: chains repeat
    relations ("leads to ..., which leads to ..."), and measured on dev, a model trained on
    1-3 hops that copied untagged relations lost its place on 4-5 hops and never stopped
    (docs/RECIPE.md). A tag is a unique anchor: the TRACE copies the text after it. ``tags``
    overrides the tags (the knowledge rows state single facts under random tags).

    >>> from library.kg import KnowledgeGraph
    >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
    ...     "entities": [{"id": "s", "label": "disk full", "type": "symptom"}],
    ...     "relations": [{"id": "caused_by", "label": "is caused by"},
    ...                   {"id": "leads_to", "label": "leads to"},
    ...                   {"id": "uses_tool", "label": "uses tool"}], "edges": []})
    >>> question_text(kg, "s", ["caused_by"])
    'Start at disk full. It is caused by [?]. (1 step)'
    >>> question_text(kg, "s", ["caused_by", "leads_to", "uses_tool"])
    'Start at disk full. It is caused by [R], which leads to [Q], which uses tool [?]. (3 steps)'
    """
    tags = blank_tags(start, chain) if tags is None else tags
    parts = [f"{kg.relation_label(rel)} [{tag}]" for rel, tag in zip(chain, tags)]
    steps = f"{len(chain)} step" + ("s" if len(chain) != 1 else "")
    return f"Start at {kg.label(start)}. It " + ", which ".join(parts) + f". ({steps})"


def reference_trace(kg: KnowledgeGraph, path: GoldPath) -> str:
    """The canonical trace (docs/CONTRACTS.md): one fact clause per hop, in the question's order.

    Each clause is :func:`library.facts.fact_clause`, ``"<src> <rel> [K] <dst> [K]"``, the exact
    words the knowledge rows teach the fact in; clauses are joined by ``", "``. The tag ``[K]``
    of hop *i* is the question's *i*-th blank tag, so the model copies the question from one tag
    to the next: after ``"[K], "`` it restates the entity it just wrote, copies the relation
    that follows ``[K]`` in the question, then that relation's tag, and recalls the fact. The
    last hop's tag is ``[?]``, after which the TRACE ends on the answer's letter. The reward
    reads the trace with the tags removed (:data:`library.contracts.BLANK_TAG_RE`).
    """
    tags = blank_tags(path.entities[0], [e.rel for e in path.edges])
    return ", ".join(fact_clause(kg, e.src, e.rel, e.dst, tag) for e, tag in zip(path.edges, tags)) + "."


def render_prompt(question: str, options: dict[str, str]) -> str:
    """The user message: question, the four options, the answer format. No chat template.

    Each option is written ``<label> (<letter>)``, letter after the label: the reference
    completion ends its TRACE on the answer's label followed by its letter, which the model can
    then copy from the prompt right after the label it has just written. Measured on dev with
    ``A) <label>`` options: after 192 training questions the model answered one constant letter
    for every question (docs/RECIPE.md), as finding the letter *before* a label is a lookup it
    had not learned.

    >>> print(render_prompt("Start at a. It is caused by what? (1 step)",
    ...                     {"A": "b", "B": "c", "C": "d", "D": "e"}))
    Start at a. It is caused by what? (1 step)
    b (A)
    c (B)
    d (C)
    e (D)
    Answer in two lines:
    TRACE: <the path, naming each entity>
    ANSWER: <letter>
    """
    lines = [question] + [f"{options[letter]} ({letter})" for letter in LETTERS] + [FORMAT_INSTRUCTIONS]
    return "\n".join(lines)


# --------------------------------------------------------------------------- distractors
def distractor_candidates(kg: KnowledgeGraph, path: GoldPath, max_distance: int = 3) -> list[tuple[str, str]]:
    """Every admissible distractor for ``path`` as ``(entity id, source)``, best tier first.

    Admissible: the answer's type, not the answer, not the start, and never in
    ``kg.reach(start, chain)`` (which allows revisits, so it over-approximates what the
    chain reaches: nothing the chain could reach under any reading becomes a distractor).

    >>> from library.kg import KnowledgeGraph
    >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
    ...     "entities": [{"id": "s", "label": "s", "type": "symptom"},
    ...                  {"id": "c1", "label": "c1", "type": "cause"},
    ...                  {"id": "c2", "label": "c2", "type": "cause"},
    ...                  {"id": "f1", "label": "f1", "type": "fix"},
    ...                  {"id": "f2", "label": "f2", "type": "fix"},
    ...                  {"id": "f3", "label": "f3", "type": "fix"}],
    ...     "relations": [{"id": "caused_by", "label": "is caused by"},
    ...                   {"id": "fixed_by", "label": "is fixed by"},
    ...                   {"id": "prevented_by", "label": "is prevented by"}],
    ...     "edges": [{"src": "s", "rel": "caused_by", "dst": "c1"},
    ...               {"src": "c1", "rel": "fixed_by", "dst": "f1"},
    ...               {"src": "c1", "rel": "prevented_by", "dst": "f2"},
    ...               {"src": "c2", "rel": "fixed_by", "dst": "f1"},
    ...               {"src": "c2", "rel": "fixed_by", "dst": "f3"}]})
    >>> distractor_candidates(kg, kg.path_from_entities(["s", "c1", "f1"], ["caused_by", "fixed_by"]))
    [('f2', 'wrong_relation'), ('f3', 'sibling')]
    """
    idx = _index(kg)
    entities, chain = path.entities, [e.rel for e in path.edges]
    start, answer = entities[0], entities[-1]
    want = kg.type_of(answer)
    reach = set(kg.reach(start, chain))
    found: dict[str, str] = {}

    def offer(candidates: Iterable[str], source: str) -> None:
        for c in candidates:
            if c not in found and c != start and c not in reach and kg.type_of(c) == want:
                found[c] = source

    # Tier 0: break the chain at exactly one hop, then follow the rest of it faithfully.
    for i, rel in enumerate(chain):
        rest = chain[i + 1:]
        for e in kg.out_edges(entities[i]):
            if e.rel != rel:
                offer(kg.reach(e.dst, rest), "wrong_relation")
    for i, rel in enumerate(chain):
        rest = chain[i + 1:]
        for other_src in kg.predecessors(entities[i + 1], rel):
            if other_src == entities[i]:
                continue
            for sibling in kg.successors(other_src, rel):
                if sibling != entities[i + 1]:
                    offer(kg.reach(sibling, rest), "sibling")
    # Tier 1: one step off the path.
    offer(entities[1:-1], "stop_early")
    offer([e.dst for e in kg.out_edges(answer)], "overshoot")
    for ent in entities:
        offer(idx.neighbours(ent), "neighbour")
    # Tier d: same type at undirected distance d >= 2 from the path, nearest first.
    seen = set(entities)
    frontier = sorted(seen)
    for dist in range(1, max_distance + 1):
        nxt = sorted({nb for node in frontier for nb in idx.neighbours(node) if nb not in seen})
        seen.update(nxt)
        if dist >= 2:
            offer(nxt, f"nearby_{dist}")
        frontier = nxt
    return list(found.items())


def pick_distractors(kg: KnowledgeGraph, path: GoldPath, rng: random.Random, k: int = 3,
                     max_distance: int = 3) -> list[tuple[str, str]] | None:
    """``k`` distractors as ``(entity id, source)``, filled tier by tier (random within a
    tier), or None if there are too few admissible ones.

    Tiers are filled in order so that a far-away entity is used only when near misses run
    out: tier 0 breaks the chain at one hop, tier 1 is one step off the path, tier d >= 2
    is at undirected distance d.
    """
    tiers: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for ent, source in distractor_candidates(kg, path, max_distance=max_distance):
        tiers[_tier(source)].append((ent, source))
    chosen: list[tuple[str, str]] = []
    for rank in sorted(tiers):
        need = k - len(chosen)
        if need <= 0:
            break
        pool = tiers[rank]  # candidate order is deterministic (graph order), so sample is too
        chosen.extend(rng.sample(pool, min(need, len(pool))))
    return chosen if len(chosen) == k else None


def _tier(source: str) -> int:
    if source in ("wrong_relation", "sibling"):
        return 0
    if source in ("stop_early", "overshoot", "neighbour"):
        return 1
    return int(source.rsplit("_", 1)[1])  # nearby_<d>


# --------------------------------------------------------------------------- questions
def question_id(split: str, idx: int) -> str:
    """``question_id("train", 1) == "train-00001"``, ``eval-0001``, ``hard-0001``."""
    return ID_FORMATS[split].format(idx)


def make_question(kg: KnowledgeGraph, path: GoldPath, rng: random.Random, split: str, idx: int, *,
                  seed: int = 0, answer_slot: int | None = None, max_distance: int = 3) -> Question | None:
    """The question for ``path`` (its end is the answer), or None when the KG has fewer than
    three admissible distractors for it.

    ``answer_slot`` (0-3) fixes the answer's letter, which lets :func:`build_dataset` balance
    letters exactly; by default the rng picks it. The other options are in rng order.

    >>> import json
    >>> from library.kg import KnowledgeGraph
    >>> kg = KnowledgeGraph.from_dict({"version": "1", "domain": "d",
    ...     "entities": [{"id": "s", "label": "TLS handshake error", "type": "symptom"}]
    ...         + [{"id": f"c{i}", "label": f"cause {i}", "type": "cause"} for i in range(5)],
    ...     "relations": [{"id": "caused_by", "label": "is caused by"},
    ...                   {"id": "leads_to", "label": "leads to"}],
    ...     "edges": [{"src": "s", "rel": "caused_by", "dst": "c0"}]
    ...         + [{"src": f"c{i}", "rel": "leads_to", "dst": f"c{i+1}"} for i in range(4)]})
    >>> q = make_question(kg, kg.path_from_entities(["s", "c0"], ["caused_by"]),
    ...                   random.Random(0), "train", 1, answer_slot=2)
    >>> q.id, q.answer_star, q.options["C"], q.question
    ('train-00001', 'C', 'cause 0', 'Start at TLS handshake error. It is caused by [?]. (1 step)')
    >>> q.ref.completion
    'TRACE: TLS handshake error is caused by [?] cause 0 (C).\\nANSWER: C'
    >>> sorted(d["source"] for d in q.meta["distractors"])
    ['nearby_2', 'nearby_3', 'overshoot']
    >>> verify_unique(kg, q)
    True
    """
    chain = [e.rel for e in path.edges]
    start, answer = path.entities[0], path.entities[-1]
    distractors = pick_distractors(kg, path, rng, max_distance=max_distance)
    if distractors is None:
        return None
    rng.shuffle(distractors)
    slot = rng.randrange(4) if answer_slot is None else answer_slot
    order = [ent for ent, _ in distractors]
    order.insert(slot, answer)
    options = {letter: kg.label(ent) for letter, ent in zip(LETTERS, order)}
    letter = LETTERS[slot]
    text = question_text(kg, start, chain)
    trace = reference_trace(kg, path)
    return Question(
        id=question_id(split, idx),
        split=split,
        hop_len=len(chain),
        question=text,
        options=options,
        answer_star=letter,
        path_star=path,
        prompt=render_prompt(text, options),
        ref=Reference(trace=trace, completion=render_completion(tag_answer(trace, letter), letter)),
        meta={
            "start": start,
            "chain": chain,
            "answer": answer,
            "option_ids": dict(zip(LETTERS, order)),
            "distractors": [{"id": ent, "source": source} for ent, source in distractors],
            "reach_size": len(kg.reach(start, chain)),
            "seed": seed,
        },
    )


def verify_unique(kg: KnowledgeGraph, question: Question) -> bool:
    """True when exactly one option is reachable by the stated chain, and it is the keyed one.

    Works from the question as written (labels back to ids), so it checks the file, not the
    generator's intentions; it also checks that the question text states exactly this
    start and chain, and that the gold path is a real path of the KG ending at the key.
    """
    idx = _index(kg)
    start, chain = question.meta["start"], list(question.meta["chain"])
    ids = {letter: idx.label_to_id.get(label) for letter, label in question.options.items()}
    if None in ids.values() or len(set(ids.values())) != 4:
        return False
    path = question.path_star
    if (path.entities[0] != start or [e.rel for e in path.edges] != chain
            or ids[question.answer_star] != path.entities[-1] or len(path.edges) != question.hop_len
            or len(set(path.entities)) != len(path.entities)
            or not all(kg.has_edge(e.src, e.rel, e.dst) for e in path.edges)):
        return False
    if question.question != question_text(kg, start, chain):  # the text must state this chain
        return False
    reach = set(kg.reach(start, chain))
    reachable = [letter for letter in LETTERS if ids[letter] in reach]
    return reachable == [question.answer_star]


def shuffle_question(question: Question, rng: random.Random, answer_slot: int | None = None) -> Question:
    """The same question with its options permuted and the answer letter moved.

    The answer always lands on a different letter (``answer_slot`` if given, else a random
    other one), so the copy measures position bias rather than repeating a quarter of the
    originals; the answer text is unchanged.
    """
    letters = list(LETTERS)
    old = letters.index(question.answer_star)
    new = (old + rng.randint(1, 3)) % 4 if answer_slot is None else answer_slot
    if new == old:
        raise ValueError("a shuffled copy must move the answer to another letter")
    others = [question.options[x] for x in letters if x != question.answer_star]
    rng.shuffle(others)
    order = list(others)
    order.insert(new, question.options[question.answer_star])
    options = dict(zip(LETTERS, order))
    label_to_letter = {label: letter for letter, label in question.options.items()}
    old_ids = question.meta["option_ids"]
    letter = LETTERS[new]
    meta = dict(question.meta)
    meta["option_ids"] = {x: old_ids[label_to_letter[options[x]]] for x in LETTERS}
    meta["shuffled_from"] = question.id
    meta["permutation"] = [label_to_letter[options[x]] for x in LETTERS]  # original letter now at A..D
    return question.model_copy(update={
        "id": f"{question.id}-shuf",
        "split": "eval_shuffled",
        "options": options,
        "answer_star": letter,
        "prompt": render_prompt(question.question, options),
        "ref": Reference(trace=question.ref.trace,
                         completion=render_completion(tag_answer(question.ref.trace, letter), letter)),
        "meta": meta,
    })


# --------------------------------------------------------------------------- leakage
def entity_seq(question_or_path: Question | GoldPath) -> tuple[str, ...]:
    path = question_or_path.path_star if isinstance(question_or_path, Question) else question_or_path
    return tuple(path.entities)


def windows(seq: Sequence[str], min_len: int) -> list[tuple[str, ...]]:
    """Every contiguous sub-sequence of ``seq`` with at least ``min_len`` items.

    >>> windows(("a", "b", "c"), 2)
    [('a', 'b'), ('a', 'b', 'c'), ('b', 'c')]
    """
    return [tuple(seq[i:j]) for i in range(len(seq)) for j in range(i + min_len, len(seq) + 1)]


def path_edges(questions: Iterable[Question]) -> set[tuple[str, str, str]]:
    return {(e.src, e.rel, e.dst) for q in questions for e in q.path_star.edges}


def leakage_report(train: list[Question], eval_: list[Question], hard: list[Question],
                   dev: list[Question] = ()) -> dict[str, int]:
    """Counts of every kind of eval leakage we rule out; all must be zero.

    - ``eval_path_in_train``: an eval path (entity sequence) inside a train path;
    - ``eval_path_in_hard`` / ``hard_path_in_eval``: an eval path contiguously inside a
      train_hard path, or the other way round;
    - ``hard_eval_same_question``: train_hard and eval sharing (start, chain, answer);
    - ``shared_question_text``: an eval question text that a training split (or dev) also asks;
    - ``eval_path_in_dev`` / ``dev_path_in_eval`` / ``hard_path_in_dev``: the same containment
      checks between dev and the held-out 4-5-hop splits.
    """
    eval_seqs = {entity_seq(q) for q in eval_}
    min_eval = min((len(s) for s in eval_seqs), default=2)
    eval_windows = {w for s in eval_seqs for w in windows(s, 2)}
    hard_seqs = {entity_seq(q) for q in hard}

    def contains_eval(q: Question) -> bool:
        return any(w in eval_seqs for w in windows(entity_seq(q), min_eval))

    def key(q: Question) -> tuple:
        return q.meta["start"], tuple(q.meta["chain"]), q.meta["answer"]

    eval_texts = {q.question for q in eval_}
    return {
        "eval_path_in_train": sum(contains_eval(q) for q in train),
        "eval_path_in_hard": sum(contains_eval(q) for q in hard),
        "hard_path_in_eval": sum(s in eval_windows for s in hard_seqs),
        "hard_eval_same_question": len({key(q) for q in hard} & {key(q) for q in eval_}),
        "shared_question_text": len(eval_texts & {q.question for q in list(train) + list(hard) + list(dev)}),
        "eval_path_in_dev": sum(contains_eval(q) for q in dev),
        "dev_path_in_eval": sum(entity_seq(q) in eval_windows for q in dev),
        "hard_path_in_dev": sum(any(w in hard_seqs for w in windows(entity_seq(q), min_eval)) for q in dev),
    }


# --------------------------------------------------------------------------- generation
Key = tuple[str, tuple[str, ...], str]


def question_key(path: GoldPath) -> Key:
    """(start, chain, answer): two paths with the same key ask the same question."""
    return path.entities[0], tuple(e.rel for e in path.edges), path.entities[-1]


class _Slots:
    """Answer positions in shuffled blocks of [0, 1, 2, 3], so letters are balanced to
    within one per split; a slot is consumed only when a question is actually made."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.block: list[int] = []

    def current(self) -> int:
        if not self.block:
            self.block = [0, 1, 2, 3]
            self.rng.shuffle(self.block)
        return self.block[-1]

    def consume(self) -> None:
        self.block.pop()


class _Builder:
    """Collects one split's questions, numbering them and enforcing key uniqueness."""

    def __init__(self, kg: KnowledgeGraph, split: str, rng: random.Random, config: DatasetConfig, bar: tqdm):
        self.kg, self.split, self.rng, self.config, self.bar = kg, split, rng, config, bar
        self.slots = _Slots(random.Random(f"{config.seed}:{split}:letters"))
        self.questions: list[Question] = []
        self.keys: set[Key] = set()

    def try_add(self, path: GoldPath) -> Question | None:
        key = question_key(path)
        if key in self.keys:
            return None
        q = make_question(self.kg, path, self.rng, self.split, len(self.questions) + 1, seed=self.config.seed,
                          answer_slot=self.slots.current(), max_distance=self.config.max_distance)
        if q is None:
            return None
        self.slots.consume()
        self.keys.add(key)
        self.questions.append(q)
        self.bar.update(1)
        return q

    def finish(self) -> list[Question]:
        """Shuffle (so any prefix mixes hops, for quick profiles) and renumber."""
        order = list(self.questions)
        self.rng.shuffle(order)
        return [q.model_copy(update={"id": question_id(self.split, i)}) for i, q in enumerate(order, start=1)]


def _per_hop(total: int, hops: Sequence[int], weights: Sequence[int]) -> dict[int, int]:
    """Split ``total`` over ``hops`` by ``weights``; rounding remainder goes to the last hops.

    >>> _per_hop(3000, (1, 2, 3), (1, 2, 2))
    {1: 600, 2: 1200, 3: 1200}
    >>> _per_hop(301, (4, 5), (1, 1))
    {4: 150, 5: 151}
    """
    raw = {h: total * w // sum(weights) for h, w in zip(hops, weights)}
    rest = total - sum(raw.values())
    for h in list(hops)[::-1][:rest]:
        raw[h] += 1
    return raw


def _sample_split(builder: _Builder, hops: int, n: int, accept) -> None:
    """Add ``n`` questions of ``hops`` hops from randomly sampled simple paths that pass
    ``accept``; raises DatasetError when the sampling budget runs out first."""
    kg, rng = builder.kg, builder.rng
    goal = len(builder.questions) + n
    budget = n * builder.config.attempts_per_question
    while len(builder.questions) < goal and budget > 0:
        budget -= 1
        path = kg.sample_path(rng, hops)
        if path is not None and accept(path):
            builder.try_add(path)
    if len(builder.questions) < goal:
        raise DatasetError(
            f"{kg.source}: could only make {n - (goal - len(builder.questions))} of {n} {hops}-hop "
            f"{builder.split} questions with a unique answer; the graph is too small or too sparse")


def _extend_through(kg: KnowledgeGraph, edge: PathEdge, hops: int, pos: int, rng: random.Random) -> GoldPath | None:
    """A random simple path of ``hops`` edges whose edge number ``pos`` is ``edge``."""
    idx = _index(kg)
    nodes, edges = [edge.src, edge.dst], [edge]
    for _ in range(pos):
        options = [e for e in idx.incoming.get(nodes[0], []) if e.src not in nodes]
        if not options:
            return None
        e = rng.choice(options)
        nodes.insert(0, e.src)
        edges.insert(0, e)
    for _ in range(hops - 1 - pos):
        options = [e for e in kg.out_edges(nodes[-1]) if e.dst not in nodes]
        if not options:
            return None
        e = rng.choice(options)
        nodes.append(e.dst)
        edges.append(e)
    return GoldPath(entities=nodes, edges=edges)


def _all_paths(kg: KnowledgeGraph, hops: int, rng: random.Random, cap: int = 200_000) -> Iterable[GoldPath]:
    """Every simple path of ``hops`` edges in rng order; beyond ``cap`` paths, endless random samples."""
    paths = []
    for path in kg.iter_paths(hops):
        paths.append(path)
        if len(paths) >= cap:
            break
    else:
        rng.shuffle(paths)
        return paths

    def sampled() -> Iterable[GoldPath]:
        for _ in range(cap * 10):
            path = kg.sample_path(rng, hops)
            if path is not None:
                yield path
    return sampled()


def _build_train(kg: KnowledgeGraph, config: DatasetConfig, eval_qs: list[Question], bar: tqdm) -> list[Question]:
    """1-3-hop questions: first ones that teach every eval edge, then the target hop mix."""
    rng = random.Random(f"{config.seed}:train")
    builder = _Builder(kg, "train", rng, config, bar)
    quota = _per_hop(config.n_train, config.train_hops, config.train_hop_weights)
    made: Counter[int] = Counter()
    covered: set[tuple[str, str, str]] = set()

    def add(path: GoldPath) -> bool:
        q = builder.try_add(path)
        if q is None:
            return False
        made[q.hop_len] += 1
        covered.update((e.src, e.rel, e.dst) for e in q.path_star.edges)
        return True

    # 1. Compositionality: every edge an eval path uses appears in some training path.
    #    Prefer the hop length furthest below its quota; the 1-hop question is the fallback
    #    that eval sampling guaranteed to exist (_teachable).
    eval_edges = sorted(path_edges(eval_qs))
    rng.shuffle(eval_edges)
    for triple in eval_edges:
        if triple in covered:
            continue
        edge = PathEdge(src=triple[0], rel=triple[1], dst=triple[2])
        hop_order = sorted(config.train_hops, key=lambda h: (made[h] / max(quota[h], 1), -h))
        done = False
        for hops in hop_order:
            for _ in range(10 if hops > 1 else 1):
                path = _extend_through(kg, edge, hops, rng.randrange(hops), rng)
                if path is not None and add(path):
                    done = True
                    break
            if done:
                break
    # 2. Fill each hop length to its quota; shortfalls (the graph has only so many edges
    #    for 1-hop questions) move to the longer hops, which have many more paths.
    deficit = 0
    for hops in sorted(config.train_hops):
        goal = quota[hops] + deficit
        for path in _all_paths(kg, hops, rng):
            if made[hops] >= goal:
                break
            add(path)
        deficit = max(0, goal - made[hops])
    # Still short (even the longest paths ran out): top up from any hop length, longest first.
    for hops in sorted(config.train_hops, reverse=True):
        if len(builder.questions) >= config.n_train:
            break
        for path in _all_paths(kg, hops, rng):
            if len(builder.questions) >= config.n_train:
                break
            add(path)
    if len(builder.questions) < config.n_train:
        raise DatasetError(f"{kg.source}: could only make {len(builder.questions)} of {config.n_train} train questions")
    return builder.finish()


def _teachable(kg: KnowledgeGraph, edge: PathEdge, cache: dict[tuple[str, str, str], bool], max_distance: int) -> bool:
    """Whether the single-edge question for ``edge`` has enough distractors, so training
    can always teach this edge directly."""
    triple = (edge.src, edge.rel, edge.dst)
    if triple not in cache:
        one_hop = GoldPath(entities=[edge.src, edge.dst], edges=[edge])
        cache[triple] = len(distractor_candidates(kg, one_hop, max_distance=max_distance)) >= 3
    return cache[triple]


def _build_eval_and_hard(kg: KnowledgeGraph, config: DatasetConfig, bar_eval: tqdm, bar_hard: tqdm, bar_dev: tqdm
                         ) -> tuple[list[Question], list[Question], list[Question]]:
    teach_cache: dict[tuple[str, str, str], bool] = {}
    eval_b = _Builder(kg, "eval", random.Random(f"{config.seed}:eval"), config, bar_eval)
    eval_asked: set[tuple[str, tuple[str, ...]]] = set()

    def eval_ok(path: GoldPath) -> bool:
        # One question per (start, chain): eval question texts are unique, and a training
        # split can be kept off every eval text by excluding these pairs.
        ask = (path.entities[0], tuple(e.rel for e in path.edges))
        if ask in eval_asked or not all(_teachable(kg, e, teach_cache, config.max_distance) for e in path.edges):
            return False
        eval_asked.add(ask)  # reserved even if make_question then fails: harmless, keeps it simple
        return True

    for hops, n in _per_hop(config.n_eval, config.eval_hops, [1] * len(config.eval_hops)).items():
        _sample_split(eval_b, hops, n, eval_ok)
    eval_qs = eval_b.finish()

    # train_hard: same hop lengths, but no eval path inside one of its paths or vice versa,
    # and never an eval (start, chain) pair, so no eval question text or key is shared.
    hard_qs = _held_out_split(kg, config, "train_hard", config.n_train_hard, eval_qs, eval_asked, bar_hard)
    # dev: the same rules against eval *and* train_hard, so choosing a recipe on dev never
    # looks at an eval path, and the distribution experiment's hard set stays its own.
    held = eval_qs + hard_qs
    dev_qs = _held_out_split(kg, config, "dev", config.n_dev, held,
                             eval_asked | {(q.meta["start"], tuple(q.meta["chain"])) for q in hard_qs}, bar_dev)
    return eval_qs, hard_qs, dev_qs


def _held_out_split(kg: KnowledgeGraph, config: DatasetConfig, split: str, n_total: int, held: list[Question],
                    held_asked: set[tuple[str, tuple[str, ...]]], bar: tqdm) -> list[Question]:
    """A 4-5-hop split that shares no path window (either way) and no (start, chain) with ``held``."""
    held_seqs = {entity_seq(q) for q in held}
    held_windows = {w for s in held_seqs for w in windows(s, min(config.eval_hops) + 1)}
    min_len = min(len(s) for s in held_seqs)
    builder = _Builder(kg, split, random.Random(f"{config.seed}:{split}"), config, bar)

    def ok(path: GoldPath) -> bool:
        seq = tuple(path.entities)
        if (seq[0], tuple(e.rel for e in path.edges)) in held_asked or seq in held_windows:
            return False
        return not any(w in held_seqs for w in windows(seq, min_len))

    for hops, n in _per_hop(n_total, config.eval_hops, [1] * len(config.eval_hops)).items():
        _sample_split(builder, hops, n, ok)
    return builder.finish()


# --------------------------------------------------------------------------- stats + build
@dataclass
class DatasetStats:
    """What :func:`build_dataset` made, and the checks it ran; written to ``stats.json``."""

    kg: dict[str, Any]
    seed: int
    counts: dict[str, dict[str, int]]  # split -> hop -> n
    unique_verified: dict[str, list[int]]  # split -> [verified, total]
    eval_edges: int
    eval_edges_taught: float  # share of eval edges on some train path
    eval_edges_taught_1hop: float  # share of eval edges asked directly as a 1-hop train question
    kg_edges_in_train: float
    leakage: dict[str, int]
    distractor_sources: dict[str, dict[str, int]]
    answer_letters: dict[str, dict[str, int]]
    mean_prompt_chars: dict[str, float]
    max_prompt_chars: dict[str, int]
    # oracle accuracy per split and per taught-fact set (library/oracle.py)
    oracle: dict[str, dict[str, float]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # file name -> sha256
    generation_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        # the wall time is left out so that stats.json, like the splits, is byte-identical per seed
        return {k: v for k, v in self.__dict__.items() if k != "generation_seconds"}

    @property
    def all_verified(self) -> bool:
        return all(ok == n for ok, n in self.unique_verified.values())

    def summary(self) -> str:
        """A readable multi-line report, e.g.::

            Questions from data/kg.json (324 entities, 960 edges), seed 0, in 9.1 s
              train          3000  hops 1: 600, 2: 1200, 3: 1200
              ...
        """
        lines = [f"Questions from {self.kg['source']} ({self.kg['entities']} entities, {self.kg['edges']} edges), "
                 f"seed {self.seed}, in {self.generation_seconds:.1f} s"]
        for split, by_hop in self.counts.items():
            hops = ", ".join(f"{h}: {n}" for h, n in by_hop.items())
            letters = " ".join(f"{k}{v}" for k, v in self.answer_letters[split].items())
            lines.append(f"  {split:<14} {sum(by_hop.values()):>5}  hops {hops}   answers {letters}   "
                         f"prompt {self.mean_prompt_chars[split]:.0f} chars (max {self.max_prompt_chars[split]})")
        verified = sum(ok for ok, _ in self.unique_verified.values())
        total = sum(n for _, n in self.unique_verified.values())
        lines.append(f"  unique answer verified: {verified}/{total}" + ("" if verified == total else "  <-- FAILED"))
        lines.append(f"  eval edges taught in train: {self.eval_edges_taught:.1%} of {self.eval_edges} "
                     f"({self.eval_edges_taught_1hop:.1%} as 1-hop questions); KG edges in train: {self.kg_edges_in_train:.1%}")
        for facts, by_split in self.oracle.items():
            lines.append(f"  oracle ({facts} facts): " + ", ".join(f"{k} {v:.1%}" for k, v in by_split.items()))
        leaks = sum(self.leakage.values())
        lines.append("  leakage checks: " + ("all zero" if leaks == 0 else str(self.leakage)))
        for split, sources in self.distractor_sources.items():
            lines.append(f"  distractors {split:<11} " + ", ".join(f"{k} {v}" for k, v in sources.items()))
        return "\n".join(lines)


def _hop_counts(questions: list[Question]) -> dict[str, int]:
    c = Counter(q.hop_len for q in questions)
    return {str(h): c[h] for h in sorted(c)}


def _sources(questions: list[Question]) -> dict[str, int]:
    c = Counter(d["source"] for q in questions for d in q.meta["distractors"])
    return {k: v for k, v in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))}


def build_dataset(config: DatasetConfig) -> DatasetStats:
    """Generate all four splits from ``config.kg_path`` into ``config.out_dir`` and return stats.

    Raises :class:`library.errors.DataFileError` for a bad KG file and :class:`DatasetError`
    when the graph cannot supply the questions or (never expected) a check fails; in both
    cases nothing is written.
    """
    t0 = time.perf_counter()
    kg = load_kg(config.kg_path)
    disable = None if config.progress is None else not config.progress
    bars = {split: tqdm(total=n, desc=f"{split:<10}", unit="q", disable=disable, leave=False)
            for split, n in (("eval", config.n_eval), ("train_hard", config.n_train_hard), ("dev", config.n_dev),
                             ("train", config.n_train))}
    try:
        eval_qs, hard_qs, dev_qs = _build_eval_and_hard(kg, config, bars["eval"], bars["train_hard"], bars["dev"])
        train_qs = _build_train(kg, config, eval_qs, bars["train"])
    finally:
        for bar in bars.values():
            bar.close()
    # Shuffled copy: each answer moves to the least used other letter so far (ties broken by
    # the rng), which keeps the copy's letters as balanced as the original's.
    shuf_rng = random.Random(f"{config.seed}:eval_shuffled")
    used: Counter[int] = Counter()
    shuffled = []
    for q in eval_qs:
        others = [i for i in range(4) if LETTERS[i] != q.answer_star]
        slot = min(others, key=lambda i: (used[i], shuf_rng.random()))
        used[slot] += 1
        shuffled.append(shuffle_question(q, shuf_rng, answer_slot=slot))
    splits = {"train": train_qs, "eval": eval_qs, "train_hard": hard_qs, "eval_shuffled": shuffled, "dev": dev_qs}

    verified = {name: [sum(verify_unique(kg, q) for q in qs), len(qs)] for name, qs in splits.items()}
    leakage = leakage_report(train_qs, eval_qs, hard_qs, dev_qs)
    from library.oracle import oracle_report  # here, not at the top: oracle imports this module's helpers

    oracle = oracle_report(kg, splits)
    eval_edges = path_edges(eval_qs)
    train_edges = path_edges(train_qs)
    one_hop = path_edges(q for q in train_qs if q.hop_len == 1)
    if any(ok != n for ok, n in verified.values()) or any(leakage.values()):
        raise DatasetError(f"generated questions failed their checks: unique={verified}, leakage={leakage}")

    stats = DatasetStats(
        kg={"source": str(config.kg_path), "version": kg.version, "entities": len(kg.entities), "edges": len(kg.edges)},
        seed=config.seed,
        counts={name: _hop_counts(qs) for name, qs in splits.items()},
        unique_verified=verified,
        eval_edges=len(eval_edges),
        eval_edges_taught=round(len(eval_edges & train_edges) / max(len(eval_edges), 1), 4),
        eval_edges_taught_1hop=round(len(eval_edges & one_hop) / max(len(eval_edges), 1), 4),
        kg_edges_in_train=round(len(train_edges) / max(len(kg.edges), 1), 4),
        leakage=leakage,
        distractor_sources={name: _sources(qs) for name, qs in splits.items() if name != "eval_shuffled"},
        answer_letters={name: {x: sum(q.answer_star == x for q in qs) for x in LETTERS} for name, qs in splits.items()},
        mean_prompt_chars={name: round(sum(len(q.prompt) for q in qs) / max(len(qs), 1), 1) for name, qs in splits.items()},
        max_prompt_chars={name: max((len(q.prompt) for q in qs), default=0) for name, qs in splits.items()},
        oracle=oracle,
    )
    for name, qs in splits.items():
        path = config.out_dir / SPLIT_FILES[name]
        write_jsonl_atomic(path, qs)
        stats.files[SPLIT_FILES[name]] = hashlib.sha256(path.read_bytes()).hexdigest()
    stats.generation_seconds = round(time.perf_counter() - t0, 2)
    atomic_write_json(config.out_dir / STATS_FILE, stats.to_json())
    return stats
