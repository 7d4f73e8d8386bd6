"""Resolution: turn each storyboard shot plus a run's logs and the KG into a scene payload.

A payload (``scenes/payloads.py``) holds only resolved strings and numbers. Building it here,
from ``metrics.json``, ``episodes.jsonl``, the eval questions and ``kg.json`` through the
storyboard's templates, is what makes "every number on screen comes from the logs" hold: the
scenes never read a file. A clip's cache key is the hash of its payload, so a clip is
re-rendered exactly when the data it shows changes.

Imports neither torch nor manim.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from library.contracts import BLANK_TAG_RE, PHASES, Claim, Episode, Question
from library.errors import DataFileError

from library.graph.check import fanouts
from library.graph.oracle import question_walk, walk_edges
from library.questions.wording import reference_completion
from library.scoring.hacks import HACKS
from library.scoring.matching import is_grounded
from library.scoring.reward import RewardModel
from library.runs.reader import RunView, rollout_curve
from scenes.payloads import validate_payload
from scenes.spoken import spoken
from scenes.storyboard import (
    END_HOLD_SECONDS,
    NARRATION_PAD_SECONDS,
    XFADE_SECONDS,
    Storyboard,
    ci,
    evaluate_when,
    pct,
    phase_label,
    render_params,
    render_text,
)

MAX_KG_NODES = 12

REWARD_NAMES = {
    "correctness": "correct answer",
    "path_reward": "path reward",
    "path_coverage": "path coverage",
    "edge_reward": "verified edges",
    "spam_penalty": "spam penalty",
}


# --------------------------------------------------------------------------- run data


class RunData(RunView):
    """Everything a storyboard may read from one run (library.runs.reader.RunView), plus the
    shot-level questions a scene asks of it."""

    @classmethod
    def load(cls, run: str | Path, *, kg: str | Path | None = None, questions: str | Path | None = None,
             kg_default: str | Path | None = None, questions_default: str | Path | None = None) -> "RunData":
        """``kg``/``questions``: explicit overrides (CLI flags); ``*_default``: the storyboard's
        fields, used where the run names no data of its own (library/runs/reader.py)."""
        return cls.open(run, require_metrics=True, kg=kg, questions=questions, kg_default=kg_default,
                        questions_default=questions_default)

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

    def claims(self, ep: Episode, q: Question) -> list[Claim]:
        """The claims the reward judged for ``ep``, stored with it."""
        return ep.parsed.claims

    def grounded(self, ep: Episode, q: Question) -> bool:
        return is_grounded(ep.parsed, self.claims(ep, q), q.path_star.edges)

    def failed_honestly(self, ep: Episode, q: Question) -> bool:
        """A reasoned miss: a well-formed wrong answer whose TRACE claims at least one edge and
        only edges that are in the KG, neither a bare guess nor a fabricated chain."""
        claims = self.claims(ep, q)
        return (not ep.correct and ep.parsed.valid_format and ep.parsed.answer is not None
                and bool(claims) and all(c.in_kg for c in claims))

    @cached_property
    def eval_reward(self) -> RewardModel:
        """The reward the run's evaluation scored with (its config's ``eval.reward_preset``)."""
        from library.config import EvalSettings

        preset = (self.config.get("eval") or {}).get("reward_preset") or EvalSettings().reward_preset
        return RewardModel.from_preset(self.kg, preset)

    def template_context(self) -> dict[str, Any]:
        phases = self.phases
        ctx = {"metrics": self.metrics, "meta": self.meta, "run_id": self.run_id, "phases": phases,
               "final": phases[-1] if phases else None, "first": phases[0] if phases else None,
               "kg": _KGStats(self), "steps": self.steps()}
        if self.data_stats is not None:  # templates test `stats is defined`
            ctx["stats"] = self.data_stats
        return ctx

    @cached_property
    def _steps(self) -> list[dict[str, Any]]:
        from library.evaluation.evaluate import compare_phases

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


# --------------------------------------------------------------------------- episode selection

#: Selection query terms. A query is one term or a list of them (``[improved, grounded]``);
#: every term is a requirement on the *judged* episode (the ``to`` phase's answer), except
#: ``best``/``worst``, which only order the candidates. Documented in storyboards/README.md.
QUERY_TERMS = ("correct", "wrong", "grounded", "failed_honestly", "improved", "regressed", "best", "worst")
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

    def context(self, data: "RunData") -> dict[str, Any]:
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

    def made(self, data: "RunData") -> "_Made":
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


def made_answer(data: "RunData", q: Question, name: str) -> tuple[str, Any]:
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

    def __init__(self, data: "RunData", q: Question):
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


def _episode_context(data: "RunData", ep: Episode, q: Question) -> dict[str, Any]:
    answer = ep.parsed.answer
    return {**ep.model_dump(mode="json"), "answer": answer, "correct": ep.correct, "grounded": data.grounded(ep, q),
            "predicted_label": q.options.get(answer, "") if answer else "",
            "trace": ep.parsed.trace_text, "phase_label": phase_label(ep.phase)}


class ShotError(Exception):
    """Raised inside resolution; turned into a DataFileError at the shot's line."""

    def __init__(self, message: str, path: tuple = ()):
        super().__init__(message)
        self.path = path


