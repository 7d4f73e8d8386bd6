"""Payload builders: one function per scene type, from a run's logs (and the episode a shot
selected) to the scene's payload (``scenes/payloads.py``): only resolved strings and numbers.

Every value comes from what the run logged: metrics.json, and per episode what scoring stored
with it (the verdicts, the claims, the entity spans and the TRACE's steps); no builder reads a
completion again. Imports neither torch nor manim.
"""

from __future__ import annotations

from library.config import MonitorSettings
from library.contracts import PHASES, Episode
from library.demo.site import monitor_points
from library.questions.leakage import FAR_CHECKS
from library.runs.reader import rollout_curve
from scenes.query import Selection, ShotError, branch_claims, phase_named
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

    >>> from library.contracts import Claim, ParsedCompletion
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
    # each series as (phase, points at the phase's own steps, counted from 1), then laid end to end
    raw = []
    for spec in specs:
        spec = {"metric": spec} if isinstance(spec, str) else dict(spec)
        window = spec.get("smooth", 1)
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ShotError(f"training_curves: smooth must be a whole number of logged points >= 1, got {window!r}")
        if "episode_mean" in spec:  # per-step mean of a reward component over training rollouts
            ph = _phase_any(spec.get("phase", "grpo"), order)
            key = spec["episode_mean"]
            parts = [(ph, moving_mean([[pt["step"], pt.get(key, 0.0)] for pt in rollout_curve(data.episodes, ph)],
                                      window))]
            name = spec.get("name", f"mean {key} per step ({phase_label(ph)})")
        else:
            metric = spec["metric"]
            # smoothed within a phase: a mean across a phase boundary would blend two runs
            parts = [(ph, moving_mean([[float(pt.get("step", 0)), float(pt[metric])] for pt in curves.get(ph, [])
                                       if metric in pt and pt[metric] is not None], window))
                     for ph in spec.get("phases") or order]
            name = spec.get("name", metric if window == 1 else f"{metric} (moving average)")
        parts = [(ph, pts) for ph, pts in parts if pts]
        if not parts:
            raise ShotError(f"training_curves: no points for series {spec} in metrics.curves (phases: {order})")
        raw.append((name, parts))
    used = {ph for _, parts in raw for ph, _ in parts}
    phases_used = [ph for ph in order if ph in used] + sorted(used - set(order))
    offsets, x = {}, 0.0
    for ph in phases_used:
        offsets[ph] = x
        x += max((float(pt.get("step", 0)) for pt in curves.get(ph, [])), default=0.0)
    series = [{"name": name, "points": [[offsets[ph] + px, py] for ph, pts in parts for px, py in pts]}
              for name, parts in raw]
    ys = [p[1] for s in series for p in s["points"]]
    lo, hi = min(ys + [0.0]), max(ys)
    if hi - lo < 1e-9:
        hi = lo + 1.0
    y_range = params.get("y_range") or [lo, hi]
    # one phase: its steps from 1, no boundary to draw; several: each starts at a dashed line
    bounds = [{"x": offsets[ph], "label": phase_label(ph)} for ph in phases_used] if len(phases_used) > 1 else []
    x_label = (f"{phase_label(phases_used[0])} step" if len(phases_used) == 1
               else "training step (" + ", then ".join(phase_label(ph) for ph in phases_used) + ")")
    return {"title": params.get("title", "Training curves"), "series": series, "phase_boundaries": bounds,
            "x_label": params.get("x_label", x_label), "y_label": params.get("y_label", series[0]["name"]),
            "y_range": y_range}


#: what the monitor's signals are called on screen (library/evaluation/monitor.py JUDGED_SIGNALS)
SIGNAL_NAMES = {
    "spam_rate": "repeated names",
    "option_listing_rate": "options copied",
    "coverage_without_correctness_rate": "path names, wrong answer",
    "false_edge_rise": "rise in false edges",
    "trace_chars_z": "trace length",
    "kl": "drift (KL)",
}


