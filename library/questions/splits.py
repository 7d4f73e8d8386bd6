"""Building the dataset: the train, eval, train_hard, eval_shuffled and dev splits, checked
for uniqueness and leakage, with their stats (``kgr data``).

Everything is deterministic under a seed: every random choice goes through a seeded
``random.Random`` over a sorted (or otherwise order-fixed) list; sets are used only for
membership tests, never iterated. Per-split generators are seeded with strings
(``f"{seed}:eval"``), which ``random`` hashes with SHA-512, not ``hash()``, so
``PYTHONHASHSEED`` cannot change the output.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from tqdm import tqdm

from library.contracts import LETTERS, GoldPath, PathEdge, Question
from library.errors import DataFileError
from library.questions.distractors import distractor_candidates
from library.jsonl import dumps_line
from library.graph.kg import KnowledgeGraph, load_kg
from library.questions.leakage import entity_seq, leakage_report, path_edges, windows
from library.questions.multiple_choice import make_question, question_id, shuffle_question, verify_unique
from library.graph.check import WIDTHS, count_chains, smallest_width
from library.graph.oracle import composable, oracle_report, question_walk, tree_width
from library.questions.split_set import SPLIT_FILES, STATS_FILE, changed_files, write_split_set



#: The oracle accuracy (every KG fact taught) the held-out splits must reach to be written.
MIN_ORACLE = 0.95


class DatasetError(ValueError):
    """The KG cannot supply the requested questions under the uniqueness and leakage rules."""


class OverwriteRefused(DatasetError):
    """The output folder holds other splits and the caller declined to replace them."""



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
    # How questions order their steps (library/questions/wording.py: STEP_ORDERS): "chain" (the data
    # files') or "keyed" (later steps keyed by tags, shuffled; data/keyed, docs/FINDINGS.md finding 41)
    step_order: str = "chain"
    # The most entities a question's TRACE may hold at one hop (library/graph/oracle.py: where a hop
    # branches, every successor is carried). None: the narrowest of graph.check.WIDTHS that fills
    # the splits (1 on a functional graph: no hop branches).
    max_width: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kg_path", Path(self.kg_path))
        object.__setattr__(self, "out_dir", Path(self.out_dir))
        if len(self.train_hop_weights) != len(self.train_hops):
            raise ValueError("train_hop_weights needs one weight per entry of train_hops")
        from library.questions.wording import STEP_ORDERS

        if self.step_order not in STEP_ORDERS:
            raise ValueError(f"step_order {self.step_order!r}: expected one of {STEP_ORDERS}")
        if set(self.train_hops) & set(self.eval_hops):
            raise ValueError("train_hops and eval_hops must not overlap: eval hops are the unseen ones")
        if self.max_width is not None and self.max_width < 1:
            raise ValueError(f"max_width {self.max_width}: a TRACE holds at least one entity a hop")

    @property
    def width(self) -> int:
        """The resolved :attr:`max_width` (:func:`build_dataset` resolves None before building)."""
        if self.max_width is None:
            raise ValueError("max_width is resolved by build_dataset")
        return self.max_width



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
        # Only chains the procedure walks as a tree no wider than the width (library/graph/oracle.py):
        # with lookahead ruled out, every branch is carried, and the answer is the one option held.
        if key in self.keys or not composable(self.kg, path, self.config.width):
            return None
        q = make_question(self.kg, path, self.rng, self.split, len(self.questions) + 1, seed=self.config.seed,
                          answer_slot=self.slots.current(), max_distance=self.config.max_distance,
                          step_order=self.config.step_order)
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
            f"{builder.split} questions with a unique answer that are solvable by composition carrying at most "
            f"{builder.config.width} entit{'y' if builder.config.width == 1 else 'ies'} a hop; `kgr kg check "
            f"{kg.source}` counts the chains the graph has by width: ask for fewer questions "
            "(--n-eval, --n-train-hard, --n-dev) or a wider --max-width, or give the graph more edges")


def _extend_through(kg: KnowledgeGraph, edge: PathEdge, hops: int, pos: int, rng: random.Random) -> GoldPath | None:
    """A random simple path of ``hops`` edges whose edge number ``pos`` is ``edge``."""
    nodes, edges = [edge.src, edge.dst], [edge]
    for _ in range(pos):
        options = [e for e in kg.in_edges(nodes[0]) if e.src not in nodes]
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
    # oracle accuracy per split and per taught-fact set (library/graph/oracle.py)
    oracle: dict[str, dict[str, float]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # file name -> sha256
    step_order: str = "chain"  # the questions' wording (DatasetConfig.step_order)
    max_width: int = 1  # the most entities a TRACE holds at one hop (DatasetConfig.max_width, resolved)
    widths: dict[str, dict[str, int]] = field(default_factory=dict)  # split -> widest set held -> n
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
                 f"seed {self.seed}, steps in {self.step_order} order, at most {self.max_width} "
                 f"entit{'y' if self.max_width == 1 else 'ies'} held a hop, in {self.generation_seconds:.1f} s"]
        for split, by_hop in self.counts.items():
            hops = ", ".join(f"{h}: {n}" for h, n in by_hop.items())
            letters = " ".join(f"{k}{v}" for k, v in self.answer_letters[split].items())
            widths = "" if self.max_width == 1 else "   widths " + ", ".join(f"{w}: {n}" for w, n in self.widths[split].items())
            lines.append(f"  {split:<14} {sum(by_hop.values()):>5}  hops {hops}{widths}   answers {letters}   "
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


def _width_counts(kg: KnowledgeGraph, questions: list[Question]) -> dict[str, int]:
    c = Counter(tree_width(q.meta["start"], question_walk(kg, q)) for q in questions)
    return {str(w): c[w] for w in sorted(c)}


def _sources(questions: list[Question]) -> dict[str, int]:
    c = Counter(d["source"] for q in questions for d in q.meta["distractors"])
    return {k: v for k, v in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))}


def source_kg(data_dir: str | Path) -> Path:
    """The KG a folder of splits was generated from: the one its stats.json names (as ``kgr
    data`` was given it), else ``kg.json`` beside the splits.

    >>> source_kg("data")
    PosixPath('data/kg.json')
    """
    data_dir = Path(data_dir)
    stats = data_dir / STATS_FILE
    if stats.exists():
        try:
            source = json.loads(stats.read_text())["kg"]["source"]
        except (ValueError, KeyError, TypeError) as exc:
            raise DataFileError(stats, f"names no KG (kg.source): {exc}") from exc
        if Path(source).exists():
            return Path(source)
        raise DataFileError(stats, f"names the KG {source}, which does not exist here; pass --kg")
    if (data_dir / "kg.json").exists():
        return data_dir / "kg.json"
    raise DataFileError(data_dir, "has no stats.json naming its KG and no kg.json; pass --kg")


def build_dataset(config: DatasetConfig, confirm: Callable[[list[str]], bool] | None = None) -> DatasetStats:
    """Generate all four splits from ``config.kg_path`` into ``config.out_dir`` and return stats.

    With ``config.max_width`` None, the narrowest width of :data:`WIDTHS` whose chains fill the
    splits is used: the count of chains (:func:`library.graph.check.count_chains`) names where
    to start, and a width whose splits still cannot be filled (leakage and distractor rules
    reject chains too) gives way to the next.

    Raises :class:`library.errors.DataFileError` for a bad KG file and :class:`DatasetError`
    when the graph cannot supply the questions or (never expected) a check fails; in both
    cases nothing is written. Where ``config.out_dir`` already holds split files that would
    change, ``confirm(names)`` is asked first (None: overwrite); the set is written whole
    (:func:`library.questions.split_set.write_split_set`).
    """
    if Path(config.out_dir).exists() and not Path(config.out_dir).is_dir():
        raise DataFileError(config.out_dir, "is a file; --out takes the folder the splits are written to")
    if config.max_width is not None:
        return _build_at_width(config, confirm)
    kg = load_kg(config.kg_path)
    per_hop = -(-(config.n_eval + config.n_train_hard + config.n_dev) // len(config.eval_hops))
    report = {"chains": {str(h): {str(w): n for w, n in sorted(c.items())}
                         for h, c in count_chains(kg, max(config.eval_hops), WIDTHS).items()}}
    first = smallest_width(report, per_hop, config.eval_hops) or max(WIDTHS)
    error: DatasetError | None = None
    for width in [w for w in WIDTHS if w >= first]:
        try:
            return _build_at_width(replace(config, max_width=width), confirm)
        except OverwriteRefused:
            raise
        except DatasetError as exc:
            error = exc
    assert error is not None
    raise error


def _build_at_width(config: DatasetConfig, confirm: Callable[[list[str]], bool] | None = None) -> DatasetStats:
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
    oracle = oracle_report(kg, splits)
    eval_edges = path_edges(eval_qs)
    train_edges = path_edges(train_qs)
    one_hop = path_edges(q for q in train_qs if q.hop_len == 1)
    if any(ok != n for ok, n in verified.values()) or any(leakage.values()):
        raise DatasetError(f"generated questions failed their checks: unique={verified}, leakage={leakage}")
    # Never write data no model can solve by composing the facts it is taught (the pipeline
    # teaches every KG fact): the held-out splits must be solvable by the oracle.
    unsolvable = {split: acc for split, acc in oracle["kg"].items()
                  if split in ("eval", "train_hard", "dev") and acc < MIN_ORACLE}
    if unsolvable:
        raise DatasetError(f"{kg.source}: the oracle that knows every fact solves only "
                           + ", ".join(f"{acc:.0%} of {split}" for split, acc in unsolvable.items())
                           + f" (needs {MIN_ORACLE:.0%}); `kgr kg check {kg.source}` shows where the graph branches")

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
        step_order=config.step_order,
        max_width=config.width,
        widths={name: _width_counts(kg, qs) for name, qs in splits.items()},
    )
    files = {SPLIT_FILES[name]: "".join(dumps_line(q) for q in qs).encode("utf-8") for name, qs in splits.items()}
    changed = changed_files(config.out_dir, files)
    if changed and confirm is not None and not confirm(changed):
        raise OverwriteRefused(f"{config.out_dir} already holds other splits ({', '.join(changed)} would change); "
                               "nothing was written")
    write_split_set(config.out_dir, files, stats_json := stats.to_json())
    stats.files = stats_json["files"]
    stats.generation_seconds = round(time.perf_counter() - t0, 2)
    return stats
