"""A listener's check: does a video say what its manifest says it says, at the platforms' loudness?

``pocketsphinx`` (PyPI, its US English model inside the wheel, offline) transcribes the audio;
the word error rate against the narration recorded in the render manifest (``narration``, as
spoken, per shot) says whether a stranger could follow it. An ASR that small is a strict ear:
hibari's voice scores about 0.2 on a whole Short, espeak-ng about 0.9.

    python -m scenes.listen renders/short.mp4 [--max-wer 0.3]

prints the voice, the whole track's WER, each shot's WER (from its ``speech_start`` and
``speech_seconds``), the integrated loudness and true peak, and exits 1 when the WER is over
``--max-wer`` or the loudness is off target.

>>> words("GRPO reaches eighty-four percent; the model's trace.")
['g', 'r', 'p', 'o', 'reaches', 'eighty', 'four', 'percent', 'the', "model's", 'trace']
>>> wer("the graph is the grader", "the grass is the greater")
0.4
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from scenes.ffmpeg import ffmpeg_exe
from scenes.loudness import measure

ASR_RATE = 16000  # pocketsphinx's US English model is trained on 16 kHz speech
MAX_WER = 0.3


def words(text: str) -> list[str]:
    """The words a transcript is compared on: lower case, initialisms letter by letter (a voice
    says "GRPO" as G R P O, and the recogniser writes the letters), hyphens and punctuation gone."""
    text = re.sub(r"\b([A-Z]{2,4})(s?)\b", lambda m: " ".join(m[1]) + (" " + m[2] if m[2] else ""), text)
    return re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower().replace("-", " "))


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate: word insertions, deletions and substitutions over the reference's words."""
    ref, hyp = words(reference), words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        diagonal, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (r != h))
    return round(row[-1] / max(1, len(ref)), 4)


def pcm16k(path: str | Path, start: float = 0.0, seconds: float | None = None) -> bytes:
    """Mono 16-bit 16 kHz samples of a media file's audio (from ``start``, ``seconds`` long)."""
    span = ["-ss", f"{start:.3f}"] + (["-t", f"{seconds:.3f}"] if seconds is not None else [])
    cmd = [ffmpeg_exe(), "-v", "error", "-nostdin", *span, "-i", str(path), "-map", "0:a:0", "-ac", "1",
           "-ar", str(ASR_RATE), "-f", "s16le", "-"]
    return subprocess.run(cmd, capture_output=True, check=True, timeout=600).stdout


_DECODER = None


def transcribe(pcm: bytes) -> str:
    """pocketsphinx's transcript of 16 kHz mono samples, decoded as one utterance."""
    global _DECODER
    if _DECODER is None:  # loading the model takes ~0.3 s: once per process
        from pocketsphinx import Decoder

        _DECODER = Decoder(loglevel="FATAL")
    _DECODER.start_utt()
    _DECODER.process_raw(pcm, full_utt=True)
    _DECODER.end_utt()
    hyp = _DECODER.hyp()
    return hyp.hypstr if hyp is not None else ""


def check(video: Path, max_wer: float = MAX_WER) -> dict:
    """The listener's check of ``video`` against ``<name>.manifest.json`` beside it."""
    manifest = json.loads(video.with_suffix(".manifest.json").read_text(encoding="utf-8"))
    said = [s for s in manifest["shots"] if s.get("narration")]
    reference = " ".join(s["narration"] for s in said)
    heard = transcribe(pcm16k(video))
    shots = []
    for s in said:
        if s.get("speech_seconds"):
            # a little more than the speech: the recogniser needs the word's end
            got = transcribe(pcm16k(video, s["speech_start"], s["speech_seconds"] + 0.3))
            shots.append({"shot": s["shot"], "wer": wer(s["narration"], got), "said": s["narration"], "heard": got})
    level = measure(video)
    result = {"video": str(video), "voice": manifest.get("voice"), "voice_fallback": manifest.get("voice_fallback", ""),
              "seconds": manifest.get("seconds"), "wer": wer(reference, heard), "heard": heard, "shots": shots,
              "loudness": level.record()}
    result["ok"] = result["wer"] <= max_wer and level.ok
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scenes.listen", description=__doc__.split("\n\n")[0])
    parser.add_argument("videos", nargs="+", type=Path)
    parser.add_argument("--max-wer", type=float, default=MAX_WER)
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON")
    args = parser.parse_args(argv)
    ok = True
    for video in args.videos:
        r = check(video, args.max_wer)
        ok &= r["ok"]
        if args.json:
            print(json.dumps(r, indent=1))
            continue
        v, lv = r["voice"] or {}, r["loudness"]
        print(f"{video}: {r['seconds']:.1f} s, voice {v.get('engine')} {v.get('model')} {v.get('version')}"
              f"{' (fallback)' if r['voice_fallback'] else ''}; WER {r['wer']:.2f}; "
              f"{lv['integrated_lufs']:.1f} LUFS, true peak {lv['true_peak_dbtp']:.1f} dBTP; {'ok' if r['ok'] else 'NOT OK'}")
        for s in r["shots"]:
            print(f"  shot {s['shot']}: WER {s['wer']:.2f}  heard: {s['heard']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