def build_monitor(data: RunData, params: dict, sel: Selection | None) -> dict:
    """The reward-hacking monitor of one RL phase (metrics.json ``monitor``): each signal per
    step as a multiple of its threshold (library/demo/site.py ``monitor_points``, as the demo
    page draws it), the threshold at 1, and the step where it stopped the phase."""
    phase = str(params.get("phase", "grpo"))
    block = (data.metrics.get("monitor") or {}).get(phase)
    if not block:
        raise ShotError(f"monitor: metrics.json has no monitor block for {phase!r} in run {data.run_id}")
    points = [pt for pt in monitor_points(data.metrics, data.meta) if pt["phase"] == phase]
    signals = [k for k in SIGNAL_NAMES if (k != "kl" or params.get("kl") is True)
               and any(k in pt["ratios"] for pt in points)]
    series = [{"name": SIGNAL_NAMES[k], "points": [[float(pt["step"]), float(pt["ratios"][k])]
                                                   for pt in points if k in pt["ratios"]]} for k in signals]
    if not series:
        raise ShotError(f"monitor: no signal was judged in the {phase} monitor of run {data.run_id}")
    settings_far = MonitorSettings.model_validate(data.config.get("monitor") or {}).far_over_factor
    ys = [p[1] for s in series for p in s["points"]]
    top, low = max(ys + [settings_far * 1.2]), min(ys + [0.0])  # a fall (false edges) goes below 0
    marks = []
    if block.get("status") == "stop" and block.get("stop_step") is not None:
        marks.append({"x": float(block["stop_step"]), "label": f"stopped at step {block['stop_step']}"})
    return {"title": params.get("title", f"The monitor during {phase_label(phase)}"), "series": series[:6],
            "phase_boundaries": marks, "x_label": params.get("x_label", f"{phase_label(phase)} step"),
            "y_label": params.get("y_label", "each signal as a multiple of its threshold"),
            "y_range": [low, top],
            "hlines": [{"y": 1.0, "label": "threshold"}, {"y": settings_far, "label": f"{settings_far:g} x threshold"}],
            "marks": [{"x": float(pt["step"]), "kind": pt["status"]} for pt in points if pt["status"] in ("warning", "stop")]}


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


def build_intervals(data: RunData, params: dict, sel: Selection | None) -> dict:
    """Bars with 95% intervals from the run's logs. ``source: phases``: each phase's accuracy on
    the eval questions (Wilson interval, its n); ``source: steps``: what each phase added over
    the one before, paired on the questions both answered (RunData.steps), and, with
    ``ablation: true`` where the run measured it, GRPO with a correctness-only reward against
    the path reward from the same start (metrics.ablation.vs_grpo); ``source: selection``: RSFT
    data chosen by right answers alone against the path reward, per seed and pooled
    (metrics.selection, research/selection.py)."""
    source = params.get("source", "phases")
    wanted = [phase_named(data, p, "intervals.phases") for p in params.get("phases") or data.phases]
    bars = []
    if source == "phases":
        block = data.metrics.get("eval") or {}
        for ph in [p for p in data.phases if p in block and p in wanted]:
            b = block[ph]
            lo, hi = b.get("accuracy_ci", [b["accuracy"], b["accuracy"]])
            bars.append({"label": phase_label(ph), "value": 100 * float(b["accuracy"]), "lo": 100 * float(lo),
                         "hi": 100 * float(hi), "n": int(b["n"]), "text": pct(b["accuracy"])})
        y_label = "% right on held-out questions (95% interval)"
    elif source == "steps":
        after = params.get("after")
        if after is not None:
            after = phase_named(data, after, "intervals.after")
            if after not in data.phases:
                raise ShotError(f"intervals: after {after!r} is not a phase of run {data.run_id} ({data.phases})")
        # `after: sft` leaves out the steps before it (base -> SFT dwarfs the rest on one scale)
        start = data.phases.index(after) if after is not None else 0
        for st in [st for st in data.steps() if st["phase"] in wanted and data.phases.index(st["before"]) >= start]:
            bars.append(_diff_bar(f"{phase_label(st['before'])} → {phase_label(st['phase'])}", st))
        ablation = (data.metrics.get("ablation") or {}).get("vs_grpo")
        if params.get("ablation") and ablation:
            bars.append(_diff_bar("path reward over answer-only", ablation, flip=True))
        y_label = "points gained, paired on the same questions (95% interval)"
    elif source == "selection":
        sel_block = data.metrics.get("selection") or {}
        # logged as right-answers-only minus the path reward: drawn the other way round, what the
        # graph's reward added (negative: it cost)
        for seed, cmp in (sel_block.get("vs_reward_by_seed") or {}).items():
            bars.append(_diff_bar(f"seed {seed}", {**cmp, "n": sel_block.get("n", 0)}, flip=True))
        if sel_block.get("over_seeds"):
            pooled = sel_block["over_seeds"]
            bars.append(_diff_bar(f"{pooled.get('n_seeds', len(bars))} seeds pooled", pooled, flip=True))
        y_label = "path reward minus right answers only, points (95% interval)"
    else:
        raise ShotError(f"intervals: unknown source {source!r}; use phases, steps or selection")
    if not bars:
        raise ShotError(f"intervals: run {data.run_id} logged nothing for source {source!r}")
    return {"title": params.get("title", "Accuracy by phase"), "bars": bars[:8],
            "y_label": params.get("y_label", y_label), "note": params.get("note", "")}


