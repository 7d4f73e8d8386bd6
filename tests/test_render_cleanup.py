"""A killed render leaves nothing running, and no temp file once the next render has started.

Each case starts a real render (``python -m scenes.cli render``, the command ``kgr render``
runs) of a four-shot title storyboard over the fixture run at ``--quality low`` (the CLI's
smallest size; title clips take about a second each), kills it at a chosen moment, and then
looks for every process that inherited a marker the test put in its environment: the render,
its pool workers, multiprocessing's resource tracker, the assembly's ffmpeg. A render killed
mid-assembly is held there by a test-only knob that makes ffmpeg read its inputs at real time
(``scenes.assemble.READRATE_ENV``). About 20 s on 2 cores.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.video, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[1]
MARK = "KGR_RENDER_CLEANUP_TEST_MARK"  # read by nobody: it only labels the processes of one render
GONE_WITHIN_S = 5.0  # how soon after the kill every process of the render must be gone

STORYBOARD = """\
title: cleanup test
format: short
shots:
""" + "".join(f"""\
  - scene: title
    params: {{title: "shot {i}"}}
    duration: 4
    caption: "{{caption}}"
""" for i in range(4))


@pytest.fixture
def render_env(tmp_path, fixture_run):
    pytest.importorskip("manim")
    if not Path("/proc/self/environ").exists():
        pytest.skip("finds the render's processes through /proc")
    from conftest import TINY_KG

    (fixture_run.path / "kg.json").write_text(json.dumps(TINY_KG))  # the per-run KG override
    sb = tmp_path / "cleanup.yaml"
    sb.write_text(STORYBOARD.replace("{caption}", "first version"))
    marks: list[str] = []
    yield {"sb": sb, "run": fixture_run.path, "out": tmp_path / "out", "marks": marks, "tmp": tmp_path}
    for mark in marks:  # whatever a failing case left running (only processes carrying our marker)
        for pid, _ in marked(mark):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def marked(mark: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live process whose environment carries ``mark``."""
    want = f"{MARK}={mark}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if want not in (d / "environ").read_bytes().split(b"\0"):
                continue
            if (d / "stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                continue  # exited, not yet reaped
            found.append((int(d.name), (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")))
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
    return found


def start(s: dict, **env) -> tuple[subprocess.Popen, str]:
    mark = uuid.uuid4().hex
    s["marks"].append(mark)
    cmd = [sys.executable, "-m", "scenes.cli", "render", str(s["sb"]), "--run", str(s["run"]), "--quality", "low",
           "--no-voice", "--jobs", "2", "--out", str(s["out"])]
    with (s["tmp"] / f"render-{mark[:8]}.log").open("w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, MARK: mark, **env}, stdout=log,
                                stderr=subprocess.STDOUT)
    return proc, mark


def render(s: dict) -> None:
    proc, mark = start(s)
    rc = proc.wait(timeout=180)
    log = (s["tmp"] / f"render-{mark[:8]}.log").read_text()
    assert rc == 0, log
    assert gone(mark) == [], "a finished render left processes"


def wait_for(what: str, cond, proc: subprocess.Popen, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, f"the render ended (rc {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} after {timeout:.0f} s"
        time.sleep(0.05)


def gone(mark: str, within: float = GONE_WITHIN_S) -> list[tuple[int, str]]:
    """Wait up to ``within`` seconds for the marked processes to end; return those still running."""
    deadline = time.monotonic() + within
    while (left := marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def leftovers(out: Path) -> list[str]:
    """Temp videos anywhere under ``out`` and anything in the clip cache's work folder."""
    found = list(out.rglob("*.tmp.mp4"))
    work = out / "cache" / "work"
    if work.is_dir():
        found += list(work.iterdir())
    return sorted(str(p.relative_to(out)) for p in found)


def clip_rendering(out: Path):
    return lambda: (out / "cache" / "work").is_dir() and any((out / "cache" / "work").rglob("clip_*"))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_sigkill_while_clips_render_leaves_no_process_and_the_next_render_no_temp_file(render_env):
    s, out = render_env, render_env["out"]
    proc, mark = start(s)
    wait_for("clip being rendered", clip_rendering(out), proc)
    assert sum("multiprocessing" in cmd for _, cmd in marked(mark)) >= 2  # pool workers + resource tracker
    proc.kill()
    proc.wait()
    t0 = time.monotonic()
    left = gone(mark)
    assert left == [], f"still running {time.monotonic() - t0:.1f} s after SIGKILL: {left}"
    assert leftovers(out), "the killed worker's clip folder should be there for the next render to delete"
    render(s)
    assert leftovers(out) == []
    assert (out / "cleanup.mp4").stat().st_size > 0


def test_sigterm_while_clips_render_stops_at_once_and_deletes_temp_files(render_env):
    s, out = render_env, render_env["out"]
    proc, mark = start(s)
    wait_for("clip being rendered", clip_rendering(out), proc)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=20)  # the workers are stopped mid-clip, not waited for
    assert rc == 128 + signal.SIGTERM
    assert gone(mark) == []
    assert leftovers(out) == []
    assert not (out / "cleanup.mp4").exists()


def test_kill_during_assembly_keeps_the_old_video_and_leaves_nothing(render_env):
    s, out = render_env, render_env["out"]
    render(s)
    final = out / "cleanup.mp4"
    before = sha(final)
    s["sb"].write_text(STORYBOARD.replace("{caption}", "second version"))  # same clips, new assembly

    def assembling(mark: str):
        # ffmpeg runs and has written into its temp file
        return lambda: (any("ffmpeg" in cmd for _, cmd in marked(mark))
                        and any(p.stat().st_size > 0 for p in out.glob(".cleanup.*.tmp.mp4")))

    slow = {"KGR_TEST_ASSEMBLE_READRATE": "1"}  # scenes.assemble.READRATE_ENV: ffmpeg at real time
    # SIGTERM: the render kills ffmpeg and deletes its temp files before it exits
    proc, mark = start(s, **slow)
    wait_for("ffmpeg writing the video", assembling(mark), proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    assert gone(mark) == []
    assert leftovers(out) == []
    assert sha(final) == before

    # SIGKILL: ffmpeg dies with the render; its temp file waits for the next render
    proc, mark = start(s, **slow)
    wait_for("ffmpeg writing the video", assembling(mark), proc)
    proc.kill()
    proc.wait()
    t0 = time.monotonic()
    left = gone(mark)
    assert left == [], f"still running {time.monotonic() - t0:.1f} s after SIGKILL: {left}"
    assert sha(final) == before  # never a truncated final video
    assert any(name.endswith(".tmp.mp4") for name in leftovers(out))
    render(s)
    assert leftovers(out) == []
    assert sha(final) != before and final.stat().st_size > 0


def test_reap_stale_takes_only_what_a_dead_process_left(tmp_path):
    from scenes.build import reap_stale

    done = subprocess.Popen(["true"])
    done.wait()
    dead, live = done.pid, os.getpid()  # a pid that just ended, and a running one (a build beside ours)
    out, work = tmp_path, tmp_path / "work"
    work.mkdir()
    stale = [out / f".short.{dead}.ab_12xyz.tmp.mp4", out / f".{'e' * 64}.{dead}.0123abcd.tmp.mp4",
             work / str(dead), work / f"assemble_{dead}_k2j4h5g6"]
    kept = [out / f".short.{live}.ab_12xyz.tmp.mp4", work / str(live), work / f"assemble_{live}_k2j4h5g6",
            out / "short.mp4", out / ".short.naive.tmp.mp4", out / "notes.tmp.mp4",
            out / ".short.a1b2c3d4.tmp.mp4"]  # the pid-less name of older builds: only once an hour old
    for p in stale + kept:
        p.mkdir() if p.parent == work else p.write_bytes(b"x")
    (work / str(dead) / "clip_title_abcdefgh").mkdir()
    # an encoder still writing a dead build's temp video (where ffmpeg cannot die with its parent)
    fake = tmp_path / "ffmpeg-fake"
    fake.symlink_to(sys.executable)
    encoder = subprocess.Popen([str(fake), "-c", "import time; time.sleep(60)", str(stale[0])])
    try:
        assert sorted(reap_stale(out)) == sorted(stale)
        assert encoder.wait(timeout=5) == -signal.SIGKILL
    finally:
        encoder.kill()
    assert [p for p in stale if p.exists()] == [] and all(p.exists() for p in kept)