class NoMatch(ShotError):
    """A query that nothing in the run satisfies: the one error a declared ``fallback`` catches."""


def _phase(data: RunData, name: Any, what: str) -> str:
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


def _eval_episode(data: RunData, ex_id: str, phase: str, split: str = "eval") -> Episode | None:
    return data.eval_episode(ex_id, phase, split)


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
            phase = _phase(data, spec.get("phase", "final"), "episode")
            ep = _eval_episode(data, ex_id, phase, split)
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
    dst = _phase(data, spec.get("to", "final" if compares else spec.get("phase", "final")), "episode.to")
    # `from` also gives a non-comparing query a `before` answer for its captions
    src = _phase(data, spec.get("from", "first"), "episode.from") if compares or "from" in spec else None
    shown = _phase(data, spec.get("phase", dst), "episode.phase")
    prefer = spec.get("prefer", "reward" if "best" in terms else "low_reward" if "worst" in terms else "longest_hop")
    if prefer not in _ORDERS:
        raise ShotError(f"unknown prefer {prefer!r}; known: {sorted(_ORDERS)}", path)

    def ok(ep: Episode, q: Question) -> bool:
        before = data.eval_episode(q.id, src, split) if src else None
        checks = {
            "correct": lambda: bool(ep.correct),
            "wrong": lambda: not ep.correct,
            "grounded": lambda: data.grounded(ep, q),
            "failed_honestly": lambda: data.failed_honestly(ep, q),
            "improved": lambda: before is not None and not before.correct and bool(ep.correct),
            "regressed": lambda: before is not None and bool(before.correct) and not ep.correct,
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
    }.get(term, f"has an episode in {dst}")


def _refuse_ungrounded(data: RunData, sel: Selection, spec: dict, path: tuple) -> None:
    """A query never silently puts a right-but-ungrounded answer (a lucky guess) on screen:
    neither the shown answer nor the judged one. The storyboard must say what it wants."""
    judged = data.eval_episode(sel.ex_id, sel.to_phase, spec.get("split", "eval")) if sel.to_phase else None
    for ep in (sel.episode, judged):
        if ep is not None and ep.correct and not data.grounded(ep, sel.question):
            raise ShotError(
                f"query {' + '.join(sel.query)} in run {data.run_id} picks {sel.ex_id}, whose {ep.phase} answer is right "
                f"but not grounded (its TRACE does not claim every gold edge in order); add grounded to the query, "
                f"declare a fallback:, or set allow_ungrounded: true to show it as a guess", path)


