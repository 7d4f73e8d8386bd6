"""The stills check (scenes/stills.py) on a video whose stills are known: 12 s of one picture,
then a box appears and stays 8 s."""

from __future__ import annotations

import subprocess

import pytest

from scenes.ffmpeg import ffmpeg_exe
from scenes.stills import main, report

pytestmark = pytest.mark.video


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    out = tmp_path_factory.mktemp("stills") / "known.mp4"
    box = "drawbox=enable='gte(t,12)':x=20:y=20:w=60:h=40:color=white:t=fill"
    subprocess.run([ffmpeg_exe(), "-v", "error", "-f", "lavfi", "-i", "color=c=0x0E1116:s=192x108:d=20:r=15",
                    "-vf", box, "-c:v", "libx264", "-pix_fmt", "yuv420p", str(out)], check=True)
    return out


def test_a_known_still_is_measured_with_its_time_past_the_grace(known):
    r = report(known, every=2.0, grace=8.0)
    assert r["samples"] == 10 and r["seconds"] == 20.0
    assert [(s["start"], s["seconds"]) for s in r["stills"]] == [(0.0, 12.0)]  # the 8 s after it is not over the grace
    assert r["past_grace"] == 4.0 and r["share"] == pytest.approx(0.2)


def test_the_check_fails_a_video_over_its_share_and_passes_one_under(known, capsys):
    assert main([str(known), "--max-share", "0.1"]) == 1
    assert "TOO STILL" in capsys.readouterr().out
    assert main([str(known), "--max-share", "0.25"]) == 0
    assert main([str(known.with_name("missing.mp4"))]) == 2
