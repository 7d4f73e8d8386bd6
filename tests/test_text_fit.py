"""Text that fits: every scene type laid out with the longest labels of data/kg.json.

No video is rendered: each scene's ``beats()`` builds its mobjects (text is measured by pango)
and ``theme.record_fits`` keeps every fit_text decision. The audit then checks, at the
formats' full sizes (1080x1920 and 1920x1080), that no text was cut or ellipsised and that no
text ended up smaller than the floor (``Layout.min_size``: 36 px em in a Short) after any
scaling the scene applied afterwards.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("manim")

from scenes.payloads import validate_payload  # noqa: E402

pytestmark = pytest.mark.video

REPO = Path(__file__).resolve().parents[1]


def _kg_texts() -> tuple[list[str], list[str], dict]:
    kg = json.loads((REPO / "data" / "kg.json").read_text())
    labels = sorted((e["label"] for e in kg["entities"]), key=lambda s: (-len(s), s))
    rels = sorted((r["label"] for r in kg["relations"]), key=lambda s: (-len(s), s))
    questions = [json.loads(line) for line in (REPO / "data" / "eval.jsonl").read_text().splitlines() if line.strip()]
    longest_q = max(questions, key=lambda q: (len(q["question"]), q["id"]))
    return labels, rels, longest_q


def payloads() -> dict[str, dict]:
    labels, rels, q = _kg_texts()
    path = [f"P{i}" for i in range(6)]  # a 5-hop path of the six longest labels
    side = [f"N{i}" for i in range(6)]
    nodes = [{"id": pid, "label": labels[i], "type": "cause"} for i, pid in enumerate(path)]
    nodes += [{"id": nid, "label": labels[6 + i], "type": "fix"} for i, nid in enumerate(side)]
    edges = [{"src": a, "rel": "r", "rel_label": rels[i % len(rels)], "dst": b} for i, (a, b) in enumerate(zip(path, path[1:]))]
    edges += [{"src": path[i % len(path)], "rel": "r", "rel_label": rels[0], "dst": nid} for i, nid in enumerate(side)]
    options = {"A": labels[0], "B": labels[1], "C": labels[2], "D": labels[3]}
    long_trace = " ".join(f"{labels[i]} {rels[0]} {labels[i + 1]};" for i in range(8))
    return {
        "title": {"title": "Teaching a small model to think in hops, one verified edge at a time",
                  "subtitle": f"Base 0% → GRPO 41% on multi-hop questions about {labels[0]}",
                  "footer": "Every number on screen is read from run 20261122-reference-qwen2.5-0.5b"},
        "kg_path": {
            "question": q["question"], "phase_label": "GRPO", "nodes": nodes, "edges": edges, "path": path,
            "mentioned": [path[0], path[2], side[0]],
            "wrong_edges": [{"src": path[0], "rel_label": rels[0], "dst": path[3]}],
            "answer_label": labels[0], "predicted_label": labels[1], "correct": False,
        },
        "reward_bars": {
            "title": "How the graph scores one answer, term by term", "total": 1.25, "total_range": [-3, 3],
            "note": "each bar is scaled to the range that term took over the run's episodes",
            "components": [{"name": "correct answer", "value": 1, "lo": -2, "hi": 1},
                           {"name": "path reward", "value": 0.5, "lo": 0, "hi": 1.5},
                           {"name": "verified edges", "value": 0.25, "lo": -1, "hi": 0.5},
                           {"name": "spam penalty", "value": 0, "lo": 0, "hi": 0.5}],
        },
        "before_after": {
            "question": q["question"], "options": options, "answer_star": "A",
            "rows": [{"phase_label": ph, "trace": long_trace, "answer": f"{k}) {options[k]}", "correct": k == "A"}
                     for ph, k in (("Base", "D"), ("SFT", "C"), ("RSFT", "B"), ("GRPO", "A"))],
        },
        "training_curves": {
            "title": "Held-out accuracy and fact recall over training steps", "x_label": "training step (phases end to end)",
            "y_label": "mean reward of sampled answers", "y_range": [0, 1],
            "series": [{"name": "mean reward of sampled answers", "points": [[0, 0.1], [50, 0.4], [100, 0.6]]},
                       {"name": "held-out accuracy (eval split)", "points": [[0, 0.2], [100, 0.5]]}],
            "phase_boundaries": [{"x": 0, "label": "SFT"}, {"x": 50, "label": "RSFT"}, {"x": 75, "label": "GRPO"}],
        },
        "distribution_trap": {
            "title": "Train on easy questions or on hard ones?", "y_label": "held-out accuracy",
            "note": "95% Wilson intervals; n = held-out questions per condition",
            "bars": [{"label": "trained on easy (2-3 hop) questions", "value": 0.4, "lo": 0.35, "hi": 0.45, "n": 300},
                     {"label": "trained on hard (4-6 hop) questions", "value": 0.6, "lo": 0.5, "hi": 0.7, "n": 300}],
        },
        "results_table": {
            "title": "Held-out accuracy by phase",
            "columns": ["Phase", "Accuracy (95% CI)", "2-hop", "3-hop", "4-hop", "5-hop", "6-hop", "Path coverage", "Shuffled"],
            "rows": [[ph, "41% (35–46%)", "63%", "48%", "37%", "29%", "21%", "87%", "39%"] for ph in ("Base", "SFT", "RSFT", "GRPO")],
            "highlight_row": 3, "note": "n = 300 questions per phase; 95% Wilson intervals",
        },
        "monitor": {
            "title": "Watching for reward hacking", "x_label": "GRPO step",
            "y_label": "each signal as a multiple of its threshold", "y_range": [0, 2.4],
            "series": [{"name": name, "points": [[1, 0.2 * i], [6, 0.3 * i], [11, 1.2]]}
                       for i, name in enumerate(["repeated names", "options copied", "path names, wrong answer",
                                                 "rise in false edges", "trace length"])],
            "phase_boundaries": [{"x": 11, "label": "stopped at step 11"}],
            "hlines": [{"y": 1, "label": "threshold"}, {"y": 2, "label": "2 x threshold"}],
        },
        "intervals": {
            "title": "What each phase added", "y_label": "points gained, paired on the same questions (95% interval)",
            "note": "300 questions per phase. One run, one seed, a graph of 456 entities.",
            "bars": [{"label": lab, "value": v, "lo": v - 4, "hi": v + 4, "n": 300, "text": f"{v:+.1f}"}
                     for lab, v in (("Base → SFT", 78.7), ("SFT → RSFT", 5.0), ("RSFT → GRPO", 0.3),
                                    ("path reward over answer-only", -2.3))],
        },
        "phase_flow": {
            "title": "Base → SFT → RSFT → GRPO",
            "boxes": [{"label": "Base", "lines": ["no training"], "result": "0% right of 300"},
                      {"label": "SFT", "lines": ["2400 rows", "1200 steps"], "result": "79% right of 300"},
                      {"label": "RSFT", "lines": ["96 prompts, 384 samples", "93 answers kept", "24 steps"],
                       "result": "84% right of 300"},
                      {"label": "GRPO", "lines": ["120 prompts", "176 answers sampled", "11 steps, stopped by the monitor"],
                       "result": "84% right of 300"}],
            "arrows": [{"text": "+78.7 points (+74.0 to +83.3)", "measurable": True},
                       {"text": "+5.0 points (+2.0 to +8.0)", "measurable": True},
                       {"text": "+0.3 points: nothing measurable", "measurable": False}],
        },
        "question_build": {
            "title": "One right answer, nothing leaked", "question": q["question"],
            "hops": [{"src": labels[i], "rel": rels[i % len(rels)], "dst": labels[i + 1]} for i in range(5)],
            "options": [{"letter": k, "label": v, "source": src, "answer": k == "A"}
                        for (k, v), src in zip(options.items(), ["the walk's end", "another relation at one hop",
                                                                 "3 hops from the path", "stops a hop early"])],
            "checks": [{"label": "one option reachable: 300 of 300 eval questions", "ok": True}]
                      + [{"label": f"{a} path in {b}: 0", "ok": True}
                         for a, b in (("eval", "train"), ("eval", "hard"), ("hard", "eval"), ("eval", "dev"),
                                      ("dev", "eval"), ("hard", "dev"), ("shared question", "text"), ("hard eval", "same"))],
        },
        "kg_overview": {
            "title": "The knowledge graph", "counts": ["456 entities", "779 edges", "6 relations"],
            "note": "12 of its 456 entities, around one question's walk",
            "nodes": [{"id": n["id"], "label": n["label"], "type": n["type"], "x": (i % 4) / 3, "y": (i // 4) / 2,
                       "wave": 0 if n["id"] in path else 1} for i, n in enumerate(nodes)],
            "edges": [{"src": e["src"], "dst": e["dst"]} for e in edges], "walk": path,
        },
    }


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def layout_audit(scene_type: str, payload: dict, width: int, height: int, tmp: Path) -> tuple[list, object]:
    """Every fit_text decision of one scene laid out at ``width`` x ``height`` (no rendering)."""
    fits, L, _ = laid_out(scene_type, payload, width, height, tmp)
    return fits, L


#: Layouts already built in this process, by (scene type, payload, size): several tests audit the
#: same shot (the Short's before/after card over the quick run, the longest-labels card), and a
#: layout is deterministic, so each is built once (the tests only read what it returns).
_LAID_OUT: dict[tuple[str, str, int, int], tuple[list, object, list]] = {}


def laid_out(scene_type: str, payload: dict, width: int, height: int, tmp: Path) -> tuple[list, object, list]:
    """(fit_text decisions, layout, the mobjects the beats animate) of one scene laid out at
    ``width`` x ``height`` (no rendering)."""
    key = (scene_type, json.dumps(payload, sort_keys=True, default=str), width, height)
    if key not in _LAID_OUT:
        _LAID_OUT[key] = _lay_out(scene_type, payload, width, height, tmp)
    fits, L, mobs = _LAID_OUT[key]
    return list(fits), L, list(mobs)


def _lay_out(scene_type: str, payload: dict, width: int, height: int, tmp: Path) -> tuple[list, object, list]:
    from manim import config, tempconfig

    from scenes.registry import SCENE_TYPES
    from scenes.render_clip import FRAME_HEIGHT
    from scenes.theme import layout_for, record_fits

    model = validate_payload(scene_type, payload)
    with tempconfig({"pixel_width": width, "pixel_height": height, "frame_height": FRAME_HEIGHT,
                     "frame_width": FRAME_HEIGHT * width / height, "media_dir": str(tmp / "media"),
                     "text_dir": str(tmp / "texts"), "disable_caching": True, "verbosity": "WARNING"}):
        scene = SCENE_TYPES[scene_type][0](payload=model, duration=6.0)
        scene.L = layout_for(config.frame_width, config.frame_height)
        with record_fits() as fits:
            beats = scene.beats()
    # beats built lazily (a callable) animate mobjects that earlier beats already show
    mobs = [a.mobject for b in beats if not callable(b.anims) for a in b.anims]
    return list(fits), scene.L, mobs


def _drawn(f) -> bool:
    # candidates a scene built and discarded (e.g. a layout tried at two sizes) stay at the origin
    return abs(f.mob.get_center()[0]) > 1e-6 or abs(f.mob.get_center()[1]) > 1e-6


def problems(fits, L, pixel_height: int) -> list[str]:
    from scenes.theme import abbreviate, em_pixels

    out = []
    for f in fits:
        shown = " ".join(f.lines)
        if "…" in shown and "…" not in f.text:
            out.append(f"ellipsis: {shown!r}")
        if f.excerpt:
            if not re.search(r"\(\+\d+ more words?\)$", shown):
                out.append(f"unmarked excerpt: {shown!r}")
        elif _squash(shown) not in (_squash(f.text), _squash(abbreviate(f.text))):
            out.append(f"cut: {f.text!r} drawn as {shown!r}")
        (left, bottom, _), (right, top, _) = f.mob.get_corner([-1, -1, 0]), f.mob.get_corner([1, 1, 0])
        fr = L.frame
        if left < fr.left - 1e-3 or right > fr.right + 1e-3 or bottom < fr.bottom - 1e-3 or top > fr.top + 1e-3:
            out.append(f"off frame (cut by the edge): {f.text!r}")
        if L.portrait and bottom < L.captions.top - 1e-3 and f.mob.get_family() and _drawn(f):
            out.append(f"under the caption band: {f.text!r}")
        if f.effective_size < L.min_size - 1e-6:
            out.append(f"too small: {f.text!r} at font_size {f.effective_size:.1f} "
                       f"({em_pixels(f.effective_size, pixel_height):.0f} px) < {L.min_size:.1f}")
    return out


@pytest.mark.parametrize("scene_type", sorted(payloads()))
@pytest.mark.parametrize("size", [(1080, 1920), (1920, 1080)], ids=["short", "explainer"])
def test_every_scene_fits_the_longest_labels_uncut_and_legible(scene_type, size, tmp_path):
    w, h = size
    fits, L = layout_audit(scene_type, payloads()[scene_type], w, h, tmp_path)
    assert fits, "the scene drew no text through fit_text"
    assert problems(fits, L, h) == []
    if h > w:  # the Short: body text at least 36 px em at 1080x1920
        from scenes.theme import em_pixels

        assert min(em_pixels(f.effective_size, h) for f in fits) >= 36 - 1e-6
    # the longest KG label is on screen whole in the scenes that show entities
    if scene_type in ("kg_path", "before_after"):
        longest = _kg_texts()[0][0]
        assert any(_squash(longest) in _squash(" ".join(f.lines)) for f in fits)


def test_fit_text_shrinks_then_wraps_then_abbreviates_never_cuts(tmp_path):
    from manim import tempconfig

    from scenes.theme import fit_text, record_fits, wrap_lines

    assert wrap_lines("restart process holding deleted files", 12) == ["restart", "process", "holding", "deleted", "files"]
    with tempconfig({"pixel_width": 1080, "pixel_height": 1920, "frame_height": 8.0, "frame_width": 4.5,
                     "text_dir": str(tmp_path / "texts"), "verbosity": "WARNING"}):
        with record_fits() as fits:
            fit_text("restart process holding deleted files", 16, 10.0, 1)  # fits as asked
            fit_text("restart process holding deleted files", 16, 2.0, 1)  # smaller, then more lines
            fit_text("Accuracy", 20, 0.5, 1)  # a known short form, then (if still too wide) the floor
    big, wrapped, short = fits
    assert big.size == 16 and len(big.lines) == 1
    assert wrapped.size < 16 and wrapped.size >= wrapped.floor and len(wrapped.lines) > 1
    assert _squash(" ".join(wrapped.lines)) == _squash("restart process holding deleted files")
    assert short.abbreviated and short.lines == ["Acc."]


def test_the_audit_catches_cut_small_and_off_frame_text(tmp_path):
    from manim import tempconfig

    from scenes.theme import TextFit, fit_text, layout_for, record_fits

    with tempconfig({"pixel_width": 1080, "pixel_height": 1920, "frame_height": 8.0, "frame_width": 4.5,
                     "text_dir": str(tmp_path / "texts"), "verbosity": "WARNING"}):
        L = layout_for(4.5, 8.0)
        with record_fits() as fits:
            fit_text("renew the certificate", 14, 4.0, 1).scale(0.5)  # a scene scaling text afterwards
            fit_text("renew the certificate", 14, 4.0, 1).shift([3, 0, 0])  # pushed past the frame edge
        cut = TextFit("renew the certificate", ["renew the…"], 14, L.min_size, 4.0, False, False,
                      fits[0].mob.copy(), fits[0].mob.height)
        found = problems([*fits, cut], L, 1920)
    assert any(x.startswith("too small") for x in found)
    assert any(x.startswith("off frame") for x in found)
    assert any(x.startswith("ellipsis") for x in found) and any(x.startswith("cut") for x in found)


def _short_over_the_committed_run():
    from scenes.resolve import RunData, resolve_shots
    from scenes.storyboard import load_storyboard

    sb = load_storyboard(REPO / "storyboards" / "short.yaml")
    data = RunData.load(REPO / "data" / "runs" / "quick", kg_default=REPO / sb.kg, questions_default=REPO / sb.questions)
    # data/runs/quick did not run the easy-vs-hard experiment; a synthetic block (test data,
    # never shown as a result) lays out the Short's conditional trap shot as well
    assert "distribution" not in data.metrics
    data.metrics["distribution"] = {
        "easy": {"n": 200, "correct": 61, "accuracy": 0.305, "accuracy_ci": [0.246, 0.371], "train_split": "train"},
        "hard": {"n": 200, "correct": 74, "accuracy": 0.37, "accuracy_ci": [0.306, 0.439], "train_split": "train_hard"},
    }
    return resolve_shots(sb, data)


def test_every_shot_of_the_short_uses_the_portrait_frame_down_to_the_caption_band(tmp_path):
    from scenes.assemble import caption_block_top
    from scenes.theme import em_pixels

    shots = _short_over_the_committed_run()
    assert {s.scene for s in shots} <= set(payloads())
    for shot in shots:
        fits, L, mobs = laid_out(shot.scene, shot.payload, 1080, 1920, tmp_path)
        assert problems(fits, L, 1920) == [], shot.scene
        assert min(em_pixels(f.effective_size, 1920) for f in fits) >= 36 - 1e-6
        lowest = min(m.get_bottom()[1] for m in mobs)
        captions_top = L.frame.bottom + L.frame.height * caption_block_top(True)  # a two-line page's top
        # nothing in the band the captions are burned into, and no empty band above it: the
        # lowest content ends at most 0.7 units (168 px of 1920) above the caption text
        assert L.captions.top < L.content.bottom - 1e-6 <= lowest, shot.scene
        assert lowest - captions_top <= 0.7, (shot.scene, round(lowest - captions_top, 2))


@pytest.mark.parametrize("run", ["reference", "food"])
def test_every_shot_of_the_explainer_is_legible_uncut_and_in_frame(run, tmp_path):
    """The explainer's shots over a committed run (the reference run's graph is functional, so its
    branching shot reads data/runs/food; the food run's is its own), laid out at 1920x1080."""
    from scenes.resolve import RunData, resolve_shots
    from scenes.storyboard import load_storyboard

    sb = load_storyboard(REPO / "storyboards" / "explainer.yaml")
    data = RunData.load(REPO / "data" / "runs" / run, kg_default=REPO / sb.kg, questions_default=REPO / sb.questions)
    shots = resolve_shots(sb, data)
    assert {"kg_overview", "question_build", "phase_flow", "monitor", "intervals"} <= {s.scene for s in shots}
    assert sum(s.scene == "title" for s in shots) == 2  # chapter titles only, 3 s each
    assert all(s.duration == 3 for s in shots if s.scene == "title")
    for shot in shots:
        fits, L, _ = laid_out(shot.scene, shot.payload, 1920, 1080, tmp_path)
        assert problems(fits, L, 1080) == [], (shot.index + 1, shot.scene)


