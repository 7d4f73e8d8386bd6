"""Render one scene clip to an MP4: the unit of work of the parallel video build.

``render_clip`` is a top-level function with plain, picklable arguments so the build can
run it in worker processes. Each call renders in its own private ``media_dir``/``text_dir``
(a shared manim text cache raced and crashed two parallel renders, see docs/MEASUREMENTS.md), with
manim's per-animation cache disabled (whole clips are cached by the build instead), and
publishes the MP4 atomically: it is written under a temporary name in the destination
folder and ``os.replace``-d into place, so a crash never leaves a half-written file at
``out_path`` for the clip cache to trust.

Debug CLI::

    python -m scenes.render_clip kg_path payload.json out.mp4 --size 1080x1920 --fps 30 --duration 6
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

from scenes.payloads import validate_payload

#: frame_height of the manim scene in scene units for every orientation. frame_width follows
#: the pixel aspect ratio; without it portrait renders come out half size (docs/MEASUREMENTS.md).
FRAME_HEIGHT = 8.0


def frame_count(duration: float, fps: int) -> int:
    """Number of frames a clip of ``duration`` seconds has at ``fps`` (at least 1).

    >>> frame_count(6, 30), frame_count(2.0, 5), frame_count(0.01, 5)
    (180, 10, 1)
    """
    return max(1, round(duration * fps))


def _check_args(width: int, height: int, fps: int, duration: float) -> None:
    # x264 with yuv420p needs even dimensions; failing here is clearer than an encoder error.
    for name, v in (("width", width), ("height", height)):
        if not isinstance(v, int) or v < 16 or v % 2:
            raise ValueError(f"{name} must be an even integer >= 16, got {v!r}")
    if not isinstance(fps, int) or not 1 <= fps <= 120:
        raise ValueError(f"fps must be an integer in 1..120, got {fps!r}")
    if not (isinstance(duration, (int, float)) and 0 < duration <= 600):
        raise ValueError(f"duration must be in (0, 600] seconds, got {duration!r}")


def probe_frames(path: Path) -> tuple[int, int, int]:
    """(width, height, frame count) of the first video stream of ``path``, decoded with PyAV.

    Counting decoded frames rather than trusting container metadata, because the stream's
    ``frames`` field is 0 for some muxers.
    """
    import av  # manim's own dependency; imported lazily so payload-only users skip it

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        n = sum(1 for _ in container.decode(stream))
        return stream.codec_context.width, stream.codec_context.height, n


def render_clip(
    scene_type: str,
    payload: dict,
    out_path: Path,
    *,
    width: int,
    height: int,
    fps: int,
    duration: float,
    work_dir: Path | None = None,
) -> Path:
    """Render ``scene_type`` with ``payload`` into an MP4 at ``out_path``; return ``out_path``.

    The clip is ``width`` x ``height`` pixels at ``fps`` and has exactly
    ``frame_count(duration, fps)`` frames: scenes pace their animations to fill the duration
    and end on a hold. Raises ValueError for an unknown scene type, an invalid payload or bad
    sizes (before any rendering), RuntimeError if the encoded clip has the wrong frame count.
    ``work_dir`` is where the private manim folders go (a fresh subfolder is made inside it
    and removed afterwards); by default the system temp folder.
    """
    model = validate_payload(scene_type, payload)
    _check_args(width, height, fps, duration)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if work_dir is not None:
        Path(work_dir).mkdir(parents=True, exist_ok=True)
    private = Path(tempfile.mkdtemp(prefix=f"clip_{scene_type}_", dir=work_dir))
    tmp_out = out_path.parent / f".{out_path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp.mp4"
    try:
        movie = _render_in(private, scene_type, model, width, height, fps, duration)
        w, h, n = probe_frames(movie)
        expected = frame_count(duration, fps)
        if (w, h) != (width, height) or abs(n - expected) > 1:
            raise RuntimeError(
                f"{scene_type}: rendered {w}x{h} with {n} frames, expected "
                f"{width}x{height} with {expected} frames"
            )
        # Copy into the destination folder first (the private folder may be on another
        # filesystem), then rename: os.replace is atomic within one folder.
        shutil.move(str(movie), tmp_out)
        os.replace(tmp_out, out_path)
    finally:
        tmp_out.unlink(missing_ok=True)
        shutil.rmtree(private, ignore_errors=True)
    return out_path


def _render_in(
    private: Path, scene_type: str, model, width: int, height: int, fps: int, duration: float
) -> Path:
    """Render inside ``private`` with a temporary manim config; return the MP4 manim wrote."""
    # manim is imported here, not at module top, so that importing this module (e.g. in the
    # build's parent process or to read FRAME_HEIGHT) stays cheap.
    from manim import __version__ as manim_version
    from manim import config, tempconfig

    from scenes.registry import SCENE_TYPES
    from scenes.theme import BG

    scene_cls, _ = SCENE_TYPES[scene_type]
    settings = {
        "pixel_width": width,
        "pixel_height": height,
        "frame_height": FRAME_HEIGHT,
        "frame_width": FRAME_HEIGHT * width / height,
        "frame_rate": fps,
        "background_color": BG,
        "media_dir": str(private / "media"),
        "text_dir": str(private / "texts"),
        "tex_dir": str(private / "tex"),
        "disable_caching": True,
        "format": "mp4",
        "preview": False,
        "progress_bar": "none",
        "verbosity": "WARNING",
        "output_file": scene_type,
    }
    # tempconfig silently drops keys manim does not know; a renamed option must fail here,
    # not quietly render at the wrong size or into a shared cache.
    unknown = [k for k in settings if k not in config]
    if unknown:
        raise RuntimeError(f"manim {manim_version} has no config keys {unknown}")
    with tempconfig(settings):
        scene = scene_cls(payload=model, duration=float(duration))
        scene.render()
        movie = Path(scene.renderer.file_writer.movie_file_path)
    if not movie.is_file():
        raise RuntimeError(f"{scene_type}: manim wrote no movie at {movie}")
    return movie


def main(argv: list[str] | None = None) -> int:
    """Debug CLI: render one clip from a JSON payload file."""
    ap = argparse.ArgumentParser(prog="python -m scenes.render_clip", description=__doc__.split("\n")[0])
    ap.add_argument("scene_type")
    ap.add_argument("payload", type=Path, help="JSON file holding the payload object")
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", default="1080x1920", help="WIDTHxHEIGHT in pixels")
    ap.add_argument("--fps", type=int, default=30)
    ap.add_argument("--duration", type=float, default=6.0)
    ap.add_argument("--work-dir", type=Path, default=None)
    args = ap.parse_args(argv)
    try:
        w, h = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        ap.error(f"--size must look like 1080x1920, got {args.size!r}")
    payload = json.loads(args.payload.read_text())
    try:
        out = render_clip(
            args.scene_type, payload, args.out, width=w, height=h, fps=args.fps,
            duration=args.duration, work_dir=args.work_dir,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
