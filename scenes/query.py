"""Which episode a shot shows: the storyboard's selection language (``params.episode``: an
alias, ``{id: ...}`` or ``{query: ...}``, documented in storyboards/README.md) over a run's eval
episodes, and the template values of a selection (``episode``, ``before``, ``question``, ``made``,
``selection``).

A query judges each episode by what scoring stored with it (``correct``, ``grounded``, the
claims); only the made answers (``made.*``: the reference TRACE and the hacks, which no run
logged) are scored here, once each, by the run's evaluation reward. Imports neither torch nor manim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from library.contracts import Episode, Question
from library.errors import DataFileError
from library.questions.wording import reference_completion
from library.scoring.hacks import HACKS
from scenes.run_data import RunData, branch_claims
from scenes.storyboard import Storyboard, phase_label

#: Selection query terms. A query is one term or a list of them (``[improved, grounded]``);
#: every term is a requirement on the *judged* episode (the ``to`` phase's answer), except
#: ``best``/``worst``, which only order the candidates. Documented in storyboards/README.md.
QUERY_TERMS = ("correct", "wrong", "grounded", "failed_honestly", "improved", "regressed", "branched", "best", "worst")
_NEEDS_RIGHT = {"correct", "improved"}
_NEEDS_WRONG = {"wrong", "failed_honestly", "regressed"}
_SPEC_KEYS = {"id", "phase", "split", "query", "from", "to", "prefer", "index", "fallback", "allow_ungrounded"}


@dataclass
class Selection:
    """An eval question chosen for a shot, and the phase whose answer the shot shows."""

    ex_id: str
    phase: str
    episode: Episode
    question: Question
    from_phase: str | None = None
    to_phase: str | None = None
    before: Episode | None = None  # a query with `from` (improved/regressed/explicit): that phase's answer
    query: tuple[str, ...] = ()  # the terms that matched (empty for an `id:` pick)
    fallback: bool = False  # True: the primary query found nothing and `fallback:` was shown
    shown: list[tuple[str, Episode]] = field(default_factory=list)  # (role, episode) drawn by the scene
    _made: "_Made | None" = field(default=None, repr=False)

    def context(self, data: RunData) -> dict[str, Any]:
        q = self.question
        return {
            "episode": _episode_context(data, self.episode, q),
            "before": _episode_context(data, self.before, q) if self.before is not None else None,
            "question": {**q.model_dump(mode="json"), "answer_label": q.options[q.answer_star],
                         "hops": [{"src": data.kg.label(e.src), "rel": data.kg.relation_label(e.rel),
                                   "dst": data.kg.label(e.dst)} for e in q.path_star.edges]},
            # answers made for this question, scored by the run's evaluation reward (not sampled)
            "made": self.made(data),
            "selection": {"from": self.from_phase, "to": self.to_phase, "phase": self.phase,
                          "query": " + ".join(self.query), "fallback": self.fallback},
        }

    def made(self, data: RunData) -> "_Made":
        """The answers made for this question (``made.*``), each scored once, when first read."""
        if self._made is None:
            self._made = _Made(data, self.question)
        return self._made

    def episodes(self) -> list[dict[str, str]]:
        """The manifest's view: every episode this shot shows or quotes, by role, in order."""
        pairs = [("selected", self.episode)] + ([("before", self.before)] if self.before is not None else []) + self.shown
        out: list[dict[str, str]] = []
        for role, ep in pairs:
            entry = {"phase": ep.phase, "ex_id": ep.ex_id, "role": role}
            if not any(e["phase"] == ep.phase and e["ex_id"] == ep.ex_id for e in out):
                out.append(entry)
        return out


#: ``reward_bars`` ``answer:`` names and the ``made`` template variable: the gold completion
#: (the reference TRACE, written from the graph) and the hacks of library/scoring/hacks.py
MADE_ANSWERS = ("reference", *HACKS)


def made_answer(data: RunData, q: Question, name: str) -> tuple[str, Any]:
    """(completion, Scored) of the made answer ``name`` to ``q``, scored as the run's evaluation
    scored its answers."""
    if name not in MADE_ANSWERS:
        raise ShotError(f"unknown made answer {name!r}; known: {', '.join(MADE_ANSWERS)}")
    completion = reference_completion(q) if name == "reference" else HACKS[name](data.kg, q)
    return completion, data.eval_reward.score(q, completion)