def test_the_shorts_kg_path_fills_the_width_with_large_nodes(tmp_path):
    from scenes.resolve import RunData, resolve_shots
    from scenes.storyboard import load_storyboard
    from scenes.theme import em_pixels

    # the Short's own run (the storyboards' default, data/runs/reference) and its hero
    sb = load_storyboard(REPO / "storyboards" / "short.yaml")
    data = RunData.load(REPO / sb.run, kg_default=REPO / sb.kg, questions_default=REPO / sb.questions)
    (shot,) = [s for s in resolve_shots(sb, data) if s.scene == "kg_path"]
    fits, L, mobs = laid_out("kg_path", shot.payload, 1080, 1920, tmp_path)
    labels = {n["label"] for n in shot.payload["nodes"]}
    relations = {e["rel_label"] for e in shot.payload["edges"]}
    nodes = [f for f in fits if _drawn(f) and f.text in labels]
    pills = [f for f in fits if _drawn(f) and f.text in relations]
    assert len(nodes) >= len(shot.payload["path"]) and pills
    sizes = {round(f.effective_size, 3) for f in nodes}
    assert len(sizes) == 1, "every node label at one size"
    # as large as the frame allows: the hero's 5-hop path at >= 48 px (it was 36 px, shrunk to
    # fit above a caption band a third of the frame tall), relation labels never larger
    assert em_pixels(min(sizes), 1920) >= 48
    assert max(f.effective_size for f in pills) <= min(sizes) + 1e-6
    # the node boxes (label_box: VGroup(box, label)) span the content width
    label_mobs = {id(f.mob) for f in nodes}
    boxes = [sub[0] for m in mobs for sub in m.submobjects
             if len(sub.submobjects) == 2 and id(sub.submobjects[1]) in label_mobs]
    assert len(boxes) == len(nodes)
    assert max(b.get_right()[0] for b in boxes) - min(b.get_left()[0] for b in boxes) >= 0.95 * L.content.width


