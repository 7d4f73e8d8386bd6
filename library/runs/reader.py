"""The one reader of a run: its meta, metrics and episodes, the questions and KG they refer to,
and its per-step rollout curves. The video, the demo page, the monitor, the diagnosis and
"try it" all read runs through :class:`RunView`, so they agree on which question file and
which graph belong to a run.

Where a run's questions and KG come from, first found wins:

1. an explicit path (a CLI flag);
2. the run folder's own copy (``kg.json``, ``eval_questions.jsonl``: a self-contained run);
3. the data the run was trained on, as its ``meta.json`` records it (``config.data_dir``,
   ``config.kg_path``): a run on ``data/keyed`` shows its questions in the keyed wording it
   was asked in;
4. a default (a storyboard's field), then ``data/``.

>>> import tempfile
>>> from library.runs.folder import RunDir
>>> run = RunDir.create(tempfile.mkdtemp(), run_id="r")
>>> run.write_meta({"run_id": "r", "config": {"data_dir": "data/keyed", "kg_path": "data/kg.json"}})
>>> view = RunView.open(run.path)
>>> str(view.questions_file("eval")), str(view.kg_path)
('data/keyed/eval.jsonl', 'data/kg.json')
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Iterator

from library.contracts import EVAL_KIND, PHASES, ROLLOUT_KIND, Episode, Question
from library.errors import DataFileError
from library.stats import mean_interval, wilson_interval
from library.graph.kg import DEFAULT_KG_PATH, KnowledgeGraph, load_kg
from library.jsonl import iter_jsonl, read_json, sha256_file
from library.questions.dataset import SPLIT_FILES, STATS_FILE
from library.runs.folder import EPISODES, META, METRICS, RunDir

DEFAULT_DATA_DIR = Path("data")
#: A run folder may carry the exact eval questions / KG its episodes refer to.
RUN_QUESTIONS = "eval_questions.jsonl"
RUN_KG = "kg.json"



class RunView:
    """One run folder, read once and lazily (a page of tables needs no question file)."""

    def __init__(self, path: str | Path, *, kg: str | Path | None = None, data_dir: str | Path | None = None,
                 questions: str | Path | None = None, kg_default: str | Path | None = None,
                 questions_default: str | Path | None = None):
        self.folder = RunDir(path)
        self.path = self.folder.path
        self._kg_arg, self._data_arg, self._questions_arg = kg, data_dir, questions
        self._kg_default, self._questions_default = kg_default, questions_default
        self._questions: dict[str, dict[str, Question]] = {}

    @classmethod
    def open(cls, path: str | Path, *, require_metrics: bool = False, **sources: Any) -> "RunView":
        """A view of the run in ``path`` (DataFileError if it is no run folder). ``sources``:
        ``kg``, ``data_dir``, ``questions`` (explicit) and ``kg_default``, ``questions_default``."""
        view = cls(RunDir.open(path).path, **sources)
        if not (view.path / META).exists() and not (view.path / EPISODES).exists():
            raise DataFileError(view.path, "not a run folder (no meta.json, no episodes.jsonl)")
        if require_metrics and not (view.path / METRICS).exists():
            raise DataFileError(view.path / METRICS, "run has no metrics.json (has its evaluation finished?)")
        return view

    def sub_run(self, *parts: str) -> "RunView":
        """An experiment's sub-run (``<run>/ablation/<preset>``): the parent's questions and KG."""
        return RunView(self.path.joinpath(*parts), kg=self.kg_path, data_dir=self.data_dir,
                       questions=self._questions_arg)

    # ------------------------------------------------------------------ logs
    @cached_property
    def meta(self) -> dict[str, Any]:
        return self.folder.read_meta() if (self.path / META).exists() else {}

    @cached_property
    def metrics(self) -> dict[str, Any]:
        return self.folder.read_metrics()

    @property
    def config(self) -> dict[str, Any]:
        return self.meta.get("config") or {}

    @property
    def run_id(self) -> str:
        return str(self.meta.get("run_id") or self.path.name)

    @cached_property
    def episodes(self) -> list[Episode]:
        return self.folder.read_episodes()

    def iter_episodes(self, phase: str | None = None, split: str | None = None,
                      kind: str | None = None) -> Iterator[Episode]:
        for ep in self.episodes:
            if (phase is None or ep.phase == phase) and (split is None or ep.split == split) \
                    and (kind is None or ep.kind == kind):
                yield ep

    def require_current(self, run: str | Path | None = None) -> None:
        """What the video and the demo page call before reading the episodes: a DataFileError,
        one sentence naming ``kgr migrate RUN``, when an episode lacks what scoring stores for
        readers (``grounded``, entity spans, TRACE steps). Readers never score a logged
        completion to make up for it."""
        stale = sum(not ep.for_readers() for ep in self.episodes)
        if stale:
            raise DataFileError(self.path / EPISODES, f"{stale} of {len(self.episodes)} episodes were logged before "
                                                      "scoring stored their entity spans, TRACE steps and grounded "
                                                      f"verdict: run `kgr migrate {run or self.path}` once to add them")

    @property
    def phases(self) -> list[str]:
        """Phases evaluated on the eval split, in training order."""
        done = self.metrics.get("eval", {})
        return [p for p in PHASES if p in done]

    def eval_episodes(self, phase: str, split: str = "eval") -> dict[str, Episode]:
        """``{ex_id: episode}`` of one phase's answers on one metrics split (``eval``,
        ``eval_shuffled``, ``train_sample``)."""
        return eval_episodes(self.episodes, phase=phase, split=split)

    def curves(self, phase: str) -> list[dict[str, Any]]:
        """The trainer's logged curve of a phase (loss, KL ...), from metrics.json."""
        return list((self.metrics.get("curves") or {}).get(phase) or [])

    # ------------------------------------------------------------- sources
    @property
    def data_dir(self) -> Path:
        return Path(self._data_arg or self.config.get("data_dir") or DEFAULT_DATA_DIR)

    @property
    def kg_path(self) -> Path:
        if self._kg_arg is not None:
            return Path(self._kg_arg)
        own = self.path / RUN_KG
        if own.exists():
            return own
        return Path(self.config.get("kg_path") or self._kg_default or DEFAULT_KG_PATH)

    @cached_property
    def kg(self) -> KnowledgeGraph:
        self.check_data(self.kg_path, self._kg_name)
        return load_kg(self.kg_path)

    def check_data(self, path: Path, name: str | None = None) -> None:
        """Refuse to read ``path`` for this run when meta.json recorded the file (``data``: sha256
        per file name, written when training started; ``name``: the recorded name, default
        ``path``'s) with other content: the numbers shown would not be the run's. DataFileError
        naming every file of the run's data that changed. A run's own copies are its own."""
        recorded = self.meta.get("data") or {}
        path = Path(path)
        name = name or path.name
        if name not in recorded or not path.is_file() or self.path.resolve() in path.resolve().parents:
            return
        if _file_digest(path) == recorded[name]:
            return
        changed = [str(path)] + [str(p) for p, digest in self._data_files().items()
                                 if p != path and p.is_file() and self.path.resolve() not in p.resolve().parents
                                 and _file_digest(p) != digest]
        raise DataFileError(path, f"not the data {self.path} was trained on ({', '.join(changed)} differ"
                                  f"{'s' if len(changed) == 1 else ''} from the sha256 in its meta.json: changed "
                                  "since, or another folder); point --data (or --questions) and --kg at the files "
                                  "it was trained on")

    def _data_files(self) -> dict[Path, str]:
        """The run's data files where this view reads them, with the sha256 meta.json recorded."""
        kg_name, eval_name = self._kg_name, SPLIT_FILES["eval"]
        return {(self.kg_path if name == kg_name else self.questions_file("eval") if name == eval_name
                 else self.data_dir / name): digest
                for name, digest in (self.meta.get("data") or {}).items()}

    @property
    def _kg_name(self) -> str:
        """The name under which meta.json recorded the KG's hash."""
        return Path(self.config.get("kg_path") or DEFAULT_KG_PATH).name

    def questions_file(self, split: str = "eval") -> Path:
        """The file the run's ``split`` questions come from."""
        if split == "eval":
            if self._questions_arg is not None:
                return Path(self._questions_arg)
            if (self.path / RUN_QUESTIONS).exists():
                return self.path / RUN_QUESTIONS
            if not self.config.get("data_dir") and self._questions_default is not None:
                return Path(self._questions_default)
        return self.data_dir / SPLIT_FILES.get(split, f"{split}.jsonl")

    def questions(self, split: str = "eval") -> dict[str, Question]:
        """Every question of a split, by id (read once)."""
        if split not in self._questions:
            path = self.questions_file(split)
            self.check_data(path, SPLIT_FILES.get(split, path.name))  # by the split's name: a renamed copy is checked too
            self._questions[split] = {q.id: q for _, q in iter_jsonl(path, Question)}
        return self._questions[split]

    def questions_for(self, episodes: Iterable[Episode]) -> dict[str, Question]:
        """The questions ``episodes`` answered, from their splits' files; DataFileError naming
        the file when one is missing or lacks an id."""
        wanted: dict[str, set[str]] = defaultdict(set)
        for ep in episodes:
            wanted[ep.split].add(ep.ex_id)
        found: dict[str, Question] = {}
        for split, ids in wanted.items():
            path = self.questions_file(split)
            if not path.exists():
                raise DataFileError(path, f"question file of {len(ids)} {split} episode(s) not found (pass --data)")
            have = self.questions(split)
            missing = sorted(ids - set(have))
            if missing:
                raise DataFileError(path, f"{len(missing)} {split} question(s) of the run are not in this file, "
                                          f"e.g. {missing[:3]}")
            found.update({i: have[i] for i in ids})
        return found

    @cached_property
    def data_stats(self) -> dict[str, Any] | None:
        """The ``stats.json`` that ``kgr data`` wrote beside the run's questions, or None where
        the data folder has none (DataFileError naming the line where it is not JSON)."""
        path = self.data_dir / STATS_FILE
        return read_json(path) if path.is_file() else None

    @property
    def step_order(self) -> str:
        """The step order of the questions the run was trained on (its data folder's stats.json)."""
        try:
            stats = self.data_stats
        except (OSError, DataFileError):
            return "chain"
        return str((stats or {}).get("step_order") or "chain")


