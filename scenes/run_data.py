"""The run a storyboard reads: :class:`RunData`, a :class:`library.runs.reader.RunView` with the
shot-level questions a scene asks of it (an eval episode by question and phase, the reward the
run evaluated with, what each phase added) and the values its templates see.

Everything here reads what scoring stored with each episode (``correct``, ``grounded``, the
claims, entity spans and TRACE steps); a run logged before scoring stored them is refused with
the command that migrates it (``kgr migrate RUN``). Imports neither torch nor manim.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

from library.config import EvalSettings
from library.contracts import Claim, Episode, Question
from library.evaluation.evaluate import compare_phases
from library.graph.check import fanouts
from library.graph.oracle import question_walk, walk_edges
from library.runs.reader import RunView
from library.scoring.reward import RewardModel


def branch_claims(kg: Any, q: Question, claims: list[Claim]) -> list[tuple[str, str, str]]:
    """The branches a TRACE carried: its claims (as the reward stored them) that the reasoning
    procedure states for ``q`` (library/graph/oracle.py ``walk_edges``) but that are not gold
    edges, in TRACE order. Each is a true edge into an entity the graph later prunes; on a
    functional graph the procedure states only the gold edges, so there are none."""
    gold = {(e.src, e.rel, e.dst) for e in q.path_star.edges}
    stated = set(walk_edges(question_walk(kg, q))) - gold
    return list(dict.fromkeys((c.src, c.rel, c.dst) for c in claims if c.in_kg and (c.src, c.rel, c.dst) in stated))


def rsft_check(episodes: list[Any], rule: str) -> dict[str, Any] | None:
    """What the graph's check did to RSFT's choice, from its logged samples: of ``prompts``, how
    many had a right sample (``right``), how many a right one whose TRACE states every gold edge
    (``grounded``), and ``ungrounded``: prompts whose right samples all missed the path, which
    RSFT kept no winner for under ``winners: grounded`` and trained on under ``correct``
    (``rule``). None without RSFT samples.

    >>> from types import SimpleNamespace as E
    >>> rsft_check([E(ex_id="a", phase="rsft", kind="rollout", correct=True, grounded=False),
    ...             E(ex_id="a", phase="rsft", kind="rollout", correct=False, grounded=False),
    ...             E(ex_id="b", phase="rsft", kind="rollout", correct=True, grounded=True)], "grounded")
    {'rule': 'grounded', 'prompts': 2, 'right': 2, 'grounded': 1, 'ungrounded': 1}
    """
    right: dict[str, bool] = {}
    grounded: dict[str, bool] = {}
    for e in episodes:
        if e.phase == "rsft" and getattr(e, "kind", None) == "rollout":
            right[e.ex_id] = right.get(e.ex_id, False) or bool(e.correct)
            grounded[e.ex_id] = grounded.get(e.ex_id, False) or bool(e.correct and e.grounded)
    if not right:
        return None
    n_right, n_grounded = sum(right.values()), sum(grounded.values())
    return {"rule": rule, "prompts": len(right), "right": n_right, "grounded": n_grounded,
            "ungrounded": n_right - n_grounded}


class RunData(RunView):
    """Everything a storyboard may read from one run (library.runs.reader.RunView), plus the
    shot-level questions a scene asks of it."""

    @classmethod
    def load(cls, run: str | Path, *, kg: str | Path | None = None, questions: str | Path | None = None,
             kg_default: str | Path | None = None, questions_default: str | Path | None = None) -> "RunData":
        """``kg``/``questions``: explicit overrides (CLI flags); ``*_default``: the storyboard's
        fields, used where the run names no data of its own (library/runs/reader.py). A run whose
        episodes lack what scoring stores today is a DataFileError naming ``kgr migrate``."""
        data = cls.open(run, require_metrics=True, kg=kg, questions=questions, kg_default=kg_default,
                        questions_default=questions_default)
        data.require_current(run)
        return data

    @cached_property
    def _episode_index(self) -> dict[tuple[str, str, str], Episode]:
        index: dict[tuple[str, str, str], Episode] = {}
        # several samples of one question (RSFT/GRPO groups): the first one logged, stably
        for e in sorted(self.episodes, key=lambda e: (e.step, e.sample_idx or 0)):
            index.setdefault((e.ex_id, e.phase, e.split), e)
        return index

    def eval_episode(self, ex_id: str, phase: str, split: str = "eval") -> Episode | None:
        """The episode a shot shows for a question in a phase; indexed once per run."""
        return self._episode_index.get((ex_id, phase, split))

    @staticmethod
    def failed_honestly(ep: Episode) -> bool:
        """A reasoned miss: a well-formed wrong answer whose TRACE claims at least one edge and
        only edges that are in the KG, neither a bare guess nor a fabricated chain."""
        claims = ep.parsed.claims
        return (not ep.correct and ep.parsed.valid_format and ep.parsed.answer is not None
                and bool(claims) and all(c.in_kg for c in claims))

    @cached_property
    def eval_reward(self) -> RewardModel:
        """The reward the run's evaluation scored with (its config's ``eval.reward_preset``)."""
        preset = (self.config.get("eval") or {}).get("reward_preset") or EvalSettings().reward_preset
        return RewardModel.from_preset(self.kg, preset)

    def template_context(self) -> dict[str, Any]:
        phases = self.phases
        ctx = {"metrics": self.metrics, "meta": self.meta, "run_id": self.run_id, "phases": phases,
               "final": phases[-1] if phases else None, "first": phases[0] if phases else None,
               "kg": _KGStats(self), "steps": self.steps(), "branched": self.branched_answers,
               "rsft_check": self.rsft_check}
        if self.data_stats is not None:  # templates test `stats is defined`
            ctx["stats"] = self.data_stats
        return ctx

    @cached_property
    def branched_answers(self) -> int:
        """How many of the final phase's eval answers carried a branch (``branch_claims``): a
        storyboard shows a branching TRACE from this run only where there is one to show."""
        final = self.phases[-1] if self.phases else None
        questions = self.questions() if final else {}
        return sum(1 for ex_id, q in questions.items()
                   if (ep := self.eval_episode(ex_id, final)) is not None and branch_claims(self.kg, q, ep.parsed.claims))

    @cached_property
    def rsft_check(self) -> dict[str, Any] | None:
        """What the graph's check did to RSFT's choice on this run (:func:`rsft_check`)."""
        return rsft_check(self.episodes, (self.config.get("rsft") or {}).get("winners", "correct"))

    @cached_property
    def _steps(self) -> list[dict[str, Any]]:
        out = []
        for before, after in zip(self.phases, self.phases[1:]):
            c = compare_phases(self.episodes, "eval", before, after)
            if c["n"]:
                out.append({"phase": after, "before": before, "n": c["n"], "diff": c["diff"], "ci": c["ci"],
                            "measurable": c["ci"][0] > 0 or c["ci"][1] < 0, "gained": c["discordant"]["b_only"],
                            "lost": c["discordant"]["a_only"]})
        return out

    def steps(self) -> list[dict[str, Any]]:
        """What each phase added over the one before it, on the same eval questions: a paired
        difference with its 95% interval (library.evaluation.evaluate.compare_phases) and
        ``measurable`` when the interval excludes 0. The story a storyboard tells is chosen
        from these, so a phase that added nothing is shown adding nothing."""
        return self._steps


class _KGStats:
    """``kg.entities`` / ``kg.edges`` / ``kg.relations`` counts and ``kg.domain`` for templates;
    the KG file is read only if a template asks."""

    def __init__(self, data: RunData):
        self._data = data

    @property
    def entities(self) -> int:
        return len(self._data.kg.entities)

    @property
    def edges(self) -> int:
        return len(self._data.kg.edges)

    @property
    def relations(self) -> int:
        return len(self._data.kg.relations)

    @property
    def domain(self) -> str:
        return self._data.kg.domain

    @cached_property
    def _fan(self) -> list[int]:
        return fanouts(self._data.kg)

    @property
    def groups(self) -> int:
        """(entity, relation) pairs with at least one successor."""
        return len(self._fan)

    @property
    def functional(self) -> int:
        """Of those, the pairs with exactly one successor (a hop that does not branch)."""
        return sum(1 for n in self._fan if n == 1)

    @property
    def max_fanout(self) -> int:
        return max(self._fan, default=0)