def _before_after_of_the_short(run: str):
    from scenes.resolve import RunData, resolve_shots
    from scenes.storyboard import load_storyboard

    sb = load_storyboard(REPO / "storyboards" / "short.yaml")
    data = RunData.load(REPO / "data" / "runs" / run, kg_default=REPO / sb.kg, questions_default=REPO / sb.questions)
    (shot,) = [s for s in resolve_shots(sb, data) if s.scene == "before_after"]
    return data, shot


def _is_subsequence(needle: list[str], hay: list[str]) -> bool:
    it = iter(hay)
    return all(w in it for w in needle)


@pytest.mark.parametrize("run", ["reference", "quick", "food"])
def test_the_shorts_before_after_shows_the_final_phases_whole_trace(run, tmp_path):
    """The reasoning on screen, whole: on each committed run the final phase's card shows
    every word of its TRACE but the blank tags and the copied question steps (the card says
    it hides them), in order, with every entity and relation of every claim the reward stored;
    nothing on the shot is an excerpt ("(+N more words)"). It quoted 47 of 63 words on the
    reference run and ended "(+22 more words)" on the food run's set-valued TRACE. The earlier
    cards keep their verdict on one line."""
    data, shot = _before_after_of_the_short(run)
    fits, L, _ = laid_out("before_after", shot.payload, 1080, 1920, tmp_path)
    assert problems(fits, L, 1920) == []
    drawn = [f for f in fits if _drawn(f)]
    assert not any(f.excerpt for f in fits)
    shown_text = " ".join(" ".join(f.lines) for f in drawn)
    assert "more word" not in shown_text and "…" not in shown_text
    final = shot.payload["rows"][-1]
    steps = final["steps"]
    assert steps, "the final phase's TRACE has no steps to show"
    shown = shown_text.split()
    assert _is_subsequence(" ".join(s["text"] for s in steps).split(), shown)
    # the words hidden are only tags and copied steps: the TRACE's other words are all there
    trace_words = [w for w in final["trace"].split() if not re.fullmatch(r"\[(?:[A-Z]|\?)\][,;:.]?", w)]
    assert len([w for w in trace_words if w.strip(",;:.") in {x.strip(",;:.") for x in shown}]) >= 0.8 * len(trace_words)
    if final["note"]:  # what the card hides, it says
        assert final["note"] in " ".join(shown)
    # every entity and relation the reward read in it (its stored claims) is on the card
    ep = data.eval_episode(shot.ex_id, data.phases[-1])
    assert ep is not None and ep.parsed.trace_text == final["trace"]
    lowered = " ".join(shown_text.lower().split())
    for c in ep.parsed.claims:
        for words in (data.kg.label(c.src), data.kg.relation_label(c.rel), data.kg.label(c.dst)):
            assert words.lower() in lowered, (run, c, words)
    verdicts = [f for f in drawn if "RIGHT" in f.text or "WRONG" in f.text]
    assert all(len(f.lines) == 1 for f in verdicts[:-1])


