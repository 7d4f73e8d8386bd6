"""Manim scene renders at tiny sizes: every scene type, both orientations, exact durations,
clear payload errors, atomic output. Full-size looks are checked by eye (see the report)."""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("manim")
av = pytest.importorskip("av")

from scenes.payloads import PAYLOAD_MODELS, validate_payload  # noqa: E402
from scenes.render_clip import frame_count, probe_frames, render_clip  # noqa: E402

pytestmark = pytest.mark.video

KG = {
    "question": "My TLS handshake fails. What fixes the cause that the clock offset check diagnoses?",
    "phase_label": "GRPO",
    "nodes": [
        {"id": "TLS", "label": "TLS handshake error", "type": "symptom"},
        {"id": "Skew", "label": "clock skew", "type": "cause"},
        {"id": "NTP", "label": "sync clocks with NTP", "type": "fix"},
        {"id": "Cert", "label": "expired certificate", "type": "cause"},
        {"id": "Renew", "label": "renew the certificate", "type": "fix"},
    ],
    "edges": [
        {"src": "TLS", "rel": "caused_by", "rel_label": "is caused by", "dst": "Skew"},
        {"src": "Skew", "rel": "fixed_by", "rel_label": "is fixed by", "dst": "NTP"},
        {"src": "TLS", "rel": "caused_by", "rel_label": "is caused by", "dst": "Cert"},
        {"src": "Cert", "rel": "fixed_by", "rel_label": "is fixed by", "dst": "Renew"},
    ],
    "path": ["TLS", "Skew", "NTP"],
    "mentioned": ["TLS", "Cert"],
    "wrong_edges": [{"src": "Cert", "rel_label": "is fixed by", "dst": "NTP"}],
    "answer_label": "sync clocks with NTP",
    "predicted_label": "renew the certificate",
    "correct": False,
}

PAYLOADS = {
    "title": {"title": "Teaching a small model to hop", "subtitle": "KG as reward", "footer": "seed 7"},
    "kg_path": KG,
    "reward_bars": {
        "title": "Reward", "total": 1.25, "total_range": [-1, 2],
        "components": [{"name": "correct", "value": 1, "lo": 0, "hi": 1},
                       {"name": "path", "value": 0.5, "lo": 0, "hi": 1},
                       {"name": "penalty", "value": -0.25, "lo": -1, "hi": 0}],
    },
    "before_after": {
        "question": "Which tool checks the fix?", "options": {"A": "openssl", "B": "chronyc"},
        "answer_star": "B",
        "rows": [{"phase_label": "base", "trace": "certificate is bad", "answer": "A", "correct": False},
                 {"phase_label": "GRPO", "trace": "skew leads to [G] NTP [G], which uses [?]: NTP uses [?] chronyc",
                  "answer": "B", "correct": True, "note": "tags and copied question steps hidden",
                  "steps": [{"text": "skew leads to NTP", "path": [[0, 4], [14, 17]]},
                            {"text": "NTP uses chronyc", "path": [[0, 3]]}]}],
    },
    "training_curves": {
        "title": "Accuracy", "x_label": "step", "y_label": "acc", "y_range": [0, 1],
        "series": [{"name": "eval", "points": [[0, 0.1], [50, 0.4], [100, 0.6]]}],
        "phase_boundaries": [{"x": 50, "label": "GRPO"}],
    },
    "distribution_trap": {
        "title": "Trap", "y_label": "accuracy",
        "bars": [{"label": "easy", "value": 0.4, "lo": 0.35, "hi": 0.45, "n": 100},
                 {"label": "hard", "value": 0.6, "lo": 0.5, "hi": 0.7, "n": 100}],
    },
    "results_table": {
        "title": "Results", "columns": ["phase", "acc"], "rows": [["base", "0.2"], ["GRPO", "0.6"]],
        "highlight_row": 1, "note": "n = 100",
    },
    "monitor": {
        "title": "Monitor", "x_label": "GRPO step", "y_label": "x threshold", "y_range": [0, 2.4],
        "series": [{"name": "options copied", "points": [[1, 0.2], [2, 1.3]]},
                   {"name": "false edges", "points": [[1, 0.1], [2, 0.4]]}],
        "phase_boundaries": [{"x": 2, "label": "stopped at step 2"}],
        "hlines": [{"y": 1, "label": "threshold"}, {"y": 2, "label": "2 x threshold"}],
    },
    "intervals": {
        "title": "What each phase added", "y_label": "points",
        "bars": [{"label": "SFT → RSFT", "value": 5.0, "lo": 2.0, "hi": 8.0, "n": 300, "text": "+5.0"},
                 {"label": "RSFT → GRPO", "value": -0.3, "lo": -2.0, "hi": 1.0, "n": 300, "text": "-0.3"}],
    },
    "phase_flow": {
        "title": "Base → SFT → GRPO",
        "boxes": [{"label": "Base", "lines": ["no training"], "result": "0% right of 300"},
                  {"label": "SFT", "lines": ["992 rows", "496 steps"], "result": "79% right of 300"},
                  {"label": "GRPO", "lines": ["11 steps"], "result": "84% right of 300"}],
        "arrows": [{"text": "+78.7 points", "measurable": True}, {"text": "+0.3: nothing measurable"}],
    },
    "question_build": {
        "title": "One right answer", "question": KG["question"],
        "hops": [{"src": "TLS handshake error", "rel": "is caused by", "dst": "clock skew"},
                 {"src": "clock skew", "rel": "is fixed by", "dst": "sync clocks with NTP"}],
        "options": [{"letter": "A", "label": "sync clocks with NTP", "source": "the walk's end", "answer": True},
                    {"letter": "B", "label": "renew the certificate", "source": "a neighbour of the path"}],
        "checks": [{"label": "one option reachable: 300 of 300", "ok": True}, {"label": "eval path in train: 0", "ok": True}],
    },
    "kg_overview": {
        "title": "The graph", "counts": ["5 entities", "4 edges"],
        "nodes": [{"id": n["id"], "label": n["label"], "type": n["type"], "x": i / 4, "y": (i % 2) * 1.0,
                   "wave": 0 if n["id"] in KG["path"] else 1} for i, n in enumerate(KG["nodes"])],
        "edges": [{"src": e["src"], "dst": e["dst"]} for e in KG["edges"]], "walk": KG["path"],
    },
}