def _question(data: RunData, ex_id: str, path: tuple) -> Question:
    q = data.questions().get(ex_id)
    if q is None:
        raise ShotError(f"question {ex_id!r} not found in {data.questions_file()}", path)
    return q


# --------------------------------------------------------------------------- payload builders


def _p(params: dict, key: str, default: Any = None) -> Any:
    return params.get(key, default)


def build_title(data: RunData, params: dict, sel: Selection | None) -> dict:
    return {"title": params.get("title", ""), "subtitle": params.get("subtitle", ""), "footer": params.get("footer", "")}


def branch_claims(kg: Any, q: Question, claims: list[Claim]) -> list[tuple[str, str, str]]:
    """The branches a TRACE carried: its claims (as the reward stored them) that the reasoning
    procedure states for ``q`` (library/graph/oracle.py ``walk_edges``) but that are not gold
    edges, in TRACE order. Each is a true edge into an entity the graph later prunes; on a
    functional graph the procedure states only the gold edges, so there are none."""
    gold = {(e.src, e.rel, e.dst) for e in q.path_star.edges}
    stated = set(walk_edges(question_walk(kg, q))) - gold
    return list(dict.fromkeys((c.src, c.rel, c.dst) for c in claims if c.in_kg and (c.src, c.rel, c.dst) in stated))


def build_kg_path(data: RunData, params: dict, sel: Selection | None) -> dict:
    if sel is None:
        raise ShotError("kg_path needs params.episode")
    kg, q, ep = data.kg, sel.question, sel.episode
    path = list(q.path_star.entities)
    for eid in path:
        if eid not in kg.entities:
            raise ShotError(f"question {q.id} names entity {eid!r} that is not in {data.kg_path}")
    cap = max(int(params.get("max_nodes", MAX_KG_NODES)), len(path))
    mentioned = [m for m in dict.fromkeys(ep.parsed.trace_entities) if m in kg.entities]
    # the claims the reward judged when it scored this episode
    claims = data.claims(ep, q)
    wrong = [(c.src, c.rel, c.dst) for c in claims if not c.in_kg]
    branch = branch_claims(kg, q, claims)
    branch_ents = [x for s, _, d in branch for x in (s, d) if x not in path]
    nodes: list[str] = list(path)
    # the branches the TRACE carried first (they are the shot's story on a branching graph;
    # none on a functional one), then the trace's other entities and false claims' endpoints
    for extra in branch_ents + mentioned + [x for s, _, d in wrong for x in (s, d)]:
        if extra not in nodes and len(nodes) < cap:
            nodes.append(extra)
    for nb in kg.neighborhood(path, radius=1):
        if len(nodes) >= cap:
            break
        if nb not in nodes:
            nodes.append(nb)
    keep = set(nodes)
    edges = [e for e in kg.edges if e.src in keep and e.dst in keep]
    predicted = ep.parsed.answer
    return {
        "question": params.get("question") or q.question,
        "nodes": [{"id": n, "label": kg.label(n), "type": kg.type_of(n)} for n in nodes],
        "edges": [{"src": e.src, "rel": e.rel, "rel_label": kg.relation_label(e.rel), "dst": e.dst} for e in edges],
        "path": path,
        "mentioned": [m for m in mentioned if m in keep],
        "wrong_edges": [{"src": s, "rel_label": kg.relation_label(r), "dst": d} for s, r, d in wrong if s in keep and d in keep],
        "branch_edges": [{"src": s, "rel": r, "rel_label": kg.relation_label(r), "dst": d}
                         for s, r, d in branch if s in keep and d in keep],
        "branches_not_shown": len({x for x in branch_ents if x not in keep}),
        "answer_label": q.options[q.answer_star],
        "predicted_label": q.options.get(predicted, "") if predicted else "",
        "correct": ep.correct if params.get("show_prediction", True) else None,
        "phase_label": params.get("phase_label") or phase_label(sel.phase),
    }


