"""The one-command ffmpeg assembly: timeline, captions, streams, atomic output.

Clips here are synthetic (ffmpeg's testsrc at 144x256), so these tests need no Manim and take
a few seconds. ffprobe comes from Debian's ffmpeg package (imageio-ffmpeg ships none).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from scenes import assemble as A

pytestmark = pytest.mark.video
W, H, FPS = 144, 256, 10


def probe(path: Path) -> dict:
    out = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "stream=codec_type,codec_name,pix_fmt,width,height",
                          "-show_entries", "format=duration", "-of", "json", str(path)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict:
    if shutil.which("ffprobe") is None:
        pytest.skip("ffprobe (Debian ffmpeg) is needed to check the output")
    d = tmp_path_factory.mktemp("media")
    clips = []
    for i, seconds in enumerate((1.0, 1.5, 1.0)):
        p = d / f"c{i}.mp4"
        subprocess.run([A.ffmpeg_exe(), "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                        f"testsrc=size={W}x{H}:rate={FPS}:duration={seconds}", "-pix_fmt", "yuv420p",
                        "-c:v", "libx264", "-preset", "ultrafast", str(p)], check=True)
        clips.append((p, seconds))
    wav = d / "n.wav"
    subprocess.run([A.ffmpeg_exe(), "-loglevel", "error", "-y", "-f", "lavfi", "-i", "sine=frequency=440:duration=0.6",
                    str(wav)], check=True)
    return {"clips": clips, "wav": wav}


def make_plan(media, captions=("first caption words", "", "third {caption}")) -> A.Plan:
    shots = [A.ShotMedia(p, s, c, media["wav"] if i != 1 else None)
             for i, ((p, s), c) in enumerate(zip(media["clips"], captions))]
    return A.Plan(shots, W, H, FPS)


def test_timeline_overlaps_by_the_crossfade(media):
    plan = make_plan(media)
    x = plan.xfade
    assert x == pytest.approx(0.3)
    assert plan.starts == pytest.approx([0.0, 1.0 - x, 2.5 - 2 * x])
    assert plan.total == pytest.approx(3.5 - 2 * x)


def test_caption_pages_wrap_at_words():
    pages = A.caption_pages("reinforcement learning against the knowledge graph reward", 12)
    lines = [line for page in pages for line in page]
    assert all(len(p) <= 2 for p in pages)
    assert " ".join(lines) == "reinforcement learning against the knowledge graph reward"  # no word split


def test_captions_sit_in_the_bottom_third():
    for w, h in ((1080, 1920), (144, 256)):
        s = A.caption_style(w, h)
        top_of_two_lines = h - s.margin_v - 2 * 1.25 * s.font_size
        assert top_of_two_lines > h * 2 / 3, (w, h, s)
        assert s.font_size >= 0.03 * h  # "large": 58+ px on a 1920-tall Short


def test_ass_file_escapes_override_braces(media, tmp_path):
    ass = A.write_ass(make_plan(media), tmp_path / "c.ass").read_text()
    assert "Style: Caption,DejaVu Sans," in ass
    assert "third (caption)" in ass and "{caption}" not in ass


def test_assembled_mp4_is_h264_yuv420p_aac(media, tmp_path):
    plan = make_plan(media)
    out = A.assemble(plan, tmp_path / "out.mp4")
    info = probe(out)
    streams = {s["codec_type"]: s for s in info["streams"]}
    assert streams["video"]["codec_name"] == "h264" and streams["video"]["pix_fmt"] == "yuv420p"
    assert (streams["video"]["width"], streams["video"]["height"]) == (W, H)
    assert streams["audio"]["codec_name"] == "aac"
    assert float(info["format"]["duration"]) == pytest.approx(plan.total, abs=0.15)
    assert [p.name for p in tmp_path.iterdir()] == ["out.mp4"]  # no temp files left


def test_silent_plan_still_has_an_audio_stream(media, tmp_path):
    shots = [A.ShotMedia(p, s) for p, s in media["clips"]]
    out = A.assemble(A.Plan(shots, W, H, FPS), tmp_path / "silent.mp4")
    assert {s["codec_type"] for s in probe(out)["streams"]} == {"video", "audio"}


def test_interrupted_assembly_leaves_no_file(media, tmp_path):
    final = tmp_path / "short.mp4"

    def interrupt(done, total):
        raise KeyboardInterrupt  # as if the user pressed Ctrl-C while ffmpeg is encoding

    with pytest.raises(KeyboardInterrupt):
        A.assemble(make_plan(media), final, on_progress=interrupt)
    assert list(tmp_path.iterdir()) == []

    # with an older video already there, an interrupted rebuild leaves it intact
    final.write_bytes(b"previous video")
    with pytest.raises(KeyboardInterrupt):
        A.assemble(make_plan(media), final, on_progress=interrupt)
    assert final.read_bytes() == b"previous video"
    assert list(tmp_path.iterdir()) == [final]


def test_ffmpeg_failure_raises_and_leaves_no_file(media, tmp_path):
    plan = make_plan(media)
    plan.shots[0].clip = tmp_path / "missing.mp4"
    with pytest.raises(RuntimeError, match="ffmpeg failed"):
        A.assemble(plan, tmp_path / "out.mp4")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("size", [(1080, 1920), (480, 854)], ids=["full", "low"])
def test_a_two_line_caption_page_stays_inside_the_band_portrait_scenes_keep_free(tmp_path, size):
    # the scenes' layout (theme.layout_for) reads the caption geometry from assemble; this
    # burns a real page in with libass and checks the lit pixels against that band
    pytest.importorskip("manim")
    import numpy as np

    from scenes.theme import layout_for

    w, h = size
    style = A.caption_style(w, h)
    text = "Before: no answer, after GRPO: unhandled exception"  # one sentence, two lines
    assert len(A.caption_pages(text, style.max_chars)[0]) == A.CAPTION_LINES
    plan = A.Plan([A.ShotMedia(tmp_path / "unused.mp4", 2.0, text)], w, h, 30)
    ass = A.write_ass(plan, tmp_path / "c.ass")
    raw = tmp_path / "frame.gray"
    subprocess.run([A.ffmpeg_exe(), "-v", "error", "-y", "-f", "lavfi", "-i", f"color=black:s={w}x{h}:d=1", "-vf",
                    f"ass=filename={A._filter_path(ass)}:fontsdir={A._filter_path(A.FONT_DIR)}", "-ss", "0.5",
                    "-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "gray", str(raw)], check=True)
    lit = np.nonzero(np.fromfile(raw, np.uint8).reshape(h, w).max(axis=1) > 20)[0]
    assert lit.size, "no caption was drawn"
    # two lines of text, and their top edge within the predicted block
    assert lit.max() - lit.min() > 1.5 * style.font_size
    top_from_bottom = (h - lit.min()) / h
    assert top_from_bottom <= A.caption_block_top(True)
    L = layout_for(4.5, 8.0)
    band_top = (L.captions.top - L.frame.bottom) / L.frame.height  # fraction of the height from the bottom
    assert top_from_bottom < band_top < 1 / 3  # under the scenes' content, inside the bottom third