def test_a_set_valued_trace_keeps_every_word_but_tags_and_copied_steps():
    """The food run's set-valued TRACE (every successor where a hop branches): the card's steps
    are its fact clauses, word for word, with only the tags and the copied steps left out."""
    from library.scoring.answer_format import trace_steps

    trace = ("tapioca flour is made from [J] cassava [J], which is a source of [U]: cassava is a source of [U] "
             "carbohydrate and vitamin C [U], which aids absorption of [V]: vitamin C aids absorption of [V] iron [V], "
             "which supports [N]: iron supports [N] oxygen transport and red blood cell formation [N], which involves "
             "[?]: oxygen transport involves [?] red blood cells, red blood cell formation involves [?] bone marrow; "
             "so bone marrow (C).")
    steps, hidden = trace_steps(trace)
    assert steps == ["tapioca flour is made from cassava,", "cassava is a source of carbohydrate and vitamin C,",
                     "vitamin C aids absorption of iron,", "iron supports oxygen transport and red blood cell formation,",
                     "oxygen transport involves red blood cells, red blood cell formation involves bone marrow; "
                     "so bone marrow (C)."]
    assert hidden == ["tags", "copied question steps"]
    # keyed order (the reference run): "; [K] <rel> [T]:" is the copied step
    keyed = ("failing disk leads to [G] read-only file system [G]; [G] leads to [Q]: read-only file system leads to [Q] "
             "database write failure [Q]; [Q] is diagnosed by [?]: database write failure is diagnosed by [?] check logs (C).")
    assert trace_steps(keyed)[0] == ["failing disk leads to read-only file system;",
                                     "read-only file system leads to database write failure;",
                                     "database write failure is diagnosed by check logs (C)."]
    # a comma inside a clause's set of entities is the model's, not a copied step
    assert trace_steps("a has [J] b, c [J], which is [U]: b is [U] d")[0] == ["a has b, c,", "b is d"]


def test_a_trace_longer_than_its_card_is_paged_whole_not_cut(tmp_path):
    """A TRACE too long for the last card at the floor size (the longest KG labels, 88 words)
    is shown in timed pages marked "1/2", "2/2": every word on one page or the next, in order."""
    payload = payloads()["before_after"]
    fits, L, _ = laid_out("before_after", payload, 1080, 1920, tmp_path)
    assert problems(fits, L, 1920) == [] and not any(f.excerpt for f in fits)
    drawn = [" ".join(f.lines) for f in fits if _drawn(f)]
    marks = [t for t in drawn if re.fullmatch(r"\d+/\d+", t)]
    assert len(marks) >= 2 and marks[0] == f"1/{len(marks)}"
    assert _is_subsequence(payload["rows"][-1]["trace"].split(), " ".join(drawn).split())
