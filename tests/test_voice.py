"""The narration voice: hibari-tts 0.2.1's ``heart`` (inside its wheel, offline) speaks every
storyboard; espeak-ng stands in, with a warning, only when hibari cannot load, and the voice that
spoke is recorded in the render manifest (per shot, with the narration as spoken) and credited
in the upload text; the MP4's loudness is -14 LUFS with peaks under -1 dBTP.

The builds here render no Manim clip: the clip cache is seeded with ffmpeg test pictures under
the keys the build computes, so only narration, assembly and publishing run (seconds).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
import urllib.request
from pathlib import Path

import pytest

from scenes import loudness
from scenes import narration as N
from scenes.assemble import ffmpeg_exe
from scenes.build import build, clip_key, prepare
from scenes.storyboard import load_storyboard

pytestmark = pytest.mark.video
REPO = Path(__file__).resolve().parents[1]
W, H, FPS = 144, 256, 5
needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng")


@pytest.fixture
def offline(monkeypatch):
    """Any attempt to reach the network (hibari downloads voices with urllib) fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args[:1]}")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def test_every_storyboard_speaks_with_the_pinned_hibari_voice():
    for path in sorted((REPO / "storyboards").glob("*.yaml")):
        sb = load_storyboard(path)
        assert (sb.voice.engine, sb.voice.voice) == ("hibari", "heart"), path
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert f"hibari-tts=={N.HIBARI_VERSION}" in extras["video"]
    assert any(d.startswith("pocketsphinx==") for d in extras["dev"])
    # make test and make demo install the project with both extras
    assert '-e ".[train,video,dev]"' in (REPO / "Makefile").read_text()


def test_hibari_speaks_offline_from_its_wheel_trimmed_to_the_words(tmp_path, offline):
    who = N.speaker("hibari")
    assert (who.engine, who.model, who.version) == ("hibari", "heart", N.HIBARI_VERSION)
    a = N.synthesize("The graph grades the answer. It scores the path.", tmp_path, who=who)
    rate, x = N.read_wav(a.path)
    assert rate == 24000 and 1.5 < a.seconds < 6
    # the engine's ~0.3 s lead and ~0.5 s tail of silence are cut to EDGE_SECONDS
    audible = (abs(x) > 10 ** (N.SILENCE_DBFS / 20)).nonzero()[0]
    assert audible[0] / rate <= N.EDGE_SECONDS + 0.01 and (len(x) - audible[-1]) / rate <= N.EDGE_SECONDS + 0.01
    again = N.synthesize("The graph grades the answer. It scores the path.", tmp_path, who=who)
    assert again.path == a.path and again.path.stat().st_mtime_ns == a.path.stat().st_mtime_ns


def test_a_voice_outside_the_wheel_is_never_downloaded(tmp_path, monkeypatch, offline):
    monkeypatch.setenv("HIBARI_HOME", str(tmp_path))  # an empty voice cache
    with pytest.raises(N.NarrationError, match="not in the wheel"):
        N.speaker("hibari", "fenrir")
    assert list(tmp_path.iterdir()) == []


def test_the_cache_key_names_the_voice_and_its_version():
    who = N.Speaker("hibari", "heart", "0.2.1")
    keys = {N.narration_key("Hello.", who), N.narration_key("Hello.", N.Speaker("hibari", "heart", "0.2.2")),
            N.narration_key("Hello.", N.Speaker("hibari", "kore", "0.2.1")), N.narration_key("Hi.", who)}
    assert len(keys) == 4


@needs_espeak
def test_espeak_ng_stands_in_with_a_warning_only_when_hibari_cannot_load(monkeypatch, capsys):
    assert N.choose_speaker("hibari")[0].engine == "hibari" and capsys.readouterr().err == ""
    monkeypatch.setattr(N, "_hibari", _broken_hibari)
    who, reason = N.choose_speaker("hibari", "heart", 165)
    assert (who.engine, who.model, who.speed) == ("espeak-ng", "en-us", 165) and "onnxruntime" in reason
    assert "warning: hibari cannot load" in capsys.readouterr().err
    # a voice asked for by name never falls back
    monkeypatch.setattr(N.shutil, "which", lambda name: None)
    with pytest.raises(N.NarrationError, match="espeak-ng is not installed"):
        N.choose_speaker("espeak-ng")


def _broken_hibari(voice):
    raise N.NarrationError("onnxruntime failed to load the model")


