"""What each phase may train on and what is evaluated: the data files, and the questions
every phase draws from them, with the guard that keeps eval out of training.

SFT trains on train.jsonl minus the GRPO pool (the paper keeps a disjoint RL set); RSFT
samples training prompts only (easy: train, hard: train_hard); GRPO samples the pool; either RL
phase may draw train_hard's questions one hop past SFT's longest (``prompt_hops: [next]``,
:func:`rl_candidates`); eval is a hop-balanced subset of eval.jsonl. :func:`assert_training_only` runs on every training set.
"""

from __future__ import annotations

import random
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from library.contracts import Question
from library.graph.kg import load_kg
from library.jsonl import read_jsonl, sha256_file
from library.questions.balance import select_balanced
from library.questions.dataset import FAR_FILES
from library.questions.split_set import SPLIT_FILES, verify_split_set
from library.questions.wording import reference_completion

# A run's settings (library.config.TrainConfig) are passed in, not imported: this module stays
# below the config in the import levels.

#: Splits nothing may train on (the shuffled copy is eval with its options reordered; dev is
#: where recipes are chosen, so RL's train_hard prompts must never be dev's).
EVAL_SPLITS = frozenset({"eval", "eval_shuffled", "dev", "eval_far", "dev_far"})


@dataclass
class DataBundle:
    train: list
    eval: list
    train_hard: list
    eval_shuffled: list
    kg: Any
    hashes: dict[str, str]
    dev: list = field(default_factory=list)  # 4-5 hops, for choosing recipes (research/sweeps)
    # one hop past eval (6 on 4-5), where the folder has them (library/questions/dataset.py: FAR_FILES)
    eval_far: list = field(default_factory=list)
    dev_far: list = field(default_factory=list)


def load_data(config: Any) -> DataBundle:
    """The run's splits and KG with their sha256 (meta.json records them); DataFileError where
    the folder is not one complete split set (:func:`library.questions.split_set.verify_split_set`)."""
    data_dir = Path(config.data_dir)
    verify_split_set(data_dir)
    splits = {}
    hashes = {}
    for name, filename in SPLIT_FILES.items():
        path = data_dir / filename
        splits[name] = read_jsonl(path, Question)
        hashes[filename] = sha256_file(path)
    hashes[Path(config.kg_path).name] = sha256_file(Path(config.kg_path))
    for name, filename in FAR_FILES.items():  # read, not hashed: they train nothing
        if (data_dir / filename).is_file():
            splits[name] = read_jsonl(data_dir / filename, Question)
    return DataBundle(kg=load_kg(config.kg_path), hashes=hashes, **splits)


@dataclass
class Selection:
    sft: list
    grpo_pool: list
    rsft_prompts: list
    eval: list
    eval_shuffled: list
    train_sample: list
    forbidden_ids: set[str] = field(default_factory=set)
    eval_far: list = field(default_factory=list)  # one hop past eval (eval.n_eval_far of eval_far.jsonl)

    def summary(self) -> dict[str, Any]:
        return {
            "sft": {"source": "train.jsonl", "n": len(self.sft), "excludes": "grpo_pool"},
            "grpo_pool": {"source": " + ".join(f"{split}.jsonl" for split in sorted({q.split for q in self.grpo_pool}))
                          or "train.jsonl", "n": len(self.grpo_pool), "ids": [q.id for q in self.grpo_pool]},
            "rsft_prompts": {"n": len(self.rsft_prompts),
                             "splits": sorted({q.split for q in self.rsft_prompts})},
            "eval": {"n": len(self.eval), "ids": [q.id for q in self.eval]},
            "eval_shuffled": {"n": len(self.eval_shuffled), "ids": [q.id for q in self.eval_shuffled]},
            "train_sample": {"n": len(self.train_sample), "ids": [q.id for q in self.train_sample]},
        } | ({"eval_far": {"n": len(self.eval_far), "ids": [q.id for q in self.eval_far]}} if self.eval_far else {})