class _Made:
    """``made.<name>`` / ``made[name]``: the made answer ``name`` to one question as
    ``{completion, trace, answer, correct, reward}``, built and scored only when first read
    (logged episodes are never parsed again; these are not logged). An unknown name is a
    ShotError, which the shot reports at its line."""

    def __init__(self, data: RunData, q: Question):
        self._data, self._q = data, q
        self._done: dict[str, dict[str, Any]] = {}

    def __getitem__(self, name: str) -> dict[str, Any]:
        if name not in self._done:
            completion, scored = made_answer(self._data, self._q, name)
            self._done[name] = {"completion": completion, "trace": scored.parsed.trace_text,
                                "answer": scored.parsed.answer, "correct": scored.correct,
                                "reward": scored.reward.model_dump(mode="json")}
        return self._done[name]

    def __getattr__(self, name: str) -> dict[str, Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        return self[name]


def _episode_context(data: RunData, ep: Episode, q: Question) -> dict[str, Any]:
    answer = ep.parsed.answer
    return {**ep.model_dump(mode="json"), "answer": answer, "correct": ep.correct, "grounded": ep.grounded,
            "predicted_label": q.options.get(answer, "") if answer else "",
            "trace": ep.parsed.trace_text, "phase_label": phase_label(ep.phase)}


class ShotError(Exception):
    """Raised inside resolution; turned into a DataFileError at the shot's line."""

    def __init__(self, message: str, path: tuple = ()):
        super().__init__(message)
        self.path = path


class NoMatch(ShotError):
    """A query that nothing in the run satisfies: the one error a declared ``fallback`` catches."""


def phase_named(data: RunData, name: Any, what: str) -> str:
    phases = data.phases
    if name in ("final", "last"):
        if not phases:
            raise ShotError("the run has no evaluated phase")
        return phases[-1]
    if name == "first":
        return phases[0]
    if name not in phases:
        raise ShotError(f"{what}: phase {name!r} was not evaluated in this run (evaluated: {', '.join(phases) or 'none'})")
    return str(name)


def select_episode(data: RunData, spec: Any, sb: Storyboard, shot_index: int) -> Selection:
    """Resolve ``params.episode``: an alias from ``episodes:``, ``{id: ...}`` or ``{query: ...}``."""
    path = ("shots", shot_index, "params", "episode")
    if isinstance(spec, str):
        if spec not in sb.episodes:
            raise ShotError(f"unknown episode alias {spec!r} (define it under episodes:)", path)
        spec, path = sb.episodes[spec], ("episodes", spec)
    return _select(data, spec, path)


def _select(data: RunData, spec: Any, path: tuple) -> Selection:
    if not isinstance(spec, dict):
        raise ShotError("episode must be an alias name, {id: ...} or {query: ...}", path)
    extra = sorted(set(spec) - _SPEC_KEYS)
    if extra:
        raise ShotError(f"unknown episode keys {extra}; known: {sorted(_SPEC_KEYS)}", path)
    split = spec.get("split", "eval")
    try:
        if "id" in spec:
            # an explicit id is the author naming the episode: shown as named, no guard
            ex_id = str(spec["id"])
            phase = phase_named(data, spec.get("phase", "final"), "episode")
            ep = data.eval_episode(ex_id, phase, split)
            if ep is None:
                raise ShotError(f"no {split} episode {ex_id!r} in phase {phase!r} of run {data.run_id}", path)
            return Selection(ex_id, phase, ep, _question(data, ex_id, path))
        try:
            sel = _query(data, spec, split, path)
        except NoMatch as exc:
            if spec.get("fallback") is None:
                raise NoMatch(f"{exc}, and no fallback is declared", path) from None
            # the declared fallback is shown, and says so (selection.fallback) to the templates
            try:
                sel = _select(data, spec["fallback"], path + ("fallback",))
            except NoMatch as fb:
                raise NoMatch(f"{exc}; its fallback found nothing either: {fb}", fb.path) from None
            sel.fallback = True
            return sel
        if not spec.get("allow_ungrounded", False):
            _refuse_ungrounded(data, sel, spec, path)
        return sel
    except DataFileError:
        raise
    except ShotError as exc:
        if not exc.path:
            exc.path = path
        raise


def _terms(query: Any, path: tuple) -> tuple[str, ...]:
    terms = tuple(query) if isinstance(query, list) else (query,)
    bad = [t for t in terms if t not in QUERY_TERMS]
    if bad or not terms:
        raise ShotError(f"unknown episode query {query!r}; use id, or query: one of {', '.join(QUERY_TERMS)} "
                        f"or a list of them", path)
    if _NEEDS_RIGHT & set(terms) and _NEEDS_WRONG & set(terms) or {"improved", "regressed"} <= set(terms):
        raise ShotError(f"query {list(terms)} contradicts itself (a right and a wrong answer)", path)
    if {"best", "worst"} <= set(terms):
        raise ShotError("query cannot be both best and worst", path)
    return terms


_ORDERS = {
    "longest_hop": lambda ep, q: (-q.hop_len, q.id),
    "shortest_hop": lambda ep, q: (q.hop_len, q.id),
    "id": lambda ep, q: (q.id,),
    "reward": lambda ep, q: (-ep.reward.total, q.id),
    "low_reward": lambda ep, q: (ep.reward.total, q.id),
}


def _query(data: RunData, spec: dict, split: str, path: tuple) -> Selection:
    terms = _terms(spec.get("query"), path)
    compares = "improved" in terms or "regressed" in terms
    # the judged phase: `to`; by default the final phase, or `phase` for a query that
    # compares nothing (`{query: best, phase: sft}` judges and shows sft)
    dst = phase_named(data, spec.get("to", "final" if compares else spec.get("phase", "final")), "episode.to")
    # `from` also gives a non-comparing query a `before` answer for its captions
    src = phase_named(data, spec.get("from", "first"), "episode.from") if compares or "from" in spec else None
    shown = phase_named(data, spec.get("phase", dst), "episode.phase")
    prefer = spec.get("prefer", "reward" if "best" in terms else "low_reward" if "worst" in terms else "longest_hop")
    if prefer not in _ORDERS:
        raise ShotError(f"unknown prefer {prefer!r}; known: {sorted(_ORDERS)}", path)

    def ok(ep: Episode, q: Question) -> bool:
        before = data.eval_episode(q.id, src, split) if src else None
        checks = {
            "correct": lambda: bool(ep.correct),
            "wrong": lambda: not ep.correct,
            "grounded": lambda: bool(ep.grounded),
            "failed_honestly": lambda: data.failed_honestly(ep),
            "improved": lambda: before is not None and not before.correct and bool(ep.correct),
            "regressed": lambda: before is not None and bool(before.correct) and not ep.correct,
            "branched": lambda: bool(branch_claims(data.kg, q, ep.parsed.claims)),
        }
        return all(checks[t]() for t in terms if t in checks)

    cands = []
    for ex_id, q in data.questions().items():
        ep = data.eval_episode(ex_id, dst, split)
        if ep is not None and ok(ep, q):
            cands.append((ep, q))
    cands.sort(key=lambda c: _ORDERS[prefer](*c))
    index = int(spec.get("index", 0))
    if index >= len(cands):
        what = " and ".join(_describe(t, src, dst) for t in terms)
        found = f"only {len(cands)} candidates, index {index} asked" if cands else f"no {split} question {what}"
        raise NoMatch(f"{found} in run {data.run_id} (query: {' + '.join(terms)})", path)
    q = cands[index][1]
    ep = data.eval_episode(q.id, shown, split)
    if ep is None:
        raise ShotError(f"question {q.id} has no episode in phase {shown!r}", path)
    return Selection(q.id, shown, ep, q, src, dst,
                     data.eval_episode(q.id, src, split) if src else None, terms)


def _describe(term: str, src: str | None, dst: str) -> str:
    return {
        "improved": f"was wrong in {src} and right in {dst}",
        "regressed": f"was right in {src} and wrong in {dst}",
        "correct": f"is right in {dst}",
        "wrong": f"is wrong in {dst}",
        "grounded": f"is grounded in {dst} (well-formed, every gold edge claimed in order)",
        "failed_honestly": f"failed honestly in {dst} (well-formed and wrong, claiming only KG edges)",
        "branched": f"carried a branch in {dst} (its TRACE states a true edge off the gold path that the walk prunes)",
    }.get(term, f"has an episode in {dst}")


def _refuse_ungrounded(data: RunData, sel: Selection, spec: dict, path: tuple) -> None:
    """A query never silently puts a right-but-ungrounded answer (a lucky guess) on screen:
    neither the shown answer nor the judged one. The storyboard must say what it wants."""
    judged = data.eval_episode(sel.ex_id, sel.to_phase, spec.get("split", "eval")) if sel.to_phase else None
    for ep in (sel.episode, judged):
        if ep is not None and ep.correct and not ep.grounded:
            raise ShotError(
                f"query {' + '.join(sel.query)} in run {data.run_id} picks {sel.ex_id}, whose {ep.phase} answer is right "
                f"but not grounded (its TRACE does not claim every gold edge in order); add grounded to the query, "
                f"declare a fallback:, or set allow_ungrounded: true to show it as a guess", path)


def _question(data: RunData, ex_id: str, path: tuple) -> Question:
    q = data.questions().get(ex_id)
    if q is None:
        raise ShotError(f"question {ex_id!r} not found in {data.questions_file()}", path)
    return q
