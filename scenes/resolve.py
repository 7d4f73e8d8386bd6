"""Resolution: turn each storyboard shot plus a run's logs and the KG into a scene payload.

A payload (``scenes/payloads.py``) holds only resolved strings and numbers. Building it here,
from ``metrics.json``, ``episodes.jsonl``, the eval questions and ``kg.json`` through the
storyboard's templates, is what makes "every number on screen comes from the logs" hold: the
scenes never read a file. A clip's cache key is the hash of its payload, so a clip is
re-rendered exactly when the data it shows changes.

Imports neither torch nor manim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from library.contracts import PHASES, Episode, Question
from library.errors import DataFileError
from library.jsonl import iter_jsonl
from library.kg import DEFAULT_KG_PATH, KnowledgeGraph
from library.reward import stored_claims
from library.runs import RunDir
from scenes.payloads import validate_payload
from scenes.storyboard import (
    NARRATION_PAD_SECONDS,
    Storyboard,
    ci,
    evaluate_when,
    pct,
    phase_label,
    render_params,
    render_text,
)

DEFAULT_QUESTIONS = Path("data/eval.jsonl")
#: Per-run overrides: a run folder may carry the exact questions / KG it was evaluated on
#: (the test fixture does); they win over the storyboard's defaults because they are the
#: data that run's episodes refer to.
RUN_QUESTIONS = "eval_questions.jsonl"
RUN_KG = "kg.json"
MAX_KG_NODES = 12

REWARD_NAMES = {
    "correctness": "correct answer",
    "path_reward": "path reward",
    "path_coverage": "path coverage",
    "edge_reward": "verified edges",
    "spam_penalty": "spam penalty",
}


# --------------------------------------------------------------------------- run data


@dataclass
class RunData:
    """Everything a storyboard may read from one run, loaded once."""

    path: Path
    run_id: str
    meta: dict[str, Any]
    metrics: dict[str, Any]
    episodes: list[Episode]
    questions_path: Path
    kg_path: Path
    _questions: dict[str, Question] | None = None
    _kg: KnowledgeGraph | None = None

    @classmethod
    def load(cls, run: str | Path, *, kg: str | Path | None = None, questions: str | Path | None = None,
             kg_default: str | Path | None = None, questions_default: str | Path | None = None) -> "RunData":
        """``kg``/``questions``: explicit overrides (CLI flags) that win over everything; then
        the run folder's own copies; then ``*_default`` (the storyboard's fields); then data/."""
        rd = RunDir.open(run)
        meta = rd.read_meta() if (rd.path / "meta.json").exists() else {}
        metrics = rd.read_metrics()
        if not metrics:
            raise DataFileError(rd.path / "metrics.json", "run has no metrics.json (has its evaluation finished?)")
        def pick(explicit, own: Path, default, fallback: Path) -> Path:
            if explicit is not None:
                return Path(explicit)
            return own if own.exists() else Path(default or fallback)

        qpath = pick(questions, rd.path / RUN_QUESTIONS, questions_default, DEFAULT_QUESTIONS)
        kpath = pick(kg, rd.path / RUN_KG, kg_default, DEFAULT_KG_PATH)
        return cls(path=rd.path, run_id=str(meta.get("run_id") or rd.run_id), meta=meta, metrics=metrics,
                   episodes=rd.read_episodes(), questions_path=qpath, kg_path=kpath)

    @property
    def questions(self) -> dict[str, Question]:
        # loaded lazily: a storyboard of title cards and tables needs no question file
        if self._questions is None:
            self._questions = {q.id: q for _, q in iter_jsonl(self.questions_path, Question)}
        return self._questions

    @property
    def kg(self) -> KnowledgeGraph:
        if self._kg is None:
            self._kg = KnowledgeGraph.load(self.kg_path)
        return self._kg

    @property
    def phases(self) -> list[str]:
        """Phases evaluated on the eval split, in training order."""
        done = self.metrics.get("eval", {})
        return [p for p in PHASES if p in done]

    def template_context(self) -> dict[str, Any]:
        phases = self.phases
        return {"metrics": self.metrics, "meta": self.meta, "run_id": self.run_id, "phases": phases,
                "final": phases[-1] if phases else None, "first": phases[0] if phases else None,
                "kg": _KGStats(self)}


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


# --------------------------------------------------------------------------- episode selection


@dataclass
class Selection:
    """An eval question chosen for a shot, and the phase whose answer the shot shows."""

    ex_id: str
    phase: str
    episode: Episode
    question: Question
    from_phase: str | None = None
    to_phase: str | None = None
    before: Episode | None = None  # improved/regressed: the `from` phase's answer

    def context(self) -> dict[str, Any]:
        q = self.question
        return {
            "episode": _episode_context(self.episode, q),
            "before": _episode_context(self.before, q) if self.before is not None else None,
            "question": {**q.model_dump(mode="json"), "answer_label": q.options[q.answer_star]},
            "selection": {"from": self.from_phase, "to": self.to_phase, "phase": self.phase},
        }


def _episode_context(ep: Episode, q: Question) -> dict[str, Any]:
    answer = ep.parsed.answer
    return {**ep.model_dump(mode="json"), "answer": answer, "correct": ep.correct,
            "predicted_label": q.options.get(answer, "") if answer else "",
            "trace": ep.parsed.trace_text, "phase_label": phase_label(ep.phase)}


class ShotError(Exception):
    """Raised inside resolution; turned into a DataFileError at the shot's line."""

    def __init__(self, message: str, path: tuple = ()):
        super().__init__(message)
        self.path = path


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
    cands = [e for e in data.episodes if e.ex_id == ex_id and e.phase == phase and e.split == split]
    if not cands:
        return None
    # several samples of one question (RSFT/GRPO groups): the first one logged, stably
    return min(cands, key=lambda e: (e.step, e.sample_idx or 0))


