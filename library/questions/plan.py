"""What ``kgr data`` makes from a graph, decided before anything is written; ``kgr kg check`` runs
the same plan dry and prints the command that makes it.

Two choices are made, both by building the splits (never by a separate count, which can only
guess at what the leakage, distractor and uniqueness rules let through):

- *Which walks.* A question's walk (library/graph/oracle.py) is admitted up to a width, as a tree
  or with merges. The rungs are tried narrowest first, trees before merges (:func:`rungs`): a
  graph that tree walks fill keeps its questions byte for byte, and merges are used only where
  trees at every width fall short. The chain counts of library/graph/check.py only say where to
  start. Sizes given take the first rung that makes every split; otherwise the first whose
  held-out splits (eval, train_hard, dev) fill, and train takes what the graph gives there.
- *How many.* The sizes asked are made where the graph gives them. Where it does not and sizes
  were not given (``DatasetConfig.fit_sizes``), eval, train_hard and dev are sized down together
  to the most the widest rung fills, in the proportions asked, eval first to ``min_eval`` (a 95%
  interval of about +-10 points at 100), each balanced over its hop lengths; then the narrowest
  rung that fills those is taken, and train is as many as the graph gives there, up to its size.
  Below the floor, or where sizes were given and cannot be made, it refuses, naming the sizes the
  graph gives and a command that makes them.

The plan's :attr:`Plan.config` has every choice written out (sizes, width, merges), so
:meth:`Plan.command` is a ``kgr data`` command that makes exactly the planned splits.
"""

from __future__ import annotations

import math
import shlex
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from library.contracts import Question
from library.errors import DataFileError
from library.graph.check import WIDTHS, count_chains
from library.graph.kg import KnowledgeGraph, load_kg
from library.questions.candidates import Candidates
from library.questions.dataset import DatasetConfig, DatasetError, DatasetStats, hop_span
from library.questions.splits import (Shortfall, _per_hop, build_held_out, build_splits, dataset_stats, walks_text,
                                      write_dataset)

#: Held-out splits sized down to the graph, in the order they take their questions.
HELD_OUT = ("eval", "train_hard", "dev")

#: Tries at sizing the held-out splits down before settling on the last that fitted.
MAX_TRIES = 12


@dataclass
class Plan:
    """The splits ``config`` makes from its graph, and how: ``config`` with every choice resolved
    (sizes, ``max_width``, ``merges``; ``fit_sizes`` off), ``fitted`` where the sizes asked were
    sized down to the graph."""

    config: DatasetConfig
    splits: dict[str, list[Question]]
    stats: DatasetStats
    fitted: bool

    def made(self, split: str) -> dict[int, int]:
        """``{hops: n}`` of one split."""
        return dict(sorted(Counter(q.hop_len for q in self.splits[split]).items()))

    def command(self, out: str | Path | None = None) -> str:
        """The ``kgr data`` command that makes these splits (shell-quoted): the walks written out,
        and the sizes where they were sized to the graph or are not the defaults.

        >>> plan = Plan(DatasetConfig(kg_path="my kg.json", n_eval=120, max_width=4, merges=True), {}, None, True)
        >>> plan.command("out")
        "kgr data --kg 'my kg.json' --out out --n-train 2400 --n-eval 120 --n-train-hard 300 --n-dev 100 --max-width 4 --merges"
        >>> Plan(DatasetConfig(max_width=1), {}, None, False).command()
        'kgr data --kg data/kg.json --out data --max-width 1'
        """
        c, default = self.config, DatasetConfig()
        words = ["kgr", "data", "--kg", str(c.kg_path), "--out", str(c.out_dir if out is None else out)]
        if c.seed != default.seed:
            words += ["--seed", str(c.seed)]
        if c.step_order != default.step_order:
            words += ["--step-order", c.step_order]
        if c.train_hops != default.train_hops or c.eval_hops != default.eval_hops:
            words += ["--train-hops", hop_span(c.train_hops), "--eval-hops", hop_span(c.eval_hops)]
        sizes = (c.n_train, c.n_eval, c.n_train_hard, c.n_dev)
        if self.fitted or sizes != (default.n_train, default.n_eval, default.n_train_hard, default.n_dev):
            words += ["--n-train", str(c.n_train), "--n-eval", str(c.n_eval), "--n-train-hard", str(c.n_train_hard),
                      "--n-dev", str(c.n_dev)]
        # the walks pinned: kgr data then tries this width first, as trees unless --merges
        words += ["--max-width", str(c.width)] + (["--merges"] if c.merging else [])
        return " ".join(shlex.quote(w) for w in words)


