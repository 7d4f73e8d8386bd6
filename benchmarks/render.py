"""Benchmark the video build: fast path vs naive path, and the no-op rebuild.

    .venv/bin/python benchmarks/render.py [--run data/runs/<id>] [--naive-storyboard FILE] [--skip-naive]

1. fast: the full Short from an EMPTY clip cache at 1080x1920@30 — narration, clips in
   parallel worker processes (--jobs), one ffmpeg command for the assembly;
2. no-op: the same build again (everything cached, assembly skipped by its manifest);
3. naive: the clips rendered one after another in this process, then MoviePy compositing
   (CompositeVideoClip + CrossFadeIn + TextClip captions + write_videofile).

Reports wall seconds per second of video for both paths and their ratio. Targets: fast
<= 1.5 s per video-second, >= 4x faster than naive, no-op <= 2 s. Without --run (and no
data/runs/quick) it builds the synthetic test fixture run in a temp folder; the figures
are about rendering cost, which depends on the storyboard, not on the run's numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def cpu_seconds() -> float:
    """CPU time of this process and its waited-for children (render workers, ffmpeg, espeak):
    a load-independent cost, since wall time on a shared 2-core machine depends on neighbours."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def fixture_run(root: Path) -> Path:
    sys.path.insert(0, str(REPO / "tests"))
    from conftest import TINY_KG  # noqa: E402
    from fixture_run import build_fixture_run  # noqa: E402

    from library.graph.kg import KnowledgeGraph

    run = build_fixture_run(root, KnowledgeGraph.from_dict(json.loads(json.dumps(TINY_KG))))
    (run.path / "kg.json").write_text(json.dumps(TINY_KG))
    return run.path


def naive_build(storyboard: Path, run: Path, work: Path, size: tuple[int, int], fps: int) -> tuple[float, float]:
    """(wall seconds, video seconds) of clips rendered sequentially + MoviePy compositing."""
    from scenes import assemble as A
    from scenes.build import prepare
    from scenes.render_clip import frame_count, render_clip

    t0 = time.perf_counter()
    # resolution, narration and durations exactly as the fast path computes them
    prep = prepare(storyboard, run=run, size=size, fps=fps, cache_dir=work / "naive-cache")
    media = []
    for shot, duration, n in zip(prep.shots, prep.durations, prep.narrations):
        wav = n.path if n else None
        out = work / "naive-clips" / f"{shot.index}.mp4"
        render_clip(shot.scene, shot.payload, out, width=size[0], height=size[1], fps=fps, duration=duration,
                    work_dir=work / "naive-work")
        media.append(A.ShotMedia(out, frame_count(duration, fps) / fps, shot.caption, wav))
    plan = A.Plan(media, size[0], size[1], fps)
    A.assemble_naive(plan, work / "naive.mp4")
    return time.perf_counter() - t0, plan.total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, default=None)
    ap.add_argument("--storyboard", type=Path, default=REPO / "storyboards" / "short.yaml")
    ap.add_argument("--naive-storyboard", type=Path, default=None,
                    help="storyboard for the naive path (default: the same); a shorter one if time is short")
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--size", default="1080x1920")
    ap.add_argument("--fps", type=int, default=30)
    ap.add_argument("--keep", type=Path, default=None, help="keep the outputs in this folder")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    size = tuple(int(v) for v in args.size.split("x"))

    from scenes.build import build

    work = Path(args.keep or tempfile.mkdtemp(prefix="bench_render_"))
    work.mkdir(parents=True, exist_ok=True)
    run = args.run or (REPO / "data/runs/quick" if (REPO / "data/runs/quick/metrics.json").exists() else None)
    run = run or fixture_run(work / "runs")
    results: dict = {"run": str(run), "storyboard": str(args.storyboard), "size": args.size, "fps": args.fps, "jobs": args.jobs}

    c, load0 = cpu_seconds(), os.getloadavg()[0]
    t = time.perf_counter()
    fast = build(args.storyboard, run=run, size=size, fps=args.fps, jobs=args.jobs, out_dir=work / "fast",
                 cache_dir=work / "fast" / "cache")
    fast_wall = time.perf_counter() - t
    fast_cpu = cpu_seconds() - c
    results["fast"] = {"wall_s": round(fast_wall, 2), "cpu_s": round(fast_cpu, 1),
                       "load_avg_1min_before_after": [round(load0, 2), round(os.getloadavg()[0], 2)], "video_s": round(fast.video_seconds, 2),
                       "s_per_video_s": round(fast_wall / fast.video_seconds, 3),
                       "stages_s": {k: round(v, 2) for k, v in fast.stages.items()}, "clips": fast.clips_total,
                       "output": str(fast.output)}
    print(f"fast : {fast_wall:7.1f} s for {fast.video_seconds:.1f} s of video = "
          f"{fast_wall / fast.video_seconds:.2f} s per video-second  {fast.stages}", flush=True)

    t = time.perf_counter()
    noop = build(args.storyboard, run=run, size=size, fps=args.fps, jobs=args.jobs, out_dir=work / "fast",
                 cache_dir=work / "fast" / "cache")
    noop_wall = time.perf_counter() - t
    assert noop.clips_rendered == 0 and not noop.assembled, "no-op rebuild did work"
    results["noop_s"] = round(noop_wall, 3)
    print(f"no-op: {noop_wall:7.2f} s", flush=True)

    if not args.skip_naive:
        sb = args.naive_storyboard or args.storyboard
        c, load0 = cpu_seconds(), os.getloadavg()[0]
        naive_wall, naive_video = naive_build(sb, run, work, size, args.fps)
        per = naive_wall / naive_video
        results["naive"] = {"storyboard": str(sb), "wall_s": round(naive_wall, 2), "video_s": round(naive_video, 2),
                            "cpu_s": round(cpu_seconds() - c, 1),
                            "load_avg_1min_before_after": [round(load0, 2), round(os.getloadavg()[0], 2)],
                            "s_per_video_s": round(per, 3)}
        results["speedup"] = round(per / (fast_wall / fast.video_seconds), 2)
        print(f"naive: {naive_wall:7.1f} s for {naive_video:.1f} s of video = {per:.2f} s per video-second", flush=True)
        print(f"speedup (per video-second): {results['speedup']:.2f}x", flush=True)
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
