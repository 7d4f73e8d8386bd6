"""End-to-end builds of the shipped Short at a tiny size (144x256 at 5 fps) over the fixture run.

One module-scoped build renders every clip once (~30-60 s on 2 cores); the other tests reuse
its cache: a rebuild renders nothing, and editing one episode re-renders only the clip that
shows it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from library.graph.kg import KnowledgeGraph
from scenes.build import build, clip_key

pytestmark = [pytest.mark.video, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[1]
SHORT = REPO / "storyboards" / "short.yaml"
TINY = dict(size=(144, 256), fps=5, jobs=2)


def streams(path: Path) -> dict[str, dict]:
    out = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "stream=codec_type,codec_name,pix_fmt",
                          "-of", "json", str(path)], capture_output=True, text=True, check=True)
    return {s["codec_type"]: s for s in json.loads(out.stdout)["streams"]}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if shutil.which("ffprobe") is None or shutil.which("espeak-ng") is None:
        pytest.skip("needs Debian ffmpeg (ffprobe) and espeak-ng")
    from conftest import TINY_KG
    from fixture_run import build_fixture_run

    root = tmp_path_factory.mktemp("video")
    run = build_fixture_run(root / "runs", KnowledgeGraph.from_dict(json.loads(json.dumps(TINY_KG))))
    (run.path / "kg.json").write_text(json.dumps(TINY_KG))  # the per-run KG override
    cache = root / "cache"
    report = build(SHORT, run=run.path, out_dir=root / "out", cache_dir=cache, **TINY)
    return {"root": root, "run": run.path, "cache": cache, "report": report}


def test_short_builds_with_audio(built):
    r = built["report"]
    assert r.clips_total == 8 and r.clips_rendered == 8 and r.assembled
    s = streams(r.output)
    assert s["video"]["codec_name"] == "h264" and s["video"]["pix_fmt"] == "yuv420p"
    assert s["audio"]["codec_name"] == "aac"
    assert 0 < r.video_seconds <= 60
    # the manifest traces every shot to the episodes it shows (the fixture's hero is eval-0002)
    manifest = json.loads((r.output.parent / "short.manifest.json").read_text())
    # the fixture logs an SFT curve and the distribution experiment, so both conditional shots are in
    assert [m["scene"] for m in manifest["shots"]] == ["title", "kg_path", "reward_bars", "training_curves", "before_after",
                                                     "distribution_trap", "results_table", "title"]
    assert {"phase": "grpo", "ex_id": "eval-0002", "role": "selected"} in manifest["shots"][1]["episodes"]
    assert manifest["run_id"] == "fixture" and all(m["episodes"] == [] for m in manifest["shots"] if m["scene"] == "title")


def test_second_build_renders_nothing(built):
    before = built["report"].output.stat().st_mtime_ns
    r = build(SHORT, run=built["run"], out_dir=built["root"] / "out", cache_dir=built["cache"], **TINY)
    assert (r.clips_rendered, r.clips_cached, r.assembled) == (0, 8, False)
    assert r.output.stat().st_mtime_ns == before
    assert r.seconds < 5


def test_changing_one_episode_rerenders_only_its_clips(built, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(built["run"], run)
    # rewrite the SFT answer of the hero question (eval-0002, the only 5-hop one): only the
    # before/after shot (shot 5) shows SFT's answer; the KG path and reward shots show GRPO's
    lines = (run / "episodes.jsonl").read_text().splitlines()
    changed = 0
    for i, line in enumerate(lines):
        ep = json.loads(line)
        if ep["phase"] == "sft" and ep["ex_id"] == "eval-0002" and ep["split"] == "eval":
            ep["parsed"]["trace_text"] = "NTP drift leads to TLS handshake error."
            ep["parsed"]["steps"] = [{"text": "NTP drift leads to TLS handshake error.",
                                      "spans": [[0, 9, "NTPDrift"], [19, 38, "TLSHandshakeError"]]}]
            ep["completion"] = "TRACE: NTP drift leads to TLS handshake error.\nANSWER: D"
            lines[i] = json.dumps(ep)
            changed += 1
    assert changed == 1
    (run / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    r = build(SHORT, run=run, out_dir=tmp_path / "out", cache_dir=built["cache"], **TINY)
    assert r.rendered_shots == [4]
    assert (r.clips_rendered, r.clips_cached, r.assembled) == (1, 7, True)


def test_clip_key_covers_payload_size_and_duration():
    base = clip_key("title", {"title": "a"}, 144, 256, 5, 2.0)
    assert base == clip_key("title", {"title": "a"}, 144, 256, 5, 2.0)
    assert len({base, clip_key("title", {"title": "b"}, 144, 256, 5, 2.0), clip_key("title", {"title": "a"}, 256, 144, 5, 2.0),
                clip_key("title", {"title": "a"}, 144, 256, 5, 2.5), clip_key("results_table", {"title": "a"}, 144, 256, 5, 2.0)}) == 5


def test_too_long_short_fails_before_rendering(built, tmp_path):
    # narration-timed shots: the 60 s check runs after synthesis and before any clip renders
    words = "The graph checks every hop of the answer. " * 12
    sb = tmp_path / "long.yaml"
    sb.write_text("title: t\nformat: short\nshots:\n" + "".join(
        f"  - scene: title\n    params: {{title: x{i}}}\n    duration: narration\n    narration: \"{words}\"\n" for i in range(3)))
    with pytest.raises(Exception, match=r"long.yaml:\d+: a Short must be at most 60 s"):
        build(sb, run=built["run"], out_dir=tmp_path / "out", cache_dir=tmp_path / "cache", **TINY)
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").glob("*.mp4"))


def test_cli_reports_storyboard_errors(tmp_path):
    from library.cli import app
    from scenes.cli import register

    register(app)
    bad = tmp_path / "bad.yaml"
    bad.write_text("title: t\nformat: short\nshots:\n  - scene: nope\n    duration: 2\n")
    result = CliRunner().invoke(app, ["render", str(bad)])
    assert result.exit_code == 2
    # rich wraps long lines: compare without whitespace
    assert f"{bad}:4:" in "".join(result.output.split())


def test_build_side_imports_neither_torch_nor_manim():
    # the parent process stays light: manim loads only in the spawned render workers
    code = ("import sys, scenes.build, scenes.cli, scenes.assemble, scenes.narration; "
            "bad = [m for m in ('torch', 'manim') if m in sys.modules]; print(bad); sys.exit(bool(bad))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_narration_is_cached_by_text_and_timed_from_the_wav(tmp_path):
    from scenes.narration import synthesize

    if shutil.which("espeak-ng") is None:
        pytest.skip("needs espeak-ng")
    a = synthesize("The graph checks every hop.", tmp_path)
    again = synthesize("The graph checks every hop.", tmp_path)
    longer = synthesize("The graph checks every hop, one after another, until the answer.", tmp_path)
    assert again.path == a.path and again.path.stat().st_mtime_ns == a.path.stat().st_mtime_ns
    assert longer.key != a.key and longer.seconds > a.seconds > 0.5
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({a.path.name, longer.path.name})  # no temp files


def test_missing_tts_engine_is_a_clear_error(built, tmp_path, monkeypatch):
    import scenes.narration as narration
    from scenes.narration import NarrationError

    # hibari cannot load, and its fallback espeak-ng is not installed either
    def no_hibari(voice):
        raise NarrationError("hibari is not installed")

    monkeypatch.setattr(narration, "_hibari", no_hibari)
    monkeypatch.setattr(narration.shutil, "which", lambda name: None)
    with pytest.raises(NarrationError, match="--no-voice"):
        build(SHORT, run=built["run"], out_dir=tmp_path, cache_dir=tmp_path / "cache", **TINY)


def test_the_short_is_ready_to_upload(built):
    """Beside the MP4: a thumbnail (the hero shot's middle frame with the headline drawn on it,
    at the video's size) and an upload text whose numbers are the run's."""
    out = built["report"].output
    thumb, text = out.with_suffix(".thumbnail.png"), out.with_suffix(".upload.txt").read_text()
    probe = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "stream=width,height", "-of", "json", str(thumb)],
                           capture_output=True, text=True, check=True)
    assert json.loads(probe.stdout)["streams"][0] == {"width": 144, "height": 256}
    metrics = json.loads((built["run"] / "metrics.json").read_text())
    assert f"GRPO {round(metrics['eval']['grpo']['accuracy'] * 100)}%" in text
    assert "GRPO +33.3 points" in text and "nothing measurable" in text  # 3 of 3 against 2 of 3, n = 3
    assert "arXiv 2601.15160" in text and "run fixture" in text
