"""Intelligibility: narration lines of the Short, spoken by the default voice, transcribe back
(pocketsphinx, offline, its model inside the wheel) with a word error rate of at most 0.2; the
same lines spoken by espeak-ng do not, so the check can fail."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from scenes import narration as N
from scenes.listen import pcm16k, transcribe, wer
from scenes.resolve import RunData, resolve_shots
from scenes.storyboard import load_storyboard

pytestmark = pytest.mark.video
REPO = Path(__file__).resolve().parents[1]
MAX_WER = 0.2


@pytest.fixture(scope="module")
def lines() -> list[str]:
    """Two lines of the Short over the reference run, as spoken: the stages, and the results
    (numbers, an interval and an initialism, read as a person says them)."""
    sb = load_storyboard(REPO / "storyboards" / "short.yaml")
    shots = resolve_shots(sb, RunData.load(REPO / sb.run, kg_default=REPO / sb.kg, questions_default=REPO / sb.questions))
    return [s.spoken for s in shots if s.scene in ("before_after", "results_table")]


def heard_wer(lines: list[str], who: N.Speaker, cache: Path) -> tuple[float, str]:
    heard = [transcribe(pcm16k(N.synthesize(line, cache, who=who).path)) for line in lines]
    return wer(" ".join(lines), " ".join(heard)), " | ".join(heard)


def test_the_default_voice_is_understood(lines, tmp_path):
    assert len(lines) == 2 and "ninety percent" in lines[1]
    score, heard = heard_wer(lines, N.speaker("hibari"), tmp_path)
    assert score <= MAX_WER, (score, heard)


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng")
def test_the_check_fails_espeak_ng(lines, tmp_path):
    score, heard = heard_wer(lines, N.speaker("espeak-ng", None, 165), tmp_path)
    assert score > MAX_WER, (score, heard)