def select_episode(data: RunData, spec: Any, sb: Storyboard, shot_index: int) -> Selection:
    """Resolve ``params.episode``: an alias from ``episodes:``, ``{id: ...}`` or ``{query: ...}``."""
    path = ("shots", shot_index, "params", "episode")
    if isinstance(spec, str):
        if spec not in sb.episodes:
            raise ShotError(f"unknown episode alias {spec!r} (define it under episodes:)", path)
        spec, path = sb.episodes[spec], ("episodes", spec)
    if not isinstance(spec, dict):
        raise ShotError("episode must be an alias name, {id: ...} or {query: ...}", path)
    known = {"id", "phase", "split", "query", "from", "to", "prefer", "index"}
    extra = sorted(set(spec) - known)
    if extra:
        raise ShotError(f"unknown episode keys {extra}; known: {sorted(known)}", path)
    split = spec.get("split", "eval")
    try:
        if "id" in spec:
            ex_id = str(spec["id"])
            phase = _phase(data, spec.get("phase", "final"), "episode")
            ep = _eval_episode(data, ex_id, phase, split)
            if ep is None:
                raise ShotError(f"no {split} episode {ex_id!r} in phase {phase!r} of run {data.run_id}", path)
            return Selection(ex_id, phase, ep, _question(data, ex_id, path))
        query = spec.get("query")
        if query in ("improved", "regressed"):
            src = _phase(data, spec.get("from", "first"), "episode.from")
            dst = _phase(data, spec.get("to", "final"), "episode.to")
            want = (False, True) if query == "improved" else (True, False)
            cands = []
            for ep in data.episodes:
                if ep.phase != dst or ep.split != split:
                    continue
                before = _eval_episode(data, ep.ex_id, src, split)
                q = data.questions.get(ep.ex_id)
                if before is None or q is None or ep is not _eval_episode(data, ep.ex_id, dst, split):
                    continue
                if (before.correct, ep.correct) == want:
                    cands.append((ep, q))
            prefer = spec.get("prefer", "longest_hop")
            orders = {"longest_hop": lambda c: (-c[1].hop_len, c[1].id), "shortest_hop": lambda c: (c[1].hop_len, c[1].id),
                      "id": lambda c: c[1].id}
            if prefer not in orders:
                raise ShotError(f"unknown prefer {prefer!r}; known: {sorted(orders)}", path)
            cands.sort(key=orders[prefer])
            pick = _nth(cands, spec, f"no {split} question was {'wrong' if query == 'improved' else 'right'} in "
                                     f"{src} and {'right' if query == 'improved' else 'wrong'} in {dst}", path)
            shown = _phase(data, spec.get("phase", dst), "episode.phase")
            ep = _eval_episode(data, pick[1].id, shown, split)
            if ep is None:
                raise ShotError(f"question {pick[1].id} has no episode in phase {shown!r}", path)
            return Selection(pick[1].id, shown, ep, pick[1], src, dst, _eval_episode(data, pick[1].id, src, split))
        if query in ("best", "worst"):
            phase = _phase(data, spec.get("phase", "final"), "episode.phase")
            eps = [e for e in data.episodes if e.phase == phase and e.split == split and e.ex_id in data.questions]
            sign = -1 if query == "best" else 1
            eps.sort(key=lambda e: (sign * e.reward.total, e.ex_id, e.step))
            ep = _nth(eps, spec, f"no {split} episodes in phase {phase!r}", path)
            return Selection(ep.ex_id, phase, ep, data.questions[ep.ex_id])
        raise ShotError(f"unknown episode query {query!r}; use id, or query: improved, regressed, best, worst", path)
    except DataFileError:
        raise
    except ShotError as exc:
        if not exc.path:
            exc.path = path
        raise


def _nth(items: list, spec: dict, empty: str, path: tuple):
    index = int(spec.get("index", 0))
    if index >= len(items):
        raise ShotError(empty if not items else f"only {len(items)} candidates, index {index} asked", path)
    return items[index]


def _question(data: RunData, ex_id: str, path: tuple) -> Question:
    q = data.questions.get(ex_id)
    if q is None:
        raise ShotError(f"question {ex_id!r} not found in {data.questions_path}", path)
    return q


