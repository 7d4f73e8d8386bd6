"""Payload builders: one function per scene type, from a run's logs (and the episode a shot
selected) to the scene's payload (``scenes/payloads.py``): only resolved strings and numbers.

Every value comes from what the run logged: metrics.json, and per episode what scoring stored
with it (the verdicts, the claims, the entity spans and the TRACE's steps); no builder reads a
completion again. Imports neither torch nor manim.
"""

from __future__ import annotations

from typing import Any

from library.contracts import PHASES, Claim, Episode, Question
from library.graph.oracle import question_walk, walk_edges
from library.runs.reader import rollout_curve
from scenes.query import Selection, ShotError, phase_named
from scenes.run_data import RunData
from scenes.storyboard import pct, phase_label

MAX_KG_NODES = 12

REWARD_NAMES = {
    "correctness": "correct answer",
    "path_reward": "path reward",
    "path_coverage": "path coverage",
    "edge_reward": "verified edges",
    "spam_penalty": "spam penalty",
}


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
    claims = ep.parsed.claims
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
    phases = [phase_named(data, p, "before_after.phases") for p in params.get("phases") or data.phases[-4:]]
    rows = []
    for ph in phases:
        ep = data.eval_episode(sel.ex_id, ph)
        if ep is None:
            raise ShotError(f"question {sel.ex_id} has no episode in phase {ph!r}")
        sel.shown.append(("row", ep))
        a = ep.parsed.answer
        # the TRACE's steps and the entities each names, as scoring stored them; the gold path's
        # entities are those of the claims it judged on the gold path
        gold = {x for c in ep.parsed.claims if c.on_gold_path for x in (c.src, c.dst)}
        steps = [{"text": st.text, "path": [(start, end) for start, end, ent in st.spans if ent in gold]}
                 for st in ep.parsed.steps or ()]
        hidden = ep.parsed.steps_hidden
        rows.append({"phase_label": phase_label(ph), "trace": ep.parsed.trace_text,
                     "answer": f"{a}) {q.options[a]}" if a in q.options else None, "correct": ep.correct,
                     "steps": steps, "note": f"{' and '.join(hidden)} hidden" if hidden else "",
                     "summary": claims_summary(ep)})
    return {"question": params.get("question") or q.question, "options": dict(q.options), "answer_star": q.answer_star, "rows": rows}


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