def _reward_range(data: RunData, key: str) -> tuple[float, float]:
    """The scale of a reward bar: the span of that component over every episode of the run
    (and 0), so bars of different shots and phases share one honest scale."""
    vals = [float(e.reward.model_dump().get(key) or 0.0) for e in data.episodes]
    lo, hi = min(vals + [0.0]), max(vals + [0.0])
    return (lo, hi if hi > lo else lo + 1.0)


def build_reward_bars(data: RunData, params: dict, sel: Selection | None) -> dict:
    if sel is None:
        raise ShotError("reward_bars needs params.episode")
    made = params.get("answer")
    # a made answer (reference or hack) to the selected question, else the episode's own answer
    reward = sel.made(data)[made]["reward"] if made else sel.episode.reward.model_dump()
    keys = params.get("components") or [k for k in ("correctness", "path_reward", "edge_reward", "spam_penalty") if k in reward]
    names = {**REWARD_NAMES, **(params.get("names") or {})}
    comps = []
    for k in keys:
        if k not in reward or not isinstance(reward[k], (int, float)):
            raise ShotError(f"reward component {k!r} is not logged for this episode (logged: {sorted(reward)})")
        lo, hi = _reward_range(data, k)
        # a made answer may score outside what the run's episodes took: the scale takes it in
        v = float(reward[k])
        comps.append({"name": names.get(k, k), "value": v, "lo": min(lo, v), "hi": max(hi, v)})
    lo, hi = _reward_range(data, "total")
    lo, hi = min(lo, float(reward["total"])), max(hi, float(reward["total"]))
    title = f"Reward of a made answer: {made}" if made else f"Reward of the {phase_label(sel.phase)} answer"
    return {"title": params.get("title", title), "components": comps,
            "total": float(reward["total"]), "total_range": [lo, hi], "note": params.get("note", "")}


def build_before_after(data: RunData, params: dict, sel: Selection | None) -> dict:
    if sel is None:
        raise ShotError("before_after needs params.episode")
    q = sel.question
    phases = [_phase(data, p, "before_after.phases") for p in params.get("phases") or data.phases[-4:]]
    rows = []
    for ph in phases:
        ep = _eval_episode(data, sel.ex_id, ph)
        if ep is None:
            raise ShotError(f"question {sel.ex_id} has no episode in phase {ph!r}")
        sel.shown.append(("row", ep))
        a = ep.parsed.answer
        steps, note = trace_steps(ep.parsed.trace_text)
        # the gold path's entities, as the reward's stored claims name them (never re-parsed)
        gold = [data.kg.label(x) for c in data.claims(ep, q) if c.on_gold_path for x in (c.src, c.dst)
                if x in data.kg.entities]
        rows.append({"phase_label": phase_label(ph), "trace": ep.parsed.trace_text,
                     "answer": f"{a}) {q.options[a]}" if a in q.options else None, "correct": ep.correct,
                     "steps": [{"text": t, "path": label_spans(t, gold)} for t in steps], "note": note,
                     "summary": claims_summary(ep)})
    return {"question": params.get("question") or q.question, "options": dict(q.options), "answer_star": q.answer_star, "rows": rows}


_TAG = r"\[(?:[A-Z]|\?)\]"
_STEP = rf"\s*[,;]\s*(?:which\b|{_TAG})[^,;:\[\]]*?{_TAG}"
#: A copied question step (library/questions/wording.py ``reference_trace``): after a fact
#: clause, a separator and the question's next step up to the colon after its tag; in chain
#: order ", which <rel> [T]:" (the "rest" style copies several such steps), in keyed order
#: "; [K] <rel> [T]:". It has no object before its colon: the reward reads no claim in it.
#: The separator (group 1) is kept: it ends the clause before it.
_COPIED_STEP = re.compile(rf"\s*([,;])\s*(?:which\b|{_TAG})[^,;:\[\]]*?{_TAG}(?:{_STEP})*\s*:")