def rungs(config: DatasetConfig) -> list[tuple[int, bool]]:
    """``(width, merges)`` in the order they are tried: every width as trees, then with merges
    (a width-1 walk never merges), within what ``config`` allows.

    >>> rungs(DatasetConfig())
    [(1, False), (2, False), (3, False), (4, False), (2, True), (3, True), (4, True)]
    >>> rungs(DatasetConfig(max_width=3)), rungs(DatasetConfig(max_width=1, merges=True))
    ([(3, False), (3, True)], [(1, True)])
    """
    widths = [config.max_width] if config.max_width is not None else list(WIDTHS)
    kinds = [False, True] if config.merges is None else [config.merges]
    return [(w, m) for m in kinds for w in widths if not (m and w == 1 and False in kinds)]


def _sizes(config: DatasetConfig) -> tuple[int, int, int]:
    return config.n_eval, config.n_train_hard, config.n_dev


def _with(config: DatasetConfig, rung: tuple[int, bool], held: tuple[int, int, int] | None = None,
          n_train: int | None = None) -> DatasetConfig:
    """``config`` at one rung, with held-out sizes and a train size where given, sizes exact."""
    n_eval, n_hard, n_dev = held or _sizes(config)
    return replace(config, max_width=rung[0], merges=rung[1], n_eval=n_eval, n_train_hard=n_hard, n_dev=n_dev,
                   n_train=config.n_train if n_train is None else n_train, fit_sizes=False)


