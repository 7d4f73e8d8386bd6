"""Building the dataset: the train, eval, train_hard, eval_shuffled and dev splits, checked
for uniqueness and leakage, with their stats (``kgr data``). Its settings, files and stats:
library/questions/dataset.py; which walks and how many questions: plan.py.

Everything is deterministic under a seed: every random choice goes through a seeded
``random.Random`` over a sorted (or otherwise order-fixed) list; sets are used only for
membership tests, never iterated. Per-split generators are seeded with strings
(``f"{seed}:eval"``), which ``random`` hashes with SHA-512, not ``hash()``, so
``PYTHONHASHSEED`` cannot change the output.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any, Callable, Iterable, Sequence

from tqdm import tqdm

from library.contracts import LETTERS, GoldPath, PathEdge, Question
from library.graph.kg import KnowledgeGraph
from library.graph.oracle import composable, merged, oracle_report, question_walk, walk_width
from library.jsonl import dumps_line
from library.questions.candidates import Candidates
from library.questions.dataset import FAR_FILES, SPLIT_FILES, DatasetConfig, DatasetError, DatasetStats
from library.questions.distractors import distractor_candidates
from library.questions.leakage import entity_seq, leakage_report, path_edges, windows
from library.questions.multiple_choice import make_question, question_id, shuffle_question, verify_unique
from library.questions.split_set import changed_files, write_split_set

#: The oracle accuracy (every KG fact taught) the held-out splits must reach to be written.
MIN_ORACLE = 0.95
#: The fewest questions a far split is written with, unless fewer were asked for (at 50 a 95%
#: interval is about +-14 points).
MIN_FAR = 50


class OverwriteRefused(DatasetError):
    """The output folder holds other splits and the caller declined to replace them."""


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

    def __init__(self, kg: KnowledgeGraph, split: str, rng: random.Random, config: DatasetConfig, bar: tqdm,
                 pool: "Candidates | None" = None):
        self.kg, self.split, self.rng, self.config, self.bar = kg, split, rng, config, bar
        self.pool = pool or Candidates(kg)
        self.slots = _Slots(random.Random(f"{config.seed}:{split}:letters"))
        self.questions: list[Question] = []
        self.keys: set[Key] = set()

    def try_add(self, path: GoldPath) -> Question | None:
        key = question_key(path)
        # Only chains the procedure walks no wider than the width, never coming back to an entity
        # (library/graph/oracle.py): with lookahead ruled out, every branch is carried, and the
        # answer is the one option held.
        if key in self.keys or not composable(self.kg, path, self.config.width, self.config.merging):
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


class Shortfall(DatasetError):
    """A split the graph could not fill: ``made`` of ``wanted`` ``hops``-hop ``split`` questions."""

    def __init__(self, message: str, split: str, hops: int, made: int, wanted: int):
        super().__init__(message)
        self.split, self.hops, self.made, self.wanted = split, hops, made, wanted


def walks_text(width: int, merges: bool) -> str:
    """How the questions' walks were admitted, as messages and summaries say it.

    >>> walks_text(1, False), walks_text(3, True)
    ('carrying at most 1 entity a hop', 'carrying at most 3 entities a hop, branches merging')
    """
    return f"carrying at most {width} entit{'y' if width == 1 else 'ies'} a hop" + (", branches merging" if merges else "")


def _sample_split(builder: _Builder, hops: int, n: int, accept, partial: bool = False) -> None:
    """Add ``n`` questions of ``hops`` hops from randomly sampled simple paths that pass
    ``accept``; where random paths stop giving new questions (``stall_attempts`` in a row, or the
    sampling budget is spent), from every admissible chain of the graph in random order
    (:class:`Candidates`). Raises :class:`Shortfall` when even those run out, unless ``partial``
    (then the split keeps what it has)."""
    kg, rng, config = builder.kg, builder.rng, builder.config
    goal = len(builder.questions) + n
    budget = n * config.attempts_per_question
    idle = 0
    while len(builder.questions) < goal and budget > 0 and idle < config.stall_attempts:
        budget -= 1
        before = len(builder.questions)
        path = kg.sample_path(rng, hops)
        if path is not None and accept(path):
            builder.try_add(path)
        # a draw that found no path of this length at all is 50 random walks that died early
        idle = 0 if len(builder.questions) > before else idle + (1 if path is not None else 20)
    if len(builder.questions) < goal:
        for path in builder.pool.shuffled(hops, config.width, config.merging, rng):
            if len(builder.questions) >= goal:
                break
            if accept(path):
                builder.try_add(path)
    made = n - (goal - len(builder.questions))
    if made < n and not partial:
        raise Shortfall(
            f"{kg.source}: could only make {made} of {n} {hops}-hop {builder.split} questions with a unique answer "
            f"that are solvable by composition {walks_text(config.width, config.merging)}", builder.split, hops,
            made, n)


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


def _build_train(kg: KnowledgeGraph, config: DatasetConfig, eval_qs: list[Question], bar: tqdm,
                 partial: bool = False) -> list[Question]:
    """1-3-hop questions (``train_hops``): first ones that teach every eval edge, then the target
    hop mix; with ``partial``, as many as the graph gives up to ``n_train``."""
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
    if len(builder.questions) < config.n_train and not partial:
        raise Shortfall(f"{kg.source}: could only make {len(builder.questions)} of {config.n_train} train questions",
                        "train", 0, len(builder.questions), config.n_train)
    return builder.finish()


def _teachable(kg: KnowledgeGraph, edge: PathEdge, cache: dict[tuple[str, str, str], bool], max_distance: int) -> bool:
    """Whether the single-edge question for ``edge`` has enough distractors, so training
    can always teach this edge directly."""
    triple = (edge.src, edge.rel, edge.dst)
    if triple not in cache:
        one_hop = GoldPath(entities=[edge.src, edge.dst], edges=[edge])
        cache[triple] = len(distractor_candidates(kg, one_hop, max_distance=max_distance, enough=3)) >= 3
    return cache[triple]


def build_held_out(kg: KnowledgeGraph, config: DatasetConfig, bars: dict[str, tqdm], pool: Candidates,
                   partial: bool = False) -> tuple[list[Question], list[Question], list[Question]]:
    """eval, train_hard and dev at ``config``'s sizes and walks (``config.max_width`` resolved);
    with ``partial``, each as full as the graph allows after the ones before it (what
    library/questions/plan.py sizes the splits by), else :class:`Shortfall` at the first short one."""
    teach_cache: dict[tuple[str, str, str], bool] = {}
    bar_eval, bar_hard, bar_dev = bars["eval"], bars["train_hard"], bars["dev"]
    eval_b = _Builder(kg, "eval", random.Random(f"{config.seed}:eval"), config, bar_eval, pool)
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
        _sample_split(eval_b, hops, n, eval_ok, partial)
    eval_qs = eval_b.finish()

    # train_hard: same hop lengths, but no eval path inside one of its paths or vice versa,
    # and never an eval (start, chain) pair, so no eval question text or key is shared.
    hard_qs = _held_out_split(kg, config, "train_hard", config.n_train_hard, eval_qs, eval_asked, bar_hard, pool,
                              partial, config.eval_hops)
    # dev: the same rules against eval *and* train_hard, so choosing a recipe on dev never
    # looks at an eval path, and the distribution experiment's hard set stays its own.
    held = eval_qs + hard_qs
    dev_qs = _held_out_split(kg, config, "dev", config.n_dev, held, _asked(hard_qs) | eval_asked, bar_dev,
                             pool, partial, config.eval_hops)
    return eval_qs, hard_qs, dev_qs


def _asked(questions: Iterable[Question]) -> set[tuple[str, tuple[str, ...]]]:
    return {(q.meta["start"], tuple(q.meta["chain"])) for q in questions}


def _held_out_split(kg: KnowledgeGraph, config: DatasetConfig, split: str, n_total: int, held: list[Question],
                    held_asked: set[tuple[str, tuple[str, ...]]], bar: tqdm, pool: Candidates,
                    partial: bool, hops: Sequence[int]) -> list[Question]:
    """A held-out split of ``hops`` hops that shares no path window (either way; windows from
    ``eval_hops``' shortest length) and no (start, chain) with ``held``."""
    held_seqs = {entity_seq(q) for q in held}
    held_windows = {w for s in held_seqs for w in windows(s, min(config.eval_hops) + 1)}
    min_len = min((len(s) for s in held_seqs), default=min(config.eval_hops) + 1)
    builder = _Builder(kg, split, random.Random(f"{config.seed}:{split}"), config, bar, pool)

    def ok(path: GoldPath) -> bool:
        seq = tuple(path.entities)
        if (seq[0], tuple(e.rel for e in path.edges)) in held_asked or seq in held_windows:
            return False
        return not any(w in held_seqs for w in windows(seq, min_len))

    for length, n in _per_hop(n_total, hops, [1] * len(hops)).items():
        _sample_split(builder, length, n, ok, partial)
    return builder.finish()


def build_far(kg: KnowledgeGraph, config: DatasetConfig, splits: dict[str, list[Question]], pool: Candidates,
              bar: tqdm | None = None) -> dict[str, list[Question]]:
    """``dev_far`` and ``eval_far``: questions one hop past the longest eval chain
    (:attr:`DatasetConfig.far_hops`, 6 on 4-5), a length no phase trains on (RL draws at most one
    hop past the training chains), so that "generalises past what it saw" stays measurable;
    dev_far is for choosing recipes, eval_far for reporting them.

    Built after every other split, which they leave as they were, under the held-out rules where
    they matter: no path inside a train_hard path or the other way round (RL trains on those),
    none shared between dev_far and eval or eval_far, or between eval_far and dev (choosing on a
    dev split never looks at a reported path), and no (start, chain) any split asks. An eval_far
    path may hold an eval path: both are only reported. As many as the graph gives, up to
    ``n_dev_far`` and ``n_eval_far``; none where it gives none.
    """
    asked = _asked(splits["eval"] + splits["train_hard"] + splits["dev"])
    bar = bar or tqdm(disable=True)
    dev_far = _held_out_split(kg, config, "dev_far", config.n_dev_far, splits["eval"] + splits["train_hard"], asked,
                              bar, pool, True, config.far_hops) if config.n_dev_far else []
    eval_far = _held_out_split(kg, config, "eval_far", config.n_eval_far, splits["train_hard"] + splits["dev"] + dev_far,
                               asked | _asked(dev_far), bar, pool, True, config.far_hops) if config.n_eval_far else []
    return {"eval_far": eval_far, "dev_far": dev_far}


# --------------------------------------------------------------------------- stats + writing
def _hop_counts(questions: list[Question]) -> dict[str, int]:
    c = Counter(q.hop_len for q in questions)
    return {str(h): c[h] for h in sorted(c)}


def _width_counts(kg: KnowledgeGraph, questions: list[Question], merges: bool = False) -> dict[str, int]:
    c = Counter(walk_width(q.meta["start"], question_walk(kg, q), merges) for q in questions)
    return {str(w): c[w] for w in sorted(c)}


def _sources(questions: list[Question]) -> dict[str, int]:
    c = Counter(d["source"] for q in questions for d in q.meta["distractors"])
    return {k: v for k, v in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))}