def trace_steps(trace: str) -> tuple[list[str], str]:
    """A TRACE as a card shows it: one piece per fact clause, ending in the model's separator,
    the copied question steps between them and the blank tags left out (they claim nothing),
    every other character as the model wrote it, in order; and a note saying what was left
    out ("" when nothing was).

    >>> trace_steps("a leads to [G] b [G], which is fixed by [?]: b is fixed by [?] c (A).")
    (['a leads to b,', 'b is fixed by c (A).'], 'tags and copied question steps hidden')
    >>> trace_steps("a leads to [G] b [G]; [G] is fixed by [?]: b is fixed by [?] c, d (A).")[0]
    ['a leads to b;', 'b is fixed by c, d (A).']
    >>> trace_steps("x is y, so z")
    (['x is y, so z'], '')
    """
    parts = _COPIED_STEP.split(trace)
    pieces = [parts[i] + (parts[i + 1] if i + 1 < len(parts) else "") for i in range(0, len(parts), 2)]
    steps, tagged = [], False
    for piece in pieces:
        plain = BLANK_TAG_RE.sub("", piece)
        tagged = tagged or plain != piece
        if plain.strip(" ,;"):
            steps.append(" ".join(plain.split()))
    hidden = [what for what, did in (("tags", tagged), ("copied question steps", len(pieces) > 1)) if did]
    return steps, f"{' and '.join(hidden)} hidden" if hidden else ""


def label_spans(text: str, labels: list[str]) -> list[tuple[int, int]]:
    """Where ``labels`` occur in ``text`` as whole words (any case), longest label first,
    without overlaps, in text order.

    >>> label_spans("iron supports red blood cell formation, red blood cells", ["red blood cells", "iron"])
    [(0, 4), (40, 55)]
    """
    taken: list[tuple[int, int]] = []
    for label in sorted(set(labels), key=lambda s: (-len(s), s)):
        for m in re.finditer(rf"(?<!\w){re.escape(label)}(?!\w)", text, re.IGNORECASE):
            if all(m.end() <= a or m.start() >= b for a, b in taken):
                taken.append(m.span())
    return sorted(taken)


def claims_summary(ep: Episode) -> str:
    """One line about what a TRACE claimed (on a card too small to quote it), from the claims
    the reward stored with it.

    >>> from library.contracts import ParsedCompletion
    >>> class E: parsed = ParsedCompletion(answer="A", trace_text="a b", trace_entities=[], path_entities=[],
    ...     valid_format=True, claims=[Claim(src="a", rel="r", dst="b", in_kg=True, on_gold_path=True),
    ...                                Claim(src="b", rel="r", dst="c", in_kg=False, on_gold_path=False)])
    >>> claims_summary(E)
    '2 claims, 1 on path, 1 not in graph'
    """
    if not ep.parsed.trace_text.strip():
        return "no TRACE"
    claims = ep.parsed.claims
    on = sum(c.on_gold_path for c in claims)
    false = sum(not c.in_kg for c in claims)
    out = f"{len(claims)} claim{'s' if len(claims) != 1 else ''}" + (f", {on} on path" if claims else "")
    return out + (f", {false} not in graph" if false else "")