@functools.lru_cache(maxsize=256)
def _digest_at(path: str, size: int, mtime_ns: int) -> str:
    return sha256_file(path)


def _file_digest(path: Path) -> str:
    """sha256 of a file, computed once per (size, mtime): a page over many runs on the same data hashes it once."""
    st = path.stat()
    return _digest_at(str(path.resolve()), st.st_size, st.st_mtime_ns)


def eval_episodes(episodes: Iterable[Episode], *, phase: str, split: str, step: int | None = None) -> dict[str, Episode]:
    """The eval episodes of (phase, split[, step]) keyed by ex_id (the last one wins)."""
    out: dict[str, Episode] = {}
    for ep in episodes:
        if ep.phase != phase or ep.kind != EVAL_KIND:
            continue
        if (ep.eval_split or ep.split) != split:
            continue
        if step is not None and ep.step != step:
            continue
        out[ep.ex_id] = ep
    return out


# --------------------------------------------------------------------------- rollout curves
def rollout_curve(episodes: Iterable[Episode], phase: str | None = None, *, max_points: int | None = None,
                  min_step: int = 0) -> list[dict[str, Any]]:
    """Per step of the training rollouts (``kind == "rollout"``): n, accuracy with its Wilson
    interval, the format rate and the mean of every numeric reward field (a flag counts as 0/1),
    with a normal interval for the total. ``max_points`` pools consecutive steps so that at most that many points remain.

    >>> from library.contracts import ParsedCompletion, RewardBreakdown
    >>> def ep(step, total, correct):
    ...     p = ParsedCompletion(answer="A", trace_text="t", trace_entities=[], path_entities=[], valid_format=True,
    ...                          claims=[])
    ...     r = RewardBreakdown(correctness=total, path_coverage=0, path_reward=0, spam_penalty=0, total=total)
    ...     return Episode(phase="grpo", step=step, ex_id="q", split="train", prompt="", completion="",
    ...                    parsed=p, reward=r, kind="rollout", correct=correct)
    >>> [(pt["step"], pt["n"], pt["accuracy"]) for pt in rollout_curve([ep(1, 1.0, True), ep(1, 0.0, False), ep(2, 1.0, True)])]
    [(1, 2, 0.5), (2, 1, 1.0)]
    """
    by_step: dict[int, list[Episode]] = defaultdict(list)
    for ep in episodes:
        if ep.kind == ROLLOUT_KIND and ep.step >= min_step and (phase is None or ep.phase == phase):
            by_step[ep.step].append(ep)
    ordered = sorted(by_step)
    size = max(1, math.ceil(len(ordered) / max_points)) if max_points else 1
    curve = []
    for i in range(0, len(ordered), size):
        steps = ordered[i:i + size]
        rows = [ep for s in steps for ep in by_step[s]]
        n = len(rows)
        k = sum(bool(ep.correct) for ep in rows)
        point: dict[str, Any] = {"step": steps[-1], "n": n, "accuracy": k / n,
                                 "accuracy_ci": [round(x, 6) for x in wilson_interval(k, n)],
                                 "valid_format": sum(ep.parsed.valid_format for ep in rows) / n}
        components: dict[str, list[float]] = defaultdict(list)
        for ep in rows:
            for name, value in ep.reward.model_dump().items():
                if isinstance(value, (int, float)):
                    components[name].append(float(value))
        for name, values in components.items():
            point[name] = sum(values) / len(values)
        totals = components.get("total", [])
        point["reward_total"] = point.get("total", 0.0)
        point["reward_ci"] = mean_interval(totals)
        curve.append(point)
    return curve