def build_splits(kg: KnowledgeGraph, config: DatasetConfig, pool: Candidates | None = None, partial: bool = False,
                 held_out: tuple[list[Question], list[Question], list[Question]] | None = None
                 ) -> dict[str, list[Question]]:
    """Every split at ``config``'s sizes and walks (``max_width`` and ``merges`` resolved): eval,
    train_hard and dev (:func:`build_held_out`, or ``held_out`` where already built at this
    config), train, and eval's option-shuffled copy. With ``partial``, each split as full as the
    graph allows; else :class:`Shortfall` at the first short one."""
    pool = pool or Candidates(kg)
    disable = None if config.progress is None else not config.progress
    bars = {split: tqdm(total=n, desc=f"{split:<10}", unit="q", disable=disable, leave=False)
            for split, n in (("eval", config.n_eval), ("train_hard", config.n_train_hard), ("dev", config.n_dev),
                             ("train", config.n_train))}
    try:
        eval_qs, hard_qs, dev_qs = held_out or build_held_out(kg, config, bars, pool, partial)
        train_qs = _build_train(kg, config, eval_qs, bars["train"], partial)
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
    far = build_far(kg, config, splits, pool)
    # a far split the graph gives too few of to measure is left out (stats.json says so)
    asked = {"eval_far": config.n_eval_far, "dev_far": config.n_dev_far}
    return splits | {name: qs for name, qs in far.items() if qs and len(qs) >= min(MIN_FAR, asked[name])}