def make_selection(config: Any, data: DataBundle) -> Selection:
    seed = config.seed
    eval_sub = select_balanced(data.eval, config.eval.n_eval, f"{seed}:eval")
    shuffled_by_source = {q.meta.get("shuffled_from", q.id.removesuffix("-shuf")): q for q in data.eval_shuffled}
    eval_shuf = [shuffled_by_source[q.id] for q in eval_sub if q.id in shuffled_by_source] if config.eval.shuffled else []
    grpo_pool = (select_balanced(rl_candidates(data, config.grpo.prompt_hops, "grpo.prompt_hops"), config.grpo.n_prompts,
                                 f"{seed}:grpo") if config.grpo.enabled else [])
    grpo_ids = {q.id for q in grpo_pool}
    not_rl = [q for q in data.train if q.id not in grpo_ids]
    hops = set(config.sft.question_hops or ())
    sft_pool = [q for q in not_rl if q.hop_len in hops] if hops else not_rl
    if not sft_pool:
        raise ValueError(f"sft.question_hops {sorted(hops)}: no training question has these hop lengths")
    sft = select_balanced(sft_pool, config.sft.n_questions, f"{seed}:sft") if config.sft.n_questions else sft_pool
    train_sample = select_balanced(sft, config.eval.n_train_sample, f"{seed}:train_sample") if config.eval.n_train_sample else []
    rsft_prompts = draw_rsft_prompts(data, config.rsft, sft, grpo_ids, seed) if config.rsft.enabled else []
    if config.grpo.enabled and config.grpo.rsft_prompts:
        grpo_pool = grpo_pool + [q for q in rsft_prompts if q.id not in grpo_ids]
    forbidden = {q.id for q in data.eval} | {q.id for q in data.eval_shuffled} | {q.id for q in data.eval_far}
    for qs in (sft, grpo_pool, rsft_prompts):
        assert_training_only(qs, forbidden)
    n_far = len(data.eval_far) if config.eval.n_eval_far is None else config.eval.n_eval_far
    eval_far = select_balanced(data.eval_far, n_far, f"{seed}:eval_far") if n_far else []
    return Selection(sft=sft, grpo_pool=grpo_pool, rsft_prompts=rsft_prompts, eval=eval_sub,
                     eval_shuffled=eval_shuf, train_sample=train_sample, forbidden_ids=forbidden, eval_far=eval_far)


def rsft_pool(data: DataBundle, hops: Sequence[int] | None, sft: Sequence[Any], grpo_ids: set[str]) -> list[Any]:
    """The questions RSFT may draw its prompts from: the training questions SFT did not
    demonstrate at ``hops`` (None: every length; SFT's own where it used them all), plus
    train_hard's at the one length past SFT's longest where ``hops`` names it; never the GRPO pool's."""
    sft_ids = {q.id for q in sft}
    pool = [q for q in data.train if q.id not in grpo_ids and q.id not in sft_ids] or list(sft)
    if hops:
        wanted = set(hops)
        beyond = [q for q in rl_candidates(data, sorted(wanted), "rsft.prompt_hops")
                  if q.split == "train_hard" and q.id not in grpo_ids]
        pool = ([q for q in pool if q.hop_len in wanted] or [q for q in sft if q.hop_len in wanted]) + beyond
        if not pool:
            raise ValueError(f"rsft.prompt_hops {sorted(hops)}: no training question "
                             "outside SFT and the GRPO pool has these hop lengths")
    return pool


def even_shares(n: int, k: int) -> list[int]:
    """``n`` split over ``k`` parts as evenly as it goes, the remainder to the first ones.

    >>> even_shares(7, 3)
    [3, 2, 2]
    """
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def draw_rsft_prompts(data: DataBundle, settings: Any, sft: Sequence[Any], grpo_ids: set[str], seed: int) -> list[Any]:
    """RSFT's prompts: ``settings.n_prompts`` questions of :func:`rsft_pool`, split evenly over
    ``settings.prompt_hops`` in its order where it names more than one length, so that a long
    list of training questions at SFT's own length does not crowd out train_hard's few one hop
    past it (the full profile's [next, longest]: 150 4-hop and 150 3-hop prompts).

    >>> from types import SimpleNamespace as S
    >>> train = [S(id=f"t{i}", split="train", hop_len=3) for i in range(50)]
    >>> hard = [S(id=f"h{i}", split="train_hard", hop_len=4) for i in range(5)]
    >>> data = S(train=train, train_hard=hard)
    >>> rsft = S(prompt_hops=[4, 3], n_prompts=10, distribution="easy")
    >>> [q.hop_len for q in draw_rsft_prompts(data, rsft, [], set(), 0)]
    [4, 4, 4, 4, 4, 3, 3, 3, 3, 3]
    """
    hops = settings.prompt_hops
    if not hops or len(hops) == 1 or settings.distribution != "easy":
        return select_prompts(rsft_pool(data, hops, sft, grpo_ids), data.train_hard, settings.distribution,
                              settings.n_prompts, seed)
    return [q for hop, share in zip(hops, even_shares(settings.n_prompts, len(hops))) if share
            for q in select_prompts(rsft_pool(data, [hop], sft, grpo_ids), data.train_hard, "easy", share, seed)]


def rl_candidates(data: DataBundle, hops: Sequence[int] | None, setting: str) -> list[Any]:
    """The questions an RL phase may draw prompts of these hop lengths from: train.jsonl's at its
    own lengths, train_hard's at the one length past the longest training chain (SFT never sees
    train_hard, and eval and dev are built apart from it); ``None``: all of train.jsonl.
    A length further out, or one no split has, is a ValueError naming ``setting``."""
    if hops is None:
        return list(data.train)
    longest = max((q.hop_len for q in data.train), default=0)
    too_long = sorted(h for h in hops if h > longest + 1)
    if too_long:
        raise ValueError(f"{setting} {sorted(hops)}: RL prompts may be at most one hop longer than the longest "
                         f"training chain ({longest}), so at most {longest + 1} ('next'), not {too_long}")
    out = [q for q in data.train if q.hop_len in hops]
    if longest + 1 in hops:
        hard = [q for q in data.train_hard if q.hop_len == longest + 1]
        if not hard:
            raise ValueError(f"{setting} {sorted(hops)}: train_hard has no {longest + 1}-hop question to draw from "
                             f"(kgr data writes train_hard at the eval lengths)")
        out += hard
    if not out:
        raise ValueError(f"{setting} {sorted(hops)}: no training question has these hop lengths")
    return out