def _shares(total: int, asked: tuple[int, int, int], floor: int) -> tuple[int, int, int]:
    """``total`` held-out questions shared as ``asked`` shares them, eval first to its floor.

    >>> _shares(700, (300, 300, 100), 100), _shares(350, (300, 300, 100), 100), _shares(180, (300, 300, 100), 100)
    ((300, 300, 100), (150, 150, 50), (100, 60, 20))
    """
    if total >= sum(asked):
        return asked
    n_eval = min(asked[0], total, max(floor, total * asked[0] // sum(asked)))
    rest = total - n_eval
    n_hard = min(asked[1], rest * asked[1] // max(asked[1] + asked[2], 1))
    return n_eval, n_hard, min(asked[2], rest - n_hard)


class _NoBar:
    """A progress bar that shows nothing: the sizing tries are not the build."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


Held = tuple[list[Question], list[Question], list[Question]]


class _Planner:
    """The tries of one plan, over one graph and one pool of candidates; a held-out try at the
    same sizes and walks is built once."""

    def __init__(self, kg: KnowledgeGraph, config: DatasetConfig):
        self.kg, self.config = kg, config
        self.pool = Candidates(kg)
        self.ladder = rungs(config)
        self.asked = _sizes(config)
        self._held: dict[DatasetConfig, Held] = {}

    def held_out(self, resolved: DatasetConfig, partial: bool = False) -> Held:
        """eval, train_hard and dev at ``resolved``: as many as each takes where ``partial``, else
        :class:`Shortfall` where one falls short. One partial build answers both (where every split
        fills, it is the exact build: the same draws in the same order)."""
        key = replace(resolved, n_train=0, progress=False, fit_sizes=False)
        if key not in self._held:
            bars = {split: _NoBar() for split in (*HELD_OUT, "train")}
            self._held[key] = build_held_out(self.kg, key, bars, self.pool, partial=True)  # type: ignore[arg-type]
        found = self._held[key]
        if not partial:
            hops = resolved.eval_hops
            for split, qs, n in zip(HELD_OUT, found, _sizes(resolved)):
                made = Counter(q.hop_len for q in qs)
                for h, wanted in _per_hop(n, hops, [1] * len(hops)).items():
                    if made[h] < wanted:
                        raise Shortfall(f"{self.kg.source}: could only make {made[h]} of {wanted} {h}-hop {split} "
                                        f"questions with a unique answer that are solvable by composition "
                                        f"{walks_text(resolved.width, resolved.merging)}", split, h, made[h], wanted)
        return found

    def first_rung(self, held: tuple[int, int, int]) -> int:
        """The index of the first rung whose chain counts reach what the held-out splits ask a hop
        length (a heuristic: the rules reject some chains, so later rungs are tried after it)."""
        ladder, config = self.ladder, self.config
        if len(ladder) <= 2:  # a width given: no count needed to choose between trees and merges
            return 0
        per_hop = -(-sum(held) // len(config.eval_hops))
        widths = sorted(set(WIDTHS) | {w for w, _ in ladder})
        counts: dict[bool, dict] = {}
        for i, (width, merges) in enumerate(ladder):
            if merges not in counts:
                counts[merges] = count_chains(self.kg, max(config.eval_hops), widths, merges=merges)
            if all(counts[merges].get(h, Counter())[width] >= per_hop for h in config.eval_hops):
                return i
        return len(ladder) - 1

    def build(self, resolved: DatasetConfig, fitted: bool) -> Plan:
        """Every split at ``resolved`` (exact sizes), checked: the plan, or :class:`DatasetError`."""
        held = self.held_out(resolved)
        splits = build_splits(self.kg, resolved, self.pool, held_out=held)
        return Plan(resolved, splits, dataset_stats(self.kg, resolved, splits), fitted)

    def climb(self) -> tuple[Plan | None, DatasetError | None]:
        """The first rung (from the one the counts name) that makes every split at the sizes asked,
        exactly: sizes that were given."""
        error: DatasetError | None = None
        for rung in self.ladder[self.first_rung(self.asked):]:
            try:
                return self.build(_with(self.config, rung), fitted=False), None
            except DatasetError as exc:
                error = exc
        return None, error

    def filling_rung(self, held: tuple[int, int, int]) -> tuple[int, bool] | None:
        """The first rung (from the one the counts name) whose held-out splits fill at ``held``."""
        for rung in self.ladder[self.first_rung(held):]:
            try:
                self.held_out(_with(self.config, rung, held))
            except Shortfall:
                continue
            return rung
        return None

    def made(self, rung: tuple[int, bool], held: tuple[int, int, int]) -> dict[str, dict[int, int]]:
        """``{split: {hops: n}}`` of a partial held-out build: as many as each split takes, in turn."""
        found = self.held_out(_with(self.config, rung, held), partial=True)
        return {split: dict(Counter(q.hop_len for q in qs)) for split, qs in zip(HELD_OUT, found)}

    def fit_held_out(self, rung: tuple[int, bool]) -> tuple[int, int, int] | None:
        """The largest held-out sizes (shared as asked, eval first to its floor) the graph fills at
        ``rung``, or None where eval cannot reach the floor."""
        asked, hops = self.asked, self.config.eval_hops
        floor = min(self.config.min_eval, asked[0])
        total = sum(asked)
        for _ in range(MAX_TRIES):
            held = _shares(total, asked, floor)
            if held[0] < floor:
                return None
            made = self.made(rung, held)
            wanted = {split: _per_hop(n, hops, [1] * len(hops)) for split, n in zip(HELD_OUT, held)}
            if all(made[s].get(h, 0) >= wanted[s][h] for s in HELD_OUT for h in hops):
                return held
            if held == asked and self.eval_given(rung) < floor:  # eval had first pick and still falls short
                return None
            # what the graph gave a hop length, all splits together, is what a balanced set can hold
            capacity = min(sum(made[s].get(h, 0) for s in HELD_OUT) for h in hops) * len(hops)
            total = min(total - max(1, total // 50), capacity)
        return None

    def fit(self) -> Plan:
        """The plan sized to the graph: the held-out sizes asked at the first rung that fills them,
        else the most the widest rung fills (shared as asked); train as many as that rung gives,
        up to its size. :class:`DatasetError` naming what the graph gives where eval falls under
        its floor."""
        held, rung = self.asked, self.filling_rung(self.asked)
        if rung is None:
            fitted = self.fit_held_out(self.ladder[-1])
            if fitted is None:
                raise TooFewToMeasure(self.kg.source, self.cannot(self.ladder[-1]))
            held, rung = fitted, self.filling_rung(fitted)
            assert rung is not None  # the widest fills what it was sized by
        return self.settle(rung, held)

    def settle(self, rung: tuple[int, bool], held: tuple[int, int, int]) -> Plan:
        """The plan at ``rung`` with held-out sizes ``held`` (which it fills) and as many training
        questions as the graph gives there, up to the size asked."""
        n_train = self.config.n_train
        for _ in range(MAX_TRIES):
            try:
                return self.build(_with(self.config, rung, held, n_train),
                                  fitted=(held, n_train) != (self.asked, self.config.n_train))
            except Shortfall as exc:
                if exc.split != "train" or exc.made >= n_train:
                    raise
                n_train = exc.made  # train's mix is asked of the size it gives, so build it again
        raise DatasetError(f"{self.kg.source}: could not settle on a train size")

    def eval_given(self, rung: tuple[int, bool]) -> int:
        """The eval questions the graph gives at ``rung``, balanced over hop lengths, up to the size
        asked (eval takes its questions first, so the other splits' sizes do not change it)."""
        by_hop = self.made(rung, self.asked)["eval"]
        return min(by_hop.get(h, 0) for h in self.config.eval_hops) * len(self.config.eval_hops)

    def cannot(self, rung: tuple[int, bool]) -> str:
        """Why the graph is refused, naming the eval it does give."""
        config, kg = self.config, self.kg
        by_hop = self.made(rung, self.asked)["eval"]
        balanced = self.eval_given(rung)
        hops = ", ".join(f"{by_hop.get(h, 0)} at {h} hops" for h in config.eval_hops)
        floor = min(config.min_eval, config.n_eval)
        gives = (f"{balanced} {hop_span(config.eval_hops)}-hop eval questions" if balanced else
                 f"no {hop_span(config.eval_hops)}-hop eval questions")
        interval = f" (a 95% interval of about ±{98 / math.sqrt(balanced):.0f} points)" if balanced else ""
        anyway = f"`{self.settle(rung, (balanced, 0, 0)).command()}` makes those; " if balanced else ""
        return (f"the graph gives {gives} solvable by composition {walks_text(*rung)}, balanced over "
                f"hop lengths ({hops}){interval}, under the {floor} an eval needs; {anyway}"
                f"`kgr kg check {shlex.quote(str(kg.source))}` tries shorter hop lengths too")


def plan_dataset(config: DatasetConfig, kg: KnowledgeGraph | None = None) -> Plan:
    """The splits ``config`` makes (built, checked, not written), with every choice resolved.

    Raises :class:`DatasetError` (nothing to write) where the graph cannot give them: sizes that
    were given and cannot be made (naming the sizes it can make), or an eval under ``min_eval``."""
    planner = _Planner(kg or load_kg(config.kg_path), config)
    if config.fit_sizes:
        return planner.fit()
    plan, error = planner.climb()
    if plan is not None:
        return plan
    try:
        fitted = planner.fit()
    except TooFewToMeasure as exc:
        raise TooFewToMeasure(planner.kg.source, f"{str(error).split(': ', 1)[-1]}; {exc.reason}") from None
    raise DatasetError(f"{error}; the graph gives {_sizes_text(fitted.config)}: `{fitted.command()}` makes them")


class TooFewToMeasure(DatasetError):
    """The graph gives fewer eval questions than ``min_eval``; ``reason`` says how many it gives."""

    def __init__(self, source: str, reason: str):
        super().__init__(f"{source}: {reason}")
        self.reason = reason


def describe(plan: Plan, asked: DatasetConfig) -> str:
    """One sentence on what a plan makes, for ``kgr kg check``.

    >>> plan = plan_dataset(DatasetConfig(kg_path="data/kg.json", n_train=300, n_eval=40, n_train_hard=40, n_dev=20,
    ...                                   progress=False))
    >>> describe(plan, DatasetConfig())[:107]
    '`kgr data` at 1-3 / 4-5 hops makes 300 train (1: 60, 2: 120, 3: 120), 40 eval (4: 20, 5: 20), 40 train_hard'
    """
    c = plan.config

    def split(name: str) -> str:
        by_hop = plan.made(name)
        return f"{sum(by_hop.values()):,} {name} (" + ", ".join(f"{h}: {n:,}" for h, n in by_hop.items()) + ")"

    oracle = plan.stats.oracle["kg"]
    text = (f"`kgr data` at {hop_span(c.train_hops)} / {hop_span(c.eval_hops)} hops makes "
            + ", ".join(split(name) for name in ("train", *HELD_OUT)) + f" questions {walks_text(c.width, c.merging)}")
    if plan.stats.merges is not None:
        text += f" ({plan.stats.merges['eval']} of the {c.n_eval} eval walks merge)"
    text += "; the oracle that knows every fact solves " + ", ".join(f"{oracle[s]:.0%} of {s}" for s in HELD_OUT)
    short = [f"{getattr(c, n):,} {name} of the {getattr(asked, n):,} asked" for name, n in
             (("train", "n_train"), ("eval", "n_eval"), ("train_hard", "n_train_hard"), ("dev", "n_dev"))
             if getattr(c, n) < getattr(asked, n)]
    if short:
        text += "; sized to the graph: " + ", ".join(short)
    return text


#: Hop lengths ``kgr kg check`` also tries where the paper's (1-3 / 4-5) give no eval worth measuring.
SHALLOW_HOPS = ((1, 2), (3, 4))


def dry_run(kg: KnowledgeGraph, config: DatasetConfig, *, hops_given: bool = False) -> tuple[list[str], Plan | None]:
    """What ``kgr kg check`` says of ``kgr data`` on this graph, from :func:`plan_dataset` run dry
    (the same selection; nothing written): what it makes, and the command that makes it (into
    ``config.out_dir``). Where the hop lengths asked give no eval worth measuring and were not
    given (``hops_given``), the shallower :data:`SHALLOW_HOPS` are tried too."""
    tries = [config]
    if not hops_given and (config.train_hops, config.eval_hops) != SHALLOW_HOPS:
        tries.append(replace(config, train_hops=SHALLOW_HOPS[0], eval_hops=SHALLOW_HOPS[1], train_hop_weights=None))
    lines = []
    for tried in tries:
        try:
            plan = plan_dataset(tried, kg)
        except DatasetError as exc:
            lines.append(f"at {hop_span(tried.train_hops)} / {hop_span(tried.eval_hops)} hops `kgr data` refuses: "
                         f"{exc}")
            if isinstance(exc, TooFewToMeasure):  # too few eval at these hop lengths: shorter ones may do
                continue
            return lines, None  # sizes given that the graph does not give: the refusal names a command that does
        lines += [describe(plan, tried), f"run: {plan.command()}"]
        return lines, plan
    return lines, None


def _sizes_text(config: DatasetConfig) -> str:
    return (f"{config.n_train} train, {config.n_eval} eval, {config.n_train_hard} train_hard and {config.n_dev} dev "
            f"questions {walks_text(config.width, config.merging)}")


def build_dataset(config: DatasetConfig, confirm: Callable[[list[str]], bool] | None = None) -> DatasetStats:
    """Generate all splits from ``config.kg_path`` into ``config.out_dir`` and return their stats:
    :func:`plan_dataset`, then the set written whole (library/questions/split_set.py).

    Raises :class:`library.errors.DataFileError` for a bad KG file and :class:`DatasetError`
    when the graph cannot supply the questions or (never expected) a check fails; in both
    cases nothing is written. Where ``config.out_dir`` already holds split files that would
    change, ``confirm(names)`` is asked first (None: overwrite).
    """
    if Path(config.out_dir).exists() and not Path(config.out_dir).is_dir():
        raise DataFileError(config.out_dir, "is a file; --out takes the folder the splits are written to")
    t0 = time.perf_counter()
    plan = plan_dataset(config)
    write_dataset(plan.config, plan.splits, plan.stats, confirm)
    plan.stats.generation_seconds = round(time.perf_counter() - t0, 2)
    return plan.stats