def dataset_stats(kg: KnowledgeGraph, config: DatasetConfig, splits: dict[str, list[Question]]) -> DatasetStats:
    """The checks and counts of built splits (what ``stats.json`` holds, less the file hashes).

    Raises :class:`DatasetError` where a check fails (never expected) or where the oracle that
    knows every fact solves under :data:`MIN_ORACLE` of a held-out split: no split is written
    that no model can solve by composing the facts it is taught."""
    train_qs, eval_qs, hard_qs, dev_qs = (splits[name] for name in ("train", "eval", "train_hard", "dev"))
    verified = {name: [sum(verify_unique(kg, q) for q in qs), len(qs)] for name, qs in splits.items()}
    leakage = leakage_report(train_qs, eval_qs, hard_qs, dev_qs, splits.get("eval_far", ()), splits.get("dev_far", ()))
    oracle = oracle_report(kg, splits)
    eval_edges = path_edges(eval_qs)
    train_edges = path_edges(train_qs)
    one_hop = path_edges(q for q in train_qs if q.hop_len == 1)
    if any(ok != n for ok, n in verified.values()) or any(leakage.values()):
        raise DatasetError(f"generated questions failed their checks: unique={verified}, leakage={leakage}")
    # The pipeline teaches every KG fact: the held-out splits must be solvable by the oracle.
    unsolvable = {split: acc for split, acc in oracle["kg"].items()
                  if split in ("eval", "train_hard", "dev", *FAR_FILES) and splits[split] and acc < MIN_ORACLE}
    if unsolvable:
        raise DatasetError(f"{kg.source}: the oracle that knows every fact solves only "
                           + ", ".join(f"{acc:.0%} of {split}" for split, acc in unsolvable.items())
                           + f" (needs {MIN_ORACLE:.0%}); `kgr kg check {kg.source}` shows where the graph branches")
    return DatasetStats(
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
        widths={name: _width_counts(kg, qs, config.merging) for name, qs in splits.items()},
        merges={name: sum(merged(question_walk(kg, q)) for q in qs) for name, qs in splits.items()}
        if config.merging else None,
        far=_far_note(config, splits),
    )