def assert_training_only(questions: Iterable[Any], forbidden_ids: Iterable[str] = ()) -> None:
    """Raise LeakageError if any question is from an eval split or has an eval id (shuffled copies included).

    >>> from types import SimpleNamespace as Q
    >>> assert_training_only([Q(id="train-00001", split="train")], {"eval-0001"})
    >>> assert_training_only([Q(id="eval-0001-shuf", split="train")], {"eval-0001"})
    Traceback (most recent call last):
    ...
    library.train.data.LeakageError: evaluation questions in a training phase: ['eval-0001-shuf']
    """
    forbidden = {_base_id(i) for i in forbidden_ids}
    bad = [q.id for q in questions if q.split in EVAL_SPLITS or _base_id(q.id) in forbidden]
    if bad:
        raise LeakageError(f"evaluation questions in a training phase: {bad[:10]}")


def _base_id(ex_id: str) -> str:
    return ex_id[: -len("-shuf")] if ex_id.endswith("-shuf") else ex_id


def select_prompts(train: Sequence[Any], hard: Sequence[Any], distribution: str, n: int, seed: int,
                   exclude: Iterable[str] = ()) -> list[Any]:
    """The RSFT prompt set: ``easy`` draws from train (1-3 hops), ``hard`` from train_hard (4-5 hops),
    ``mix`` half from each. Seeded and order-independent of Python's hash seed.

    >>> from types import SimpleNamespace as Q
    >>> easy = [Q(id=f"t{i}", split="train") for i in range(10)]
    >>> hard = [Q(id=f"h{i}", split="train_hard") for i in range(10)]
    >>> [q.split for q in select_prompts(easy, hard, "mix", 4, 0)].count("train_hard")
    2
    """
    excluded = set(exclude)
    pools = {"easy": [("train", train)], "hard": [("train_hard", hard)],
             "mix": [("train", train), ("train_hard", hard)]}[distribution]
    rng = random.Random(f"{seed}:rsft:{distribution}")
    chosen: list[Any] = []
    for (split, pool), share in zip(pools, even_shares(n, len(pools))):
        pool = sorted((q for q in pool if q.id not in excluded), key=lambda q: q.id)
        if share > len(pool):
            split = " and ".join(sorted({q.split for q in pool})) or split  # `easy` may hold train_hard's next hop
            more = "--n-train-hard" if "train_hard" in split else "--n-train"
            message = (f"RSFT wants {share} prompts (rsft.n_prompts) from {split}, which holds {len(pool)} of "
                       f"the hop lengths it draws, SFT's rows left out")
            if not pool:
                raise ValueError(f"{message}: ask `kgr data` for more questions ({more})")
            # a graph smaller than the profile's: RSFT samples every prompt there is, and says so
            warnings.warn(f"{message}: it samples all {len(pool)} (more: `kgr data {more}`)", stacklevel=2)
            share = len(pool)
        chosen += rng.sample(pool, share)
    return chosen


class LeakageError(RuntimeError):
    """An evaluation question reached a training phase."""


def reference_window(questions: Sequence[Question], tokenizer: Any) -> int:
    """Tokens a generation window needs to hold the longest reference completion of
    ``questions``, its end token included (1 for none)."""
    return max((len(tokenizer(reference_completion(q), add_special_tokens=False).input_ids)
                for q in questions), default=0) + 1


def fit_generation_lengths(config: Any, kg: Any, selection: Selection, tokenizer: Any) -> tuple[Any, list[str]]:
    """``config`` with every generation window at least as long as the longest reference
    completion it must hold (+1 for the end token), and a line for each window raised.

    The profiles' windows are measured on the committed graph; a graph whose TRACEs carry sets
    (library/graph/oracle.py) writes longer ones, and a window shorter than the reference cuts
    off right answers. Only lengths are read, never answers.
    """
    windows = {("eval", "max_new_tokens"): selection.eval + selection.train_sample,
               ("eval", "far_max_new_tokens"): selection.eval_far,
               ("rsft", "max_new_tokens"): selection.rsft_prompts if config.rsft.enabled else [],
               ("grpo", "max_completion_length"): selection.grpo_pool}
    notes: list[str] = []
    updates: dict[str, Any] = {}
    if not config.generation.fit_windows:
        return config, notes
    for (section, name), questions in windows.items():
        current, need = getattr(getattr(config, section), name), reference_window(questions, tokenizer)
        if need > current:
            updates[section] = getattr(config, section).model_copy(update={name: need})
            notes.append(f"{section}.{name} {current} -> {need}: the longest reference completion it generates "
                         f"for is {need - 1} tokens")
    return (config.model_copy(update=updates) if updates else config), notes
