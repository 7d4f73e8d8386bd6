"""A viewer's check: how long does a video hold a still picture?

A viewer leaves during a still. This samples a frame every ``every`` seconds (ffmpeg, shrunk
to 192 px grey), calls two consecutive samples the same picture unless a few pixels moved by
more than the encoder's noise (``picture_keys``; the caption band is left out), and reports
each still stretch: its start, length, and the shot it starts in (from the render manifest
beside the MP4). The bar counts only the time past the
first ``grace`` seconds of each stretch: a picture may rest while it is read.

    python -m scenes.stills renders/explainer.mp4 [--every 2] [--grace 8] [--max-share 0.10]

exits 1 when the time past the grace is over ``--max-share`` of the video.

>>> stretches([0, 0, 5, 5, 5, 5, 9], every=2.0)
[Still(start=0.0, seconds=4.0), Still(start=4.0, seconds=8.0), Still(start=12.0, seconds=2.0)]
>>> round(past_grace(stretches([0] * 10, every=2.0), grace=8.0), 1)
12.0
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scenes.ffmpeg import ffmpeg_exe

SIDE = 192  # px: the sample's side; a label appearing on a phone survives this
LEVELS = 32  # grey levels a pixel must move to count: the encoder's own noise stays under it
PIXELS = 4  # pixels that must move for a new picture: a label appearing moves dozens
CAPTION_BAND = 0.225  # the bottom of the frame, where captions page: left out, only the picture counts
GRACE = 8.0  # s a picture may rest before the rest of its stretch counts
EVERY = 2.0  # s between samples
MAX_SHARE = 0.10


@dataclass(frozen=True)
class Still:
    """A stretch of one picture: ``start`` and length in seconds (a lone sample lasts ``every``)."""

    start: float
    seconds: float


def stretches(keys: list, every: float) -> list[Still]:
    """Runs of equal consecutive ``keys`` (one per sample) as stills."""
    out: list[Still] = []
    i = 0
    while i < len(keys):
        j = i
        while j + 1 < len(keys) and keys[j + 1] == keys[i]:
            j += 1
        out.append(Still(start=i * every, seconds=(j - i + 1) * every))
        i = j + 1
    return out


def past_grace(stills: list[Still], grace: float) -> float:
    """Seconds of the stills beyond the first ``grace`` seconds of each."""
    return sum(max(0.0, s.seconds - grace) for s in stills)


def sample(mp4: Path, every: float) -> np.ndarray:
    """One grey frame every ``every`` seconds, the caption band cut off (a caption turning its
    page is not the picture changing), squeezed to ``SIDE`` x ``SIDE`` px (the aspect does not
    matter to a difference), as an array (frames, SIDE, SIDE)."""
    run = subprocess.run([ffmpeg_exe(), "-v", "error", "-i", str(mp4), "-vf",
                          f"fps=1/{every}:round=down,crop=iw:ih*{1 - CAPTION_BAND}:0:0,scale={SIDE}:{SIDE},format=gray",
                          "-f", "rawvideo", "-"],
                         capture_output=True, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"ffmpeg could not read {mp4}: {run.stderr.decode(errors='replace')[-300:]}")
    return np.frombuffer(run.stdout, dtype=np.uint8).reshape(-1, SIDE, SIDE)


def picture_keys(frames: np.ndarray, levels: int = LEVELS, pixels: int = PIXELS) -> list[int]:
    """A key per sample: a new key wherever at least ``pixels`` pixels moved by more than
    ``levels`` grey levels since the sample before (a still re-encoded at a keyframe moves
    none that far; on this project's explainer the smallest real change, a short label, moves
    six or more at 192 px).

    >>> still = np.zeros((3, 8, 8), dtype=np.uint8); still[2, :2, :2] = 200
    >>> picture_keys(still)
    [0, 0, 1]
    """
    keys = [0]
    for a, b in zip(frames, frames[1:]):
        moved = int((np.abs(a.astype(np.int16) - b.astype(np.int16)) > levels).sum())
        keys.append(keys[-1] if moved < pixels else keys[-1] + 1)
    return keys[: len(frames)]


def shot_at(shots: list[dict], t: float) -> dict | None:
    """The manifest's shot playing at ``t`` seconds (the last one started by then)."""
    started = [s for s in shots if s.get("start", 0.0) <= t + 1e-9]
    return started[-1] if started else None


def report(mp4: Path, every: float = EVERY, grace: float = GRACE) -> dict:
    """The stills of ``mp4``: each stretch longer than ``grace`` with its shot, and the totals."""
    frames = sample(mp4, every)
    stills = stretches(picture_keys(frames), every)
    manifest = mp4.with_suffix(".manifest.json")
    shots = json.loads(manifest.read_text())["shots"] if manifest.exists() else []
    seconds = len(frames) * every
    long = [s for s in stills if s.seconds > grace]
    rows = []
    for s in long:
        shot = shot_at(shots, s.start)
        rows.append({"start": s.start, "seconds": s.seconds,
                     "shot": shot.get("shot") if shot else None, "scene": shot.get("scene") if shot else None})
    over = past_grace(stills, grace)
    return {"seconds": seconds, "samples": len(frames), "every": every, "grace": grace, "stills": rows,
            "past_grace": over, "share": over / seconds if seconds else 0.0,
            "longest": max((s.seconds for s in stills), default=0.0)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scenes.stills", description=__doc__.split("\n\n")[0])
    ap.add_argument("mp4", type=Path)
    ap.add_argument("--every", type=float, default=EVERY, help="seconds between samples (default 2)")
    ap.add_argument("--grace", type=float, default=GRACE, help="seconds a picture may rest (default 8)")
    ap.add_argument("--max-share", type=float, default=MAX_SHARE, help="most of the video past the grace (0.10)")
    args = ap.parse_args(argv)
    if not args.mp4.is_file():
        print(f"error: {args.mp4}: no such file", file=sys.stderr)
        return 2
    try:
        r = report(args.mp4, args.every, args.grace)
    except RuntimeError as exc:  # ffmpeg could not read it
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.mp4}: {r['seconds']:.0f} s sampled every {r['every']:g} s; "
          f"{len(r['stills'])} stills longer than {r['grace']:g} s, the longest {r['longest']:.0f} s")
    for s in r["stills"]:
        print(f"  {s['start']:6.0f} s  {s['seconds']:4.0f} s  shot {s['shot']} ({s['scene']})")
    ok = r["share"] <= args.max_share
    print(f"past the first {r['grace']:g} s of each: {r['past_grace']:.0f} of {r['seconds']:.0f} s "
          f"({100 * r['share']:.1f}%; at most {100 * args.max_share:.0f}%) {'ok' if ok else 'TOO STILL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