def build_training_curves(data: RunData, params: dict, sel: Selection | None) -> dict:
    curves = data.metrics.get("curves") or {}
    specs = params.get("series") or [{"metric": "reward_total"}]
    order = [p for p in PHASES if p in curves] + sorted(p for p in curves if p not in PHASES)
    # x offsets: phases are laid end to end so one axis shows the whole training
    offsets, x = {}, 0.0
    for ph in order:
        offsets[ph] = x
        x += max((float(pt.get("step", 0)) for pt in curves[ph]), default=0.0)
    series, used = [], set()
    for spec in specs:
        spec = {"metric": spec} if isinstance(spec, str) else dict(spec)
        window = spec.get("smooth", 1)
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ShotError(f"training_curves: smooth must be a whole number of logged points >= 1, got {window!r}")
        pts: list[list[float]] = []
        if "episode_mean" in spec:  # per-step mean of a reward component over training rollouts
            ph = _phase_any(spec.get("phase", "grpo"), order)
            key = spec["episode_mean"]
            pts = moving_mean([[offsets.get(ph, 0.0) + pt["step"], pt.get(key, 0.0)]
                               for pt in rollout_curve(data.episodes, ph)], window)
            name = spec.get("name", f"mean {key} per step ({phase_label(ph)})")
            if pts:
                used.add(ph)
        else:
            metric = spec["metric"]
            for ph in spec.get("phases") or order:
                logged = [[offsets[ph] + float(pt.get("step", 0)), float(pt[metric])]
                          for pt in curves.get(ph, []) if metric in pt and pt[metric] is not None]
                # smoothed within a phase: a mean across a phase boundary would blend two runs
                pts += moving_mean(logged, window)
                if logged:
                    used.add(ph)
            name = spec.get("name", metric if window == 1 else f"{metric} (moving average)")
        if not pts:
            raise ShotError(f"training_curves: no points for series {spec} in metrics.curves (phases: {order})")
        series.append({"name": name, "points": pts})
    ys = [p[1] for s in series for p in s["points"]]
    lo, hi = min(ys + [0.0]), max(ys)
    if hi - lo < 1e-9:
        hi = lo + 1.0
    y_range = params.get("y_range") or [lo, hi]
    bounds = [{"x": offsets[ph], "label": phase_label(ph)} for ph in order if ph in used]
    return {"title": params.get("title", "Training curves"), "series": series, "phase_boundaries": bounds,
            "x_label": params.get("x_label", "training step"), "y_label": params.get("y_label", series[0]["name"]),
            "y_range": y_range}


def moving_mean(points: list[list[float]], window: int) -> list[list[float]]:
    """Each point's y replaced by the mean of the ``window`` logged points centred on it (fewer
    at the ends, so the first and last points stay near their own values); x is unchanged.
    Per-step training logs are noisy (one micro-batch a step), and on a phone a band of
    zigzags hides the trend that the mean shows.

    >>> moving_mean([[1, 4.0], [2, 0.0], [3, 2.0], [4, 6.0]], 3)
    [[1, 2.0], [2, 2.0], [3, 2.6666666666666665], [4, 4.0]]
    >>> moving_mean([[1, 4.0], [2, 0.0]], 1)
    [[1, 4.0], [2, 0.0]]
    """
    if window <= 1:
        return [list(p) for p in points]
    half = window // 2
    out = []
    for i, (x, _) in enumerate(points):
        ys = [y for _, y in points[max(0, i - half):i + window - half]]
        out.append([x, sum(ys) / len(ys)])
    return out


def _phase_any(name: str, order: list[str]) -> str:
    """A curve's phase: ``final``/``last`` is the last phase with a curve, any other name as given.

    >>> _phase_any("final", ["sft", "grpo"]), _phase_any("rsft", ["sft", "grpo"])
    ('grpo', 'rsft')
    """
    if name in ("final", "last") and order:
        return order[-1]
    return name


def build_distribution_trap(data: RunData, params: dict, sel: Selection | None) -> dict:
    dist = data.metrics.get("distribution")
    if not dist:
        raise ShotError("distribution_trap: metrics.json has no 'distribution' section in this run")
    labels = params.get("labels") or {}
    conds = params.get("conditions") or list(dist)
    bars = []
    for c in conds:
        if c not in dist:
            raise ShotError(f"distribution_trap: condition {c!r} not in metrics.distribution ({sorted(dist)})")
        d = dist[c]
        lo, hi = d.get("accuracy_ci", [d["accuracy"], d["accuracy"]])
        bars.append({"label": labels.get(c, c), "value": float(d["accuracy"]), "lo": float(lo), "hi": float(hi), "n": int(d["n"])})
    return {"title": params.get("title", "Train on easy or hard questions?"), "bars": bars,
            "y_label": params.get("y_label", "accuracy"), "note": params.get("note", "")}