def middle_frame_std(path: Path) -> float:
    """Pixel standard deviation of the middle frame (0 for a blank clip)."""
    with av.open(str(path)) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    return float(np.std(frames[len(frames) // 2]))


def test_payload_models_cover_registry():
    from scenes.registry import SCENE_TYPES, payload_model

    assert set(SCENE_TYPES) == set(PAYLOAD_MODELS) == set(PAYLOADS)
    for name, (_, model) in SCENE_TYPES.items():
        assert payload_model(name) is model
    with pytest.raises(ValueError, match="unknown scene type"):
        payload_model("bogus")


@pytest.mark.parametrize("scene_type", sorted(PAYLOADS))
@pytest.mark.parametrize("size", [(144, 256), (256, 144)], ids=["portrait", "landscape"])
def test_scene_renders_exact_clip(scene_type, size, tmp_path):
    w, h = size
    out = tmp_path / f"{scene_type}.mp4"
    got = render_clip(scene_type, PAYLOADS[scene_type], out, width=w, height=h, fps=5, duration=2.0,
                      work_dir=tmp_path / "work")
    assert got == out and out.is_file()
    assert probe_frames(out) == (w, h, frame_count(2.0, 5))
    assert middle_frame_std(out) > 8.0, "middle frame looks blank"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, "work"])
    assert list((tmp_path / "work").iterdir()) == [], "private manim folder not cleaned up"


def test_duration_matches_ffprobe_and_short_clip_collapses_beats(tmp_path):
    # 0.6 s at 5 fps = 3 frames for a scene with ~8 beats: beats that get no frame are
    # applied instantly, and the frame count is still exact.
    out = render_clip("kg_path", KG, tmp_path / "k.mp4", width=144, height=256, fps=5, duration=0.6)
    assert probe_frames(out)[2] == 3
    dur = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", str(out)],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert abs(float(dur) - 0.6) <= 1 / 5 + 1e-6


@pytest.mark.parametrize(
    "scene_type, mutate, message",
    [
        ("kg_path", lambda p: p["path"].append("Nowhere"), "unknown node id 'Nowhere'"),
        ("kg_path", lambda p: p.update(path=["TLS", "NTP"]), "has no edge"),
        ("kg_path", lambda p: p.update(extra_field=1), "extra_field"),
        ("kg_path", lambda p: p.update(branch_edges=[{"src": "Cert", "rel": "fixed_by", "rel_label": "is fixed by",
                                                      "dst": "Nowhere"}]), "unknown node id 'Nowhere'"),
        ("kg_path", lambda p: p.update(branch_edges=[{"src": "TLS", "rel": "caused_by", "rel_label": "is caused by",
                                                      "dst": "Skew"}]), "is a hop of the gold path"),
        ("reward_bars", lambda p: p["components"][0].update(value=3), "outside its range"),
        ("results_table", lambda p: p["rows"][0].append("x"), "row 0 has 3 cells"),
        ("results_table", lambda p: p.update(highlight_row=5), "highlight_row 5 is out of range"),
        ("before_after", lambda p: p.update(answer_star="Z"), "answer_star 'Z'"),
        ("before_after", lambda p: p["rows"][1]["steps"].append({"text": "so openssl"}), "with parts left out"),
        ("before_after", lambda p: p["rows"][1]["steps"][0].update(path=[[14, 40]]), "ordered span"),
        ("training_curves", lambda p: p.update(y_range=[1, 0]), "lo < hi"),
        ("distribution_trap", lambda p: p["bars"][0].update(lo=0.9), "reversed"),
    ],
)
def test_invalid_payload_is_a_clear_error_and_writes_nothing(scene_type, mutate, message, tmp_path):
    bad = copy.deepcopy(PAYLOADS[scene_type])
    mutate(bad)
    with pytest.raises(ValueError, match=message) as err:
        render_clip(scene_type, bad, tmp_path / "x.mp4", width=144, height=256, fps=5, duration=1)
    assert scene_type in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_bad_size_and_unknown_type_rejected(tmp_path):
    with pytest.raises(ValueError, match="even integer"):
        render_clip("title", PAYLOADS["title"], tmp_path / "x.mp4", width=145, height=256, fps=5, duration=1)
    with pytest.raises(ValueError, match="unknown scene type"):
        render_clip("nope", {}, tmp_path / "x.mp4", width=144, height=256, fps=5, duration=1)
    assert list(tmp_path.iterdir()) == []


def test_failure_mid_render_leaves_no_file(tmp_path, monkeypatch):
    from scenes.title_card import TitleCardScene

    def boom(self):
        raise RuntimeError("boom mid-render")

    monkeypatch.setattr(TitleCardScene, "beats", boom)
    out = tmp_path / "t.mp4"
    with pytest.raises(RuntimeError, match="boom"):
        render_clip("title", PAYLOADS["title"], out, width=144, height=256, fps=5, duration=1,
                    work_dir=tmp_path / "work")
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["work"]
    assert list((tmp_path / "work").iterdir()) == []


def test_existing_output_replaced_atomically(tmp_path):
    out = tmp_path / "t.mp4"
    out.write_bytes(b"old")
    inode_dir_before = sorted(os.listdir(tmp_path))
    render_clip("title", PAYLOADS["title"], out, width=144, height=256, fps=5, duration=1)
    assert out.read_bytes()[:3] != b"old"
    assert sorted(os.listdir(tmp_path)) == inode_dir_before  # no temp names left behind


def test_validate_payload_is_manim_free():
    # The storyboard compiler validates payloads in the parent process without manim.
    code = ("import sys; import scenes.payloads as p; p.validate_payload('title', {'title': 'x'}); "
            "assert 'manim' not in sys.modules and 'torch' not in sys.modules")
    subprocess.run([os.sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])
    assert validate_payload("title", {"title": "x"}).title == "x"


# --------------------------------------------------------------------------- branches (kg_path)

REPO = Path(__file__).resolve().parents[1]
FOOD = REPO / "data" / "food"


def _reference_run(root: Path, ex_ids: list[str]):
    """A run on the branching food graph whose GRPO eval answers are the questions' reference
    completions, scored by the reward: their claims stored with them, as every writer stores
    them. (Test data: the honest TRACE states every branch the procedure carries.)"""
    from library.contracts import Question
    from library.graph.kg import KnowledgeGraph
    from library.questions.wording import reference_completion
    from library.runs.folder import RunDir
    from library.scoring.reward import RewardModel
    from scenes.resolve import RunData

    kg = KnowledgeGraph.load(FOOD / "kg.json")
    questions = {q.id: q for q in (Question.model_validate_json(line)
                                   for line in (FOOD / "eval.jsonl").read_text().splitlines() if line.strip())}
    reward = RewardModel.from_preset(kg, "paper+edges")
    run = RunDir.create(root, run_id="branching", exist_ok=True)
    run.write_meta({"run_id": "branching", "config": {"kg_path": str(FOOD / "kg.json"), "data_dir": str(FOOD)}})
    episodes = []
    for ex_id in ex_ids:
        q = questions[ex_id]
        completion = reference_completion(q)
        scored = reward.score(q, completion)
        episodes.append({"phase": "grpo", "step": 0, "ex_id": q.id, "split": "eval", "prompt": q.prompt,
                         "completion": completion, "parsed": scored.parsed.model_dump(),
                         "reward": scored.reward.model_dump(), "kind": "eval", "hop_len": q.hop_len,
                         "answer_star": q.answer_star, "correct": scored.correct, "grounded": scored.grounded})
    run.append_episodes(episodes)
    run.write_metrics({"eval": {"grpo": {"n": len(episodes)}}})
    return RunData.load(run.path)


def _kg_path_payload(data, ex_id: str, params: dict | None = None) -> dict:
    from scenes.builders import build_kg_path
    from scenes.query import Selection

    q, ep = data.questions()[ex_id], data.eval_episode(ex_id, data.phases[-1])
    return build_kg_path(data, params or {}, Selection(ex_id, ep.phase, ep, q))


def test_kg_path_payload_carries_the_branches_a_branching_trace_stated(tmp_path):
    from library.graph.oracle import question_walk, walk_edges
    from scenes.builders import build_kg_path
    from scenes.query import Selection

    # pastilla -> Morocco -> wheat, which is a source of carbohydrate AND dietary fibre AND
    # protein: the TRACE carries the two extra branches to the end, where the graph prunes them
    data = _reference_run(tmp_path, ["eval-0051"])
    q, ep = data.questions()["eval-0051"], data.eval_episode("eval-0051", "grpo")
    gold = {(e.src, e.rel, e.dst) for e in q.path_star.edges}
    branches = [t for t in walk_edges(question_walk(data.kg, q)) if t not in gold]
    assert len(branches) == 6
    model = validate_payload("kg_path", _kg_path_payload(data, "eval-0051"))
    assert [(b.src, b.rel, b.dst) for b in model.branch_edges] == branches  # in TRACE order
    assert all(b.rel_label == data.kg.relation_label(b.rel) for b in model.branch_edges)
    assert {x for s, _, d in branches for x in (s, d)} <= {n.id for n in model.nodes}
    assert model.branches_not_shown == 0
    # the node cap keeps the path and counts the branch entities it leaves out
    capped = validate_payload("kg_path", _kg_path_payload(data, "eval-0051", {"max_nodes": 8}))
    assert capped.path == model.path and capped.branches_not_shown == 4
    kept = {n.id for n in capped.nodes}
    assert capped.branch_edges and all(b.src in kept and b.dst in kept for b in capped.branch_edges)
    # read from the claims the reward stored, never from the completion: without them, none
    bare = ep.model_copy(update={"parsed": ep.parsed.model_copy(
        update={"claims": [c for c in ep.parsed.claims if c.on_gold_path]})})
    assert build_kg_path(data, {}, Selection(q.id, "grpo", bare, q))["branch_edges"] == []


def test_kg_path_payload_of_a_functional_graph_episode_has_no_branches():
    from scenes.resolve import RunData

    # data/runs/quick ran on the functional data/kg.json: its TRACEs claim true edges off the gold
    # path, but the procedure never carries a branch there
    data = RunData.load(REPO / "data" / "runs" / "quick")
    episodes = data.eval_episodes(data.phases[-1])
    assert any(c.in_kg and not c.on_gold_path for ep in episodes.values() for c in ep.parsed.claims)
    for ex_id in episodes:
        payload = _kg_path_payload(data, ex_id)
        assert payload["branch_edges"] == [] and payload["branches_not_shown"] == 0, ex_id


@pytest.mark.parametrize("size", [(1080, 1920), (1920, 1080)], ids=["short", "explainer"])
def test_kg_path_draws_the_branches_it_has_room_for_and_counts_the_rest(size, tmp_path):
    from test_text_fit import _drawn, laid_out, problems

    # buffalo wings: seven branch entities, one of them past the resolver's node cap
    data = _reference_run(tmp_path / "run", ["eval-0111"])
    payload = _kg_path_payload(data, "eval-0111")
    assert payload["branches_not_shown"] == 1
    w, h = size
    fits, L, _ = laid_out("kg_path", payload, w, h, tmp_path)
    assert problems(fits, L, h) == []
    labels = {n["id"]: n["label"] for n in payload["nodes"]}
    branch_ids = {x for e in payload["branch_edges"] for x in (e["src"], e["dst"])} - set(payload["path"])
    drawn = [f for f in fits if _drawn(f)]
    shown = {x for x in branch_ids if any(f.text == labels[x] for f in drawn)}
    assert len(shown) >= 2, "the branches are not on screen"
    hidden = len(branch_ids - shown) + payload["branches_not_shown"]
    on_screen = " ".join(" ".join(f.lines) for f in drawn)
    assert "branch carried, pruned by the graph" in on_screen
    assert f"{hidden} more not drawn" in on_screen  # never dropped silently
    # the gold path stays the hero: its labels at least as large as every branch label
    spine = [f.effective_size for f in drawn if f.text in {labels[x] for x in payload["path"]}]
    chips = [f.effective_size for f in drawn if f.text in {labels[x] for x in shown}]
    assert len(spine) == len(payload["path"]) and min(spine) >= max(chips) - 1e-6


def test_kg_path_with_branches_renders_exact_clip(tmp_path):
    data = _reference_run(tmp_path / "run", ["eval-0051"])
    payload = _kg_path_payload(data, "eval-0051")
    for w, h in ((144, 256), (256, 144)):
        out = render_clip("kg_path", payload, tmp_path / f"k{w}.mp4", width=w, height=h, fps=5, duration=2.0)
        assert probe_frames(out) == (w, h, frame_count(2.0, 5))
        assert middle_frame_std(out) > 8.0