def _diff_bar(label: str, cmp: dict, flip: bool = False) -> dict:
    """A paired difference (b - a: ``diff``, ``ci`` as fractions) as a bar in points; ``flip``
    shows a - b (the ablation logs the answer-only arm as b)."""
    sign = -1.0 if flip else 1.0
    d = sign * 100 * float(cmp["diff"])
    lo, hi = sorted(sign * 100 * float(c) for c in cmp["ci"])
    return {"label": label, "value": d, "lo": lo, "hi": hi, "n": int(cmp["n"]), "text": f"{d:+.1f}"}


def phase_lines(data: RunData, phase: str) -> list[str]:
    """What a phase trained on, a short line each, from metrics.json ``training``.

    >>> class D: metrics = {"training": {"rsft": {"n_prompts": 96, "n_samples": 384, "n_winners": 93, "steps": 24}}}
    >>> phase_lines(D, "rsft"), phase_lines(D, "base")
    (['96 prompts, 384 samples', '93 answers kept', '24 steps'], ['no training'])
    """
    t = (data.metrics.get("training") or {}).get(phase)
    if phase == "base" or not t:
        return ["no training"] if phase == "base" else []
    out = []
    if "n_examples" in t:
        out.append(f"{t['n_examples']} rows")
    if "n_prompts" in t:
        out.append(f"{t['n_prompts']} prompts" + (f", {t['n_samples']} samples" if "n_samples" in t else ""))
    if "n_winners" in t:
        out.append(f"{t['n_winners']} answers kept")
    if "n_episodes" in t:
        out.append(f"{t['n_episodes']} answers sampled")
    if "steps" in t:
        stop = t.get("stopped_by_monitor") or {}
        out.append(f"{t['steps']} steps" + (", stopped by the monitor" if stop.get("step") else ""))
    return out[:4]


def build_phase_flow(data: RunData, params: dict, sel: Selection | None) -> dict:
    """The run's phases as a flow: what each trained on, its eval accuracy, and what it changed
    over the one before on the same questions (RunData.steps)."""
    block = data.metrics.get("eval") or {}
    phases = [p for p in data.phases if p in block] or list(data.phases)
    boxes = []
    for ph in phases:
        b = block.get(ph)
        result = f"{pct(b['accuracy'])} right of {b['n']}" if b else ""
        boxes.append({"label": phase_label(ph), "lines": phase_lines(data, ph), "result": result})
    steps = {(st["before"], st["phase"]): st for st in data.steps()}
    arrows = []
    for a, b in zip(phases, phases[1:]):
        st = steps.get((a, b))
        if st is None:
            arrows.append({"text": "not compared", "measurable": False})
        else:
            # the questions it is paired on, where fewer than the phase answered (quick asks base 30)
            on = f" on {st['n']}" if block.get(b) and st["n"] != block[b]["n"] else ""
            lo, hi = st["ci"]
            text = (f"{st['diff'] * 100:+.1f} points{on} ({lo * 100:+.1f} to {hi * 100:+.1f})" if st["measurable"]
                    else f"{st['diff'] * 100:+.1f} points{on}: nothing measurable")
            arrows.append({"text": text, "measurable": bool(st["measurable"]), "diff": float(st["diff"])})
    return {"title": params.get("title", " → ".join(phase_label(p) for p in phases)), "boxes": boxes,
            "arrows": arrows, "note": params.get("note", "")}


#: where a distractor came from (library/questions/distractors.py DISTRACTOR_SOURCES), in words
SOURCE_WORDS = {
    "wrong_relation": "another relation at one hop",
    "sibling": "another target of one hop's relation",
    "stop_early": "an entity on the path",
    "overshoot": "one hop past the answer",
    "neighbour": "a neighbour of the path",
}