def _cell_acc(block: dict | None) -> str:
    if not block:
        return "–"
    lo, hi = block.get("accuracy_ci", [None, None])
    acc = pct(block["accuracy"])
    return f"{acc} ({lo * 100:.0f}–{hi * 100:.0f}%)" if lo is not None else acc


def build_results_table(data: RunData, params: dict, sel: Selection | None) -> dict:
    split = params.get("split", "eval")
    block = data.metrics.get(split)
    if not block:
        raise ShotError(f"results_table: metrics.json has no {split!r} split")
    phases = [p for p in params.get("phases") or PHASES if p in block]
    hops = sorted({h for p in phases for h in block[p].get("by_hop", {})}, key=lambda h: int(h))
    shuffled = data.metrics.get("eval_shuffled", {}) if split == "eval" else {}
    # Right for the right reason (the TRACE states the gold path) where the metrics have it; runs
    # older than that count show path coverage instead (`kgr migrate` adds it from their episodes).
    grounded = all("grounded" in block[p] for p in phases)
    columns = ["Phase", "Accuracy (95% CI)"] + [f"{h}-hop" for h in hops] + ["Grounded" if grounded else "Path coverage"]
    if shuffled:
        columns.append("Shuffled")
    rows = []
    for p in phases:
        b = block[p]
        row = [phase_label(p), _cell_acc(b)]
        row += [pct(b["by_hop"][h]["accuracy"]) if h in b.get("by_hop", {}) else "–" for h in hops]
        if grounded:
            row.append(pct(b["grounded"]["accuracy"]))
        else:
            row.append(pct(b["path_coverage"]) if "path_coverage" in b else "–")
        if shuffled:
            row.append(pct(shuffled[p]["accuracy"]) if p in shuffled else "–")
        rows.append(row)
    ns = sorted({block[p]["n"] for p in phases})
    default_note = f"n = {'/'.join(str(n) for n in ns)} questions per phase; 95% Wilson intervals" + (
        "; grounded: right, with the whole gold path in the TRACE" if grounded else "")
    return {"title": params.get("title", f"Accuracy on {split}"), "columns": columns, "rows": rows,
            "highlight_row": len(rows) - 1, "note": params.get("note", default_note)}


BUILDERS = {
    "title": build_title,
    "kg_path": build_kg_path,
    "reward_bars": build_reward_bars,
    "before_after": build_before_after,
    "training_curves": build_training_curves,
    "distribution_trap": build_distribution_trap,
    "results_table": build_results_table,
}


# --------------------------------------------------------------------------- shots