STORYBOARD = f"""title: voice test
format: short
run: {REPO}/data/runs/reference
kg: {REPO}/data/kg.json
questions: {REPO}/data/eval.jsonl
upload: {{title: "T", description: "Run {{{{ run_id }}}}."}}
shots:
  - scene: title
    params: {{title: "Results"}}
    duration: narration
    narration: "On {{{{ metrics.eval[final].n }}}} held-out questions, {{{{ final | phase }}}} reaches {{{{ metrics.eval[final].accuracy | pct1 }}}}."
    caption: "{{{{ final | phase }}}}: {{{{ metrics.eval[final].accuracy | pct1 }}}}"
  - scene: title
    params: {{title: "Phases"}}
    duration: narration
    narration: "The same question after each stage: supervised, rejection sampling, reinforcement learning."
"""


def _build_without_manim(sb: Path, out: Path, cache: Path):
    """build() with every clip already in the cache (ffmpeg test pictures under the clip keys
    the build will compute), so nothing but narration, assembly and publishing runs."""
    prep = prepare(sb, size=(W, H), fps=FPS, cache_dir=cache)
    for s, d in zip(prep.shots, prep.durations):
        clip = cache / f"{clip_key(s.scene, s.payload, W, H, FPS, d)}.mp4"
        subprocess.run([ffmpeg_exe(), "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                        f"testsrc=size={W}x{H}:rate={FPS}:duration={d}", "-pix_fmt", "yuv420p", "-c:v", "libx264",
                        "-preset", "ultrafast", str(clip)], check=True)
    report = build(sb, size=(W, H), fps=FPS, out_dir=out, cache_dir=cache)
    assert report.clips_rendered == 0
    return report, json.loads(out.joinpath(f"{sb.stem}.manifest.json").read_text())


def test_the_manifest_records_what_was_said_by_whom_at_the_platforms_loudness(tmp_path, offline):
    sb = tmp_path / "voiced.yaml"
    sb.write_text(STORYBOARD)
    report, manifest = _build_without_manim(sb, tmp_path / "out", tmp_path / "cache")
    voice = {"engine": "hibari", "model": "heart", "version": N.HIBARI_VERSION, "speed": 160}
    assert manifest["voice"] == voice and manifest["voice_fallback"] == ""
    first, second = manifest["shots"]
    # spoken as a person says it; the caption keeps the written form
    assert first["narration"] == "On three hundred held-out questions, G R P O reaches eighty-nine point seven percent."
    assert first["voice"] == second["voice"] == voice and first["speech_start"] == 0.0
    assert second["speech_start"] == pytest.approx(second["start"] + 0.3)
    # each shot's words end before the next shot starts fading in
    assert 0 < first["speech_start"] + first["speech_seconds"] < second["start"]
    measured = loudness.measure(report.output)
    assert measured.ok, measured
    assert manifest["loudness"]["ok"] and abs(manifest["loudness"]["integrated_lufs"] - measured.integrated_lufs) < 0.05
    upload = report.output.with_suffix(".upload.txt").read_text()
    assert "Voice: hibari (Apache-2.0), distilled from Kokoro-82M (Apache-2.0)" in upload
    # a second build skips the encode and keeps the measure
    again = build(sb, size=(W, H), fps=FPS, out_dir=tmp_path / "out", cache_dir=tmp_path / "cache")
    assert not again.assembled and again.loudness == manifest["loudness"]


@needs_espeak
def test_a_fallback_build_says_which_voice_spoke(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(N, "_hibari", _broken_hibari)
    sb = tmp_path / "fallback.yaml"
    sb.write_text(STORYBOARD)
    report, manifest = _build_without_manim(sb, tmp_path / "out", tmp_path / "cache")
    assert "warning: hibari cannot load" in capsys.readouterr().err
    assert manifest["voice"]["engine"] == "espeak-ng" and "onnxruntime" in manifest["voice_fallback"]
    assert all(s["voice"]["engine"] == "espeak-ng" for s in manifest["shots"])
    upload = report.output.with_suffix(".upload.txt").read_text()
    assert "Voice: eSpeak NG" in upload and "standing in for hibari" in upload and "Kokoro" not in upload


def test_doctests_of_the_voice_modules():
    # pytest collects doctests only under tests/ and library/ (pyproject): run these here
    import doctest

    import scenes.listen
    import scenes.spoken

    for mod in (N, loudness, scenes.spoken, scenes.listen):
        result = doctest.testmod(mod)
        assert result.failed == 0 and result.attempted > 0, mod.__name__