def source_words(source: str) -> str:
    """A distractor's source as the screen says it.

    >>> source_words("nearby_2"), source_words("stop_early")
    ('2 hops from the path', 'an entity on the path')
    """
    if source.startswith("nearby_") and source.rsplit("_", 1)[1].isdigit():
        return f"{source.rsplit('_', 1)[1]} hops from the path"
    return SOURCE_WORDS.get(source, source.replace("_", " "))


def build_question_build(data: RunData, params: dict, sel: Selection | None) -> dict:
    """How the selected question was made (its walk, its options and where each came from) and
    the checks its data passed (``kgr data``'s stats.json: unique answers and leakage)."""
    if sel is None:
        raise ShotError("question_build needs params.episode")
    q, kg = sel.question, data.kg
    hops = [{"src": kg.label(e.src), "rel": kg.relation_label(e.rel), "dst": kg.label(e.dst)} for e in q.path_star.edges]
    sources = {d["id"]: d["source"] for d in (q.meta or {}).get("distractors", []) if isinstance(d, dict)}
    ids = (q.meta or {}).get("option_ids") or {}
    options = []
    for letter, label in q.options.items():
        is_answer = letter == q.answer_star
        src = "the walk's end" if is_answer else source_words(sources.get(ids.get(letter, ""), "")) or "distractor"
        options.append({"letter": letter, "label": label, "source": src, "answer": is_answer})
    checks = []
    stats = data.data_stats or {}
    split = sel.question.split or "eval"
    unique = (stats.get("unique_verified") or {}).get(split)
    if unique:
        checks.append({"label": f"one option reachable: {unique[0]} of {unique[1]} {split} questions",
                       "ok": unique[0] == unique[1]})
    leakage = stats.get("leakage") or {}
    far = {name: n for name, n in leakage.items() if name in FAR_CHECKS}  # the far splits' checks, as one line
    for name, overlaps in leakage.items():
        if name not in far:
            checks.append({"label": f"{name.replace('_', ' ')}: {overlaps}", "ok": overlaps == 0})
    if far:
        length = ((stats.get("far") or {}).get("hops") or ["far"])[0]
        checks.append({"label": f"{length}-hop splits apart: {sum(far.values())}", "ok": not any(far.values())})
    return {"title": params.get("title", "How a question is made"), "question": q.question, "hops": hops,
            "options": options, "checks": checks[:12]}


MAX_OVERVIEW_NODES = 48


def build_kg_overview(data: RunData, params: dict, sel: Selection | None) -> dict:
    """A sample of the run's graph: the selected question's walk and the entities around it
    (undirected waves, up to ``max_nodes``), laid out by networkx's spring layout with a fixed
    seed (the same picture every render), with the graph's counts."""
    import networkx as nx

    kg = data.kg
    walk = list(sel.question.path_star.entities) if sel is not None else []
    cap = int(params.get("max_nodes", MAX_OVERVIEW_NODES))
    seeds = walk or sorted(kg.entities, key=lambda e: (-len(kg.neighbours(e)), e))[:1]
    order = kg.neighborhood(seeds, radius=3, limit=max(cap, len(walk)))
    # a node's wave: its undirected distance from the walk
    wave = nx.multi_source_dijkstra_path_length(kg.graph.to_undirected(as_view=True), set(seeds), cutoff=3)
    keep = set(order)
    edges = sorted({(e.src, e.dst) for e in kg.edges if e.src in keep and e.dst in keep and e.src != e.dst})
    g = nx.Graph()
    g.add_nodes_from(order)
    g.add_edges_from(edges)
    pos = nx.spring_layout(g, seed=0, iterations=100)
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]

    def unit(v: float, lo: float, hi: float) -> float:
        return 0.5 if hi - lo < 1e-9 else round((v - lo) / (hi - lo), 4)

    nodes = [{"id": e, "label": kg.label(e), "type": kg.type_of(e), "x": unit(pos[e][0], min(xs), max(xs)),
              "y": unit(pos[e][1], min(ys), max(ys)), "wave": wave[e]} for e in order]
    counts = [f"{len(kg.entities)} entities", f"{len(kg.edges)} edges", f"{len(kg.relations)} relations"]
    return {"title": params.get("title", "The knowledge graph"), "nodes": nodes,
            "edges": [{"src": a, "dst": b} for a, b in edges], "walk": walk, "counts": counts,
            "note": params.get("note", f"{len(order)} of its {len(kg.entities)} entities, around one question's walk")}


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
    "monitor": build_monitor,
    "intervals": build_intervals,
    "phase_flow": build_phase_flow,
    "question_build": build_question_build,
    "kg_overview": build_kg_overview,
}
