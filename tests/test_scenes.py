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
                 {"phase_label": "GRPO", "trace": "skew -> NTP -> chronyc", "answer": "B", "correct": True}],
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
        ("reward_bars", lambda p: p["components"][0].update(value=3), "outside its range"),
        ("results_table", lambda p: p["rows"][0].append("x"), "row 0 has 3 cells"),
        ("results_table", lambda p: p.update(highlight_row=5), "highlight_row 5 is out of range"),
        ("before_after", lambda p: p.update(answer_star="Z"), "answer_star 'Z'"),
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