@dataclass
class ResolvedShot:
    """A shot with everything resolved except its narration-timed duration."""

    index: int
    line: int
    scene: str
    payload: dict[str, Any]
    narration: str
    caption: str
    duration: float | None  # None: as long as the narration (+ crossfades and NARRATION_PAD_SECONDS)
    ex_id: str | None = None
    texts: list[str] = field(default_factory=list)  # every on-screen/spoken string (for audits)
    #: every episode the shot shows or quotes ({phase, ex_id, role}), for the render manifest
    episodes: list[dict[str, str]] = field(default_factory=list)
    selection: dict[str, Any] | None = None  # {query, fallback} of a query selection
    chapter: str | None = None  # the chapter this shot starts, for the upload text

    @property
    def spoken(self) -> str:
        """The narration as the voice reads it (scenes/spoken.py); the caption stays written."""
        return spoken(self.narration)

    def manifest_entry(self) -> dict[str, Any]:
        """This shot in ``renders/<name>.manifest.json``: enough to trace a frame to its log lines."""
        entry: dict[str, Any] = {"shot": self.index + 1, "line": self.line, "scene": self.scene,
                                 "episodes": self.episodes}
        if self.selection is not None:
            entry["selection"] = self.selection
        return entry

    def final_duration(self, narration_seconds: float | None, *, first: bool = False, last: bool = False) -> float:
        """The shot's length: a number as written, or, for ``duration: narration``, the speech
        framed so that no crossfade covers a word: the fade in (not before the first shot), the
        speech, a breath and the fade out (the last shot holds END_HOLD_SECONDS instead).

        >>> shot = ResolvedShot(0, 1, "title", {}, "Hello.", "", None)
        >>> shot.final_duration(4.0), shot.final_duration(4.0, first=True), shot.final_duration(4.0, last=True)
        (4.8, 4.5, 5.1)
        """
        if self.duration is not None:
            return self.duration
        assert narration_seconds is not None
        lead = 0.0 if first else XFADE_SECONDS
        tail = END_HOLD_SECONDS if last else XFADE_SECONDS
        return round(lead + narration_seconds + NARRATION_PAD_SECONDS + tail, 3)


def resolve_upload(sb: Storyboard, data: RunData) -> dict[str, str] | None:
    """The storyboard's upload texts (title, description, thumbnail headline) over the run's logs."""
    if sb.upload is None:
        return None
    ctx = data.template_context()
    return {key: render_text(getattr(sb.upload, key), ctx, where=f"upload.{key}", sb=sb, path=("upload", key)).strip()
            for key in ("title", "description", "headline")}


def resolve_shots(sb: Storyboard, data: RunData) -> list[ResolvedShot]:
    """Resolve every shot; any problem raises DataFileError at the line of the shot (or field)."""
    base_ctx = data.template_context()
    out = []
    for i, shot in enumerate(sb.shots):
        if not evaluate_when(shot, base_ctx, sb, i):
            continue
        try:
            params = dict(shot.params)
            sel = select_episode(data, params.pop("episode"), sb, i) if "episode" in params else None
            ctx = {**base_ctx, **(sel.context(data) if sel else {})}
            rendered = render_params(params, ctx, sb, i)
            payload = BUILDERS[shot.scene](data, rendered, sel)
            try:
                validate_payload(shot.scene, payload)
            except ValueError as exc:
                raise ShotError(str(exc), ("shots", i, "params")) from None
            narration = render_text(shot.narration, ctx, where=f"shots.{i}.narration", sb=sb, path=("shots", i, "narration"))
            caption = render_text(shot.caption, ctx, where=f"shots.{i}.caption", sb=sb, path=("shots", i, "caption"))
            chapter = (render_text(shot.chapter, ctx, where=f"shots.{i}.chapter", sb=sb, path=("shots", i, "chapter"))
                       if shot.chapter is not None else None)
        except ShotError as exc:
            raise sb.fail(exc.path or ("shots", i), f"shot {i + 1} ({shot.scene}): {exc}") from None
        except DataFileError as exc:
            if exc.path == sb.source:
                raise
            # a data file problem (missing questions, bad KG): say which shot needed it
            raise DataFileError(exc.path, f"{exc.message} (needed by {sb.source} shot {i + 1}, line {shot.line})", line=exc.line) from None
        texts = [narration, caption] + _strings(payload)
        out.append(ResolvedShot(i, shot.line, shot.scene, payload, narration, caption,
                                None if shot.duration == "narration" else float(shot.duration),
                                sel.ex_id if sel else None, texts, sel.episodes() if sel else [],
                                {"query": list(sel.query), "fallback": sel.fallback} if sel and sel.query else None,
                                chapter))
    return out


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, (list, tuple)):
        return [s for v in obj for s in _strings(v)]
    return []


__all__ = ["RunData", "Selection", "ResolvedShot", "QUERY_TERMS", "resolve_shots", "select_episode", "ci"]
