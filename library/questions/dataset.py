"""What a dataset is: the settings of ``kgr data`` (:class:`DatasetConfig`), the files of a
folder of splits (:data:`SPLIT_FILES`, ``stats.json``), what its ``stats.json`` holds
(:class:`DatasetStats`), and what a built folder says of itself (:func:`split_hops`,
:func:`source_kg`).

A near-leaf (it imports only library.errors), so that the training config and the command line
read a dataset's settings and hop lengths without the generator (library/questions/splits.py)
and the graph code behind it; writing and checking a folder as one set: split_set.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from library.errors import DataFileError

SPLIT_FILES = {
    "train": "train.jsonl",
    "eval": "eval.jsonl",
    "train_hard": "train_hard.jsonl",
    "eval_shuffled": "eval_shuffled.jsonl",
    "dev": "dev.jsonl",
}
#: Held-out splits one hop past the longest eval chain (library/questions/splits.py: build_far),
#: written where the graph gives them: read where present; a run's data hashes leave them out
#: (they train nothing), so a folder that gains them keeps its runs resumable.
FAR_FILES = {
    "eval_far": "eval_far.jsonl",
    "dev_far": "dev_far.jsonl",
}
STATS_FILE = "stats.json"

#: How a question orders its steps (``kgr data --step-order``; docs/FINDINGS.md findings 40-41):
#: "chain" writes them in the chain's order ("It leads to [K], which is caused by [G], ..."), the
#: data files' wording; "keyed" writes each step after the first with the tag it starts from, in
#: a shuffled order ("It leads to [K]; [G] is fixed by [?]; [K] is caused by [G]"). Trained on
#: 1-3-hop chains in chain order, the model finds the next step by its position and loses its
#: place after the third; in the keyed order only the tag it has just written finds it. The
#: wording itself: library/questions/wording.py.
STEP_ORDERS = ("chain", "keyed")


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
    # target mix of train_hops; spills over where the graph runs out. None: 1 for the shortest, 2 for
    # each longer one (1:2:2 on the paper's 1-3 hops)
    train_hop_weights: tuple[int, ...] | None = None
    eval_hops: tuple[int, ...] = (4, 5)
    # Held-out questions one hop past the longest eval chain (6 on 4-5 hops), a length no phase
    # trains on: eval_far reports, dev_far chooses (library/questions/splits.py: build_far); as
    # many as the graph gives up to these counts, 0 for none.
    n_eval_far: int = 300
    n_dev_far: int = 100
    max_distance: int = 3  # farthest same-type fallback distractor, in undirected hops from the path
    attempts_per_question: int = 200  # random paths drawn a question before taking every admissible chain instead
    progress: bool | None = None  # tqdm bars; None = only on a terminal
    # How questions order their steps (:data:`STEP_ORDERS`; the wording: library/questions/wording.py):
    # "chain" (the data files') or "keyed" (later steps keyed by tags, shuffled; data/keyed, finding 41)
    step_order: str = "chain"
    # The most entities a question's TRACE may hold at one hop (library/graph/oracle.py: where a hop
    # branches, every successor is carried). None: the narrowest of graph.check.WIDTHS that fills
    # the splits (1 on a functional graph: no hop branches).
    max_width: int | None = None
    # Whether a walk may hold once an entity that two held entities share (a merge: the TRACE states
    # both facts; library/graph/oracle.py: walk_width). None: only where tree walks at every width
    # cannot fill the splits, so a graph they fill keeps its questions.
    merges: bool | None = None
    # Whether the sizes above are the most to make rather than exact (`kgr data` with no size
    # flag): where the graph cannot give them, every split is sized down together
    # (library/questions/plan.py), and only an eval below min_eval is refused.
    fit_sizes: bool = True
    # The fewest eval questions worth measuring: at 100 a 95% interval is about +-10 points.
    min_eval: int = 100
    # Random paths drawn without a new question (a draw that finds no path counts 20) before the
    # generator takes every admissible chain of the graph instead (the committed graphs' splits
    # fill with gaps of at most 242 so counted).
    stall_attempts: int = 600

    def __post_init__(self) -> None:
        object.__setattr__(self, "kg_path", Path(self.kg_path))
        object.__setattr__(self, "out_dir", Path(self.out_dir))
        object.__setattr__(self, "train_hops", tuple(self.train_hops))
        if self.train_hop_weights is None:
            object.__setattr__(self, "train_hop_weights", (1,) + (2,) * (len(self.train_hops) - 1))
        if len(self.train_hop_weights) != len(self.train_hops):
            raise ValueError("train_hop_weights needs one weight per entry of train_hops")
        if self.step_order not in STEP_ORDERS:
            raise ValueError(f"step_order {self.step_order!r}: expected one of {STEP_ORDERS}")
        object.__setattr__(self, "eval_hops", tuple(self.eval_hops))
        if not self.train_hops or not self.eval_hops or min(self.train_hops + self.eval_hops) < 1:
            raise ValueError("train_hops and eval_hops each need at least one hop length of 1 or more")
        if max(self.train_hops) >= min(self.eval_hops):
            raise ValueError(f"train hops {hop_span(self.train_hops)} and eval hops {hop_span(self.eval_hops)}: eval chains "
                             "must be longer than every training chain (eval hops are the unseen ones)")
        if self.max_width is not None and self.max_width < 1:
            raise ValueError(f"max_width {self.max_width}: a TRACE holds at least one entity a hop")
        if min(self.n_train, self.n_eval, self.n_train_hard, self.n_dev, self.n_eval_far, self.n_dev_far) < 0:
            raise ValueError("question counts cannot be negative")

    @property
    def width(self) -> int:
        """The resolved :attr:`max_width` (:func:`build_dataset` resolves None before building)."""
        if self.max_width is None:
            raise ValueError("max_width is resolved by build_dataset")
        return self.max_width

    @property
    def far_hops(self) -> tuple[int, ...]:
        """The far splits' hop length: one past the longest eval chain.

        >>> DatasetConfig().far_hops
        (6,)
        """
        return (max(self.eval_hops) + 1,)

    @property
    def merging(self) -> bool:
        """The resolved :attr:`merges` (None, before :func:`build_dataset` resolves it, reads as no)."""
        return bool(self.merges)


def hop_span(hops: Sequence[int]) -> str:
    """``(1, 2, 3)`` -> ``"1-3"``, ``(2, 4)`` -> ``"2,4"``, ``(4,)`` -> ``"4"``: hop lengths as
    ``--train-hops`` / ``--eval-hops`` take them.

    >>> hop_span((1, 2, 3)), hop_span((2, 4)), hop_span((4,))
    ('1-3', '2,4', '4')
    """
    hops = sorted(hops)
    if len(hops) > 1 and hops == list(range(hops[0], hops[-1] + 1)):
        return f"{hops[0]}-{hops[-1]}"
    return ",".join(map(str, hops))


def parse_hops(text: str) -> tuple[int, ...]:
    """``"1-3"`` -> ``(1, 2, 3)``, ``"3,4"`` -> ``(3, 4)``: hop lengths as the command line gives them.

    >>> parse_hops("1-3"), parse_hops("3,4"), parse_hops("4")
    ((1, 2, 3), (3, 4), (4,))
    """
    hops: list[int] = []
    try:
        for part in text.replace(" ", "").split(","):
            low, _, high = part.partition("-")
            hops += range(int(low), int(high or low) + 1)
    except ValueError:
        raise ValueError(f"hop lengths {text!r}: expected a range such as 1-3 or a list such as 3,4") from None
    if not hops:
        raise ValueError(f"hop lengths {text!r}: expected a range such as 1-3 or a list such as 3,4")
    return tuple(sorted(set(hops)))


# --------------------------------------------------------------------------- stats + reading
@dataclass
class DatasetStats:
    """What :func:`library.questions.plan.build_dataset` made, and the checks it ran; written to ``stats.json``."""

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
    # split -> questions whose walk merges (two held entities share a successor); None (left out of
    # stats.json) where merges were not admitted (DatasetConfig.merges)
    merges: dict[str, int] | None = None
    # the far splits' hop length, the counts asked and those left out (too few); None (left out of
    # stats.json) where none were asked (splits.py: build_far)
    far: dict[str, Any] | None = None
    generation_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        # the wall time is left out so that stats.json, like the splits, is byte-identical per seed,
        # and so is what does not apply (None), so that a graph built before such a field keeps its bytes
        return {k: v for k, v in self.__dict__.items() if k != "generation_seconds" and v is not None}

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
                 f"entit{'y' if self.max_width == 1 else 'ies'} held a hop"
                 + (", branches merging" if self.merges is not None else "") + f", in {self.generation_seconds:.1f} s"]
        for split, by_hop in self.counts.items():
            hops = ", ".join(f"{h}: {n}" for h, n in by_hop.items())
            letters = " ".join(f"{k}{v}" for k, v in self.answer_letters[split].items())
            widths = "" if self.max_width == 1 else "   widths " + ", ".join(f"{w}: {n}" for w, n in self.widths[split].items())
            if self.merges is not None:
                widths += f", merging {self.merges[split]}"
            lines.append(f"  {split:<14} {sum(by_hop.values()):>5}  hops {hops}{widths}   answers {letters}   "
                         f"prompt {self.mean_prompt_chars[split]:.0f} chars (max {self.max_prompt_chars[split]})")
        verified = sum(ok for ok, _ in self.unique_verified.values())
        total = sum(n for _, n in self.unique_verified.values())
        lines.append(f"  unique answer verified: {verified}/{total}" + ("" if verified == total else "  <-- FAILED"))
        lines.append(f"  eval edges taught in train: {self.eval_edges_taught:.1%} of {self.eval_edges} "
                     f"({self.eval_edges_taught_1hop:.1%} as 1-hop questions); KG edges in train: {self.kg_edges_in_train:.1%}")
        for facts, by_split in self.oracle.items():
            lines.append(f"  oracle ({facts} facts): " + ", ".join(f"{k} {v:.1%}" for k, v in by_split.items()))
        if self.far and self.far.get("left_out"):
            lines.append(f"  {' and '.join(self.far['left_out'])}: the graph gives fewer than 50 {self.far['hops'][0]}-hop "
                         "questions under the held-out rules; not written")
        leaks = sum(self.leakage.values())
        lines.append("  leakage checks: " + ("all zero" if leaks == 0 else str(self.leakage)))
        for split, sources in self.distractor_sources.items():
            lines.append(f"  distractors {split:<11} " + ", ".join(f"{k} {v}" for k, v in sources.items()))
        return "\n".join(lines)


def split_hops(data_dir: str | Path, split: str = "train") -> tuple[int, ...]:
    """The hop lengths of one split of a folder of splits, as its stats.json counts them, else as
    the split's file has them; ``()`` where neither says. What reads "trained on 1-3 hops,
    evaluated on 4-5" reads it here (``kgr data --train-hops / --eval-hops``).

    >>> split_hops("data"), split_hops("data", "eval"), split_hops("no such folder")
    ((1, 2, 3), (4, 5), ())
    """
    folder = Path(data_dir)
    try:
        counts = json.loads((folder / STATS_FILE).read_text(encoding="utf-8"))["counts"][split]
        return tuple(sorted(int(h) for h in counts))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    try:
        with open(folder / SPLIT_FILES[split], encoding="utf-8") as lines:
            return tuple(sorted({int(json.loads(line)["hop_len"]) for line in lines if line.strip()}))
    except (OSError, ValueError, KeyError, TypeError):
        return ()


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