def _far_note(config: DatasetConfig, splits: dict[str, list[Question]]) -> dict[str, Any] | None:
    """stats.json's account of the far splits: their hop length, the counts asked, and those
    left out (the graph gave under :data:`MIN_FAR` of them); None where none was asked."""
    asked = {"eval_far": config.n_eval_far, "dev_far": config.n_dev_far}
    if not any(asked.values()):
        return None
    return {"hops": list(config.far_hops), "asked": asked,
            "left_out": sorted(name for name, n in asked.items() if n and name not in splits)}


def write_dataset(config: DatasetConfig, splits: dict[str, list[Question]], stats: DatasetStats,
                  confirm: Callable[[list[str]], bool] | None = None) -> None:
    """Write the splits and ``stats.json`` into ``config.out_dir`` as one set
    (:func:`library.questions.split_set.write_split_set`); where the folder holds other splits
    that would change, ``confirm(names)`` is asked first (None: overwrite)."""
    files = {({**SPLIT_FILES, **FAR_FILES})[name]: "".join(dumps_line(q) for q in qs).encode("utf-8")
             for name, qs in splits.items()}
    changed = changed_files(config.out_dir, files)
    if changed and confirm is not None and not confirm(changed):
        raise OverwriteRefused(f"{config.out_dir} already holds other splits ({', '.join(changed)} would change); "
                               "nothing was written")
    write_split_set(config.out_dir, files, stats_json := stats.to_json())
    stats.files = stats_json["files"]