# --------------------------------------------------------------------------- payload builders


def _p(params: dict, key: str, default: Any = None) -> Any:
    return params.get(key, default)


def build_title(data: RunData, params: dict, sel: Selection | None) -> dict:
    return {"title": params.get("title", ""), "subtitle": params.get("subtitle", ""), "footer": params.get("footer", "")}


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
    # the claims the reward judged when it scored this episode (read once for older logs)
    wrong = [(c.src, c.rel, c.dst) for c in stored_claims(ep.parsed, kg, q.path_star.edges) if not c.in_kg]
    nodes: list[str] = list(path)
    for extra in mentioned + [x for s, _, d in wrong for x in (s, d)]:
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
    reward = sel.episode.reward.model_dump()
    keys = params.get("components") or [k for k in ("correctness", "path_reward", "edge_reward", "spam_penalty") if k in reward]
    names = {**REWARD_NAMES, **(params.get("names") or {})}
    comps = []
    for k in keys:
        if k not in reward or not isinstance(reward[k], (int, float)):
            raise ShotError(f"reward component {k!r} is not logged for this episode (logged: {sorted(reward)})")
        lo, hi = _reward_range(data, k)
        comps.append({"name": names.get(k, k), "value": float(reward[k]), "lo": lo, "hi": hi})
    lo, hi = _reward_range(data, "total")
    return {"title": params.get("title", f"Reward of the {phase_label(sel.phase)} answer"), "components": comps,
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
        a = ep.parsed.answer
        rows.append({"phase_label": phase_label(ph), "trace": ep.parsed.trace_text,
                     "answer": f"{a}) {q.options[a]}" if a in q.options else None, "correct": ep.correct})
    return {"question": params.get("question") or q.question, "options": dict(q.options), "answer_star": q.answer_star, "rows": rows}


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
        pts: list[list[float]] = []
        if "episode_mean" in spec:  # per-step mean of a reward component over training rollouts
            ph = _phase_any(spec.get("phase", "grpo"), order)
            key = spec["episode_mean"]
            by_step: dict[int, list[float]] = {}
            for e in data.episodes:
                if e.phase == ph and e.kind == "rollout":
                    by_step.setdefault(e.step, []).append(float(e.reward.model_dump().get(key, 0.0)))
            pts = [[offsets.get(ph, 0.0) + s, sum(v) / len(v)] for s, v in sorted(by_step.items())]
            name = spec.get("name", f"mean {key} per step ({phase_label(ph)})")
            if pts:
                used.add(ph)
        else:
            metric = spec["metric"]
            for ph in spec.get("phases") or order:
                for pt in curves.get(ph, []):
                    if metric in pt and pt[metric] is not None:
                        pts.append([offsets[ph] + float(pt.get("step", 0)), float(pt[metric])])
                        used.add(ph)
            name = spec.get("name", metric)
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
    columns = ["Phase", "Accuracy (95% CI)"] + [f"{h}-hop" for h in hops] + ["Path coverage"]
    if shuffled:
        columns.append("Shuffled")
    rows = []
    for p in phases:
        b = block[p]
        row = [phase_label(p), _cell_acc(b)]
        row += [pct(b["by_hop"][h]["accuracy"]) if h in b.get("by_hop", {}) else "–" for h in hops]
        row.append(pct(b["path_coverage"]) if "path_coverage" in b else "–")
        if shuffled:
            row.append(pct(shuffled[p]["accuracy"]) if p in shuffled else "–")
        rows.append(row)
    ns = sorted({block[p]["n"] for p in phases})
    default_note = f"n = {'/'.join(str(n) for n in ns)} questions per phase; 95% Wilson intervals"
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
    duration: float | None  # None: as long as the narration (+ NARRATION_PAD_SECONDS)
    ex_id: str | None = None
    texts: list[str] = field(default_factory=list)  # every on-screen/spoken string (for audits)

    def final_duration(self, narration_seconds: float | None) -> float:
        if self.duration is not None:
            return self.duration
        assert narration_seconds is not None
        return round(narration_seconds + NARRATION_PAD_SECONDS, 3)


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
            ctx = {**base_ctx, **(sel.context() if sel else {})}
            rendered = render_params(params, ctx, sb, i)
            payload = BUILDERS[shot.scene](data, rendered, sel)
            try:
                validate_payload(shot.scene, payload)
            except ValueError as exc:
                raise ShotError(str(exc), ("shots", i, "params")) from None
            narration = render_text(shot.narration, ctx, where=f"shots.{i}.narration", sb=sb, path=("shots", i, "narration"))
            caption = render_text(shot.caption, ctx, where=f"shots.{i}.caption", sb=sb, path=("shots", i, "caption"))
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
                                sel.ex_id if sel else None, texts))
    return out


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, (list, tuple)):
        return [s for v in obj for s in _strings(v)]
    return []


__all__ = ["RunData", "Selection", "ResolvedShot", "resolve_shots", "select_episode", "ci"]
