"""Build a storyboard into a video: resolve -> narrate -> render missing clips -> assemble.

Caching
  * Each clip's key is the sha256 of (scene type, the resolved payload JSON — exactly the data
    the clip shows —, the source of its scene module + theme + payload models + render_clip,
    the manim version, width, height, fps, duration). Clips live in ``<cache>/<key>.mp4``; only
    missing keys are rendered, so after a run folder changes one episode only the clips whose
    payload reads it are rendered again.
  * The final MP4 has a manifest (``<out>/<name>.manifest.json``) listing each shot's scene,
    episodes (``phase``, ``ex_id``; see storyboards/README.md), narration as spoken and the voice
    that spoke it, the MP4's measured loudness, and the hash of every
    assembly input (clip keys, narration WAV keys, captions, timings, assemble.py source,
    ffmpeg binary); a build whose inputs are unchanged skips the encode too.

Rendering runs in ``jobs`` worker processes (spawned, so the parent's threads and imports never
leak into manim), each clip in its own private manim folder (docs/MEASUREMENTS.md: a shared text cache
raced and crashed).

Interrupted builds
  * Nothing outlives the build process: the workers and the assembly's ffmpeg get SIGKILL when
    it dies (Linux ``PR_SET_PDEATHSIG``, ``assemble.die_with_parent``; the workers also exit
    within 0.5 s once re-parented, for other systems), and multiprocessing's resource tracker
    exits once they are gone. KeyboardInterrupt, SIGTERM and SIGHUP (turned into ``SystemExit``
    while a build runs in the main thread) stop the workers at once and delete the temp files.
  * Temp names carry the id of the process writing them: ``.<name>.<pid>.<random>.tmp.mp4``
    (clips in the cache folder, the final video in the output folder) and ``<cache>/work/<pid>/``,
    ``<cache>/work/assemble_<pid>_<random>/``. Every build first deletes those whose process is
    gone (``reap_stale``): what a SIGKILLed build left, never a running build's files.
"""

from __future__ import annotations

import ast
import concurrent.futures as cf
import contextlib
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Callable

from library.errors import DataFileError
from library.jsonl import atomic_write_bytes, atomic_write_json, atomic_write_text
from scenes import assemble as _assemble
from scenes import loudness
from scenes.narration import Speaker, choose_speaker, estimate_seconds, synthesize
from scenes.render_clip import frame_count, render_clip
from scenes.resolve import ResolvedShot, RunData, resolve_shots, resolve_upload
from scenes.storyboard import FORMATS, FPS, Storyboard, load_storyboard

SCENES_DIR = Path(__file__).resolve().parent
LOW_FPS = 15

Progress = Callable[[str, int, int], None]


# --------------------------------------------------------------------------- sizes


def output_size(fmt: str, quality: str) -> tuple[int, int, int]:
    """(width, height, fps) for a format at a quality.

    >>> output_size("short", "high"), output_size("short", "low"), output_size("explainer", "low")
    ((1080, 1920, 30), (480, 854, 15), (854, 480, 15))
    """
    w, h = FORMATS[fmt]
    if quality == "high":
        return w, h, FPS
    if quality != "low":
        raise ValueError(f"unknown quality {quality!r}; use low or high")
    short, long_ = 480, 854  # 854 = 480 * 16 / 9 rounded to even
    return (short, long_, LOW_FPS) if h > w else (long_, short, LOW_FPS)


# --------------------------------------------------------------------------- source hashes


def _scene_modules() -> dict[str, str]:
    """scene type -> module name, read from scenes/registry.py without importing manim.

    The registry imports each scene class from its module and maps type names to
    (class, payload) tuples; parsing its AST keeps the parent process free of manim.
    """
    tree = ast.parse((SCENES_DIR / "registry.py").read_text(encoding="utf-8"))
    cls_module: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("scenes."):
            for alias in node.names:
                cls_module[alias.asname or alias.name] = node.module.split(".", 1)[1]
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        value = getattr(node, "value", None)
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(value, ast.Dict):
            for k, v in zip(value.keys, value.values):
                if isinstance(k, ast.Constant) and isinstance(v, ast.Tuple) and v.elts and isinstance(v.elts[0], ast.Name):
                    if v.elts[0].id in cls_module:
                        out[k.value] = cls_module[v.elts[0].id]
    return out


_SOURCE_CACHE: dict[str, str] = {}


def scene_source_hash(scene_type: str) -> str:
    """sha256 of the code that draws ``scene_type``: its module, the shared theme, the payload
    models and render_clip. Editing one scene invalidates only that scene's clips."""
    if scene_type in _SOURCE_CACHE:
        return _SOURCE_CACHE[scene_type]
    modules = _scene_modules()
    if scene_type not in modules:
        raise ValueError(f"scene type {scene_type!r} is not in scenes/registry.py")
    h = hashlib.sha256()
    for name in (modules[scene_type], "theme", "payloads", "render_clip"):
        path = SCENES_DIR / f"{name}.py"
        h.update(name.encode() + b"\0" + (path.read_bytes() if path.exists() else b"<missing>") + b"\0")
    try:
        h.update(version("manim").encode())
    except Exception:  # noqa: BLE001 - an uninstalled manim fails later, at render time, clearly
        pass
    _SOURCE_CACHE[scene_type] = h.hexdigest()
    return _SOURCE_CACHE[scene_type]


def clip_key(scene: str, payload: dict, width: int, height: int, fps: int, duration: float) -> str:
    blob = json.dumps({"scene": scene, "payload": payload, "source": scene_source_hash(scene), "width": width,
                       "height": height, "fps": fps, "duration": round(float(duration), 4)},
                      sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


# --------------------------------------------------------------------------- plan


@dataclass
class Clip:
    shot: ResolvedShot
    duration: float
    key: str
    path: Path
    narration: Path | None = None
    narration_key: str | None = None


@dataclass
class BuildReport:
    storyboard: str
    output: Path
    width: int
    height: int
    fps: int
    clips_total: int
    clips_rendered: int
    clips_cached: int
    assembled: bool
    video_seconds: float
    stages: dict[str, float] = field(default_factory=dict)
    rendered_shots: list[int] = field(default_factory=list)  # indices of shots whose clip was rendered
    texts: list[str] = field(default_factory=list)  # every caption/narration/payload string (audits)
    speaker: Speaker | None = None  # the voice that spoke
    fallback: str = ""  # why espeak-ng stood in for the storyboard's voice ("" when it did not)
    loudness: dict | None = None  # scenes/loudness.py's measure of the MP4 (None: silent)

    @property
    def seconds(self) -> float:
        return sum(self.stages.values())

    def summary(self) -> str:
        st = ", ".join(f"{k} {v:.1f}s" for k, v in self.stages.items())
        who = (f"voice {self.speaker.engine} {self.speaker.model} {self.speaker.version}"
               + (" (fallback)" if self.fallback else "")) if self.speaker else "no voice"
        level = (f", {self.loudness['integrated_lufs']:.1f} LUFS, true peak {self.loudness['true_peak_dbtp']:.1f} dBTP"
                 + ("" if self.loudness["ok"] else " (OFF TARGET)")) if self.loudness else ""
        return (f"{self.output} ({self.width}x{self.height}@{self.fps}, {self.video_seconds:.1f}s, {who}{level}): "
                f"{self.clips_total} clips, {self.clips_rendered} rendered, {self.clips_cached} cached, "
                f"{'assembled' if self.assembled else 'assembly up to date'} [{st}]")


def _render_worker(scene: str, payload: dict, out: str, width: int, height: int, fps: int, duration: float, work_dir: str) -> str:
    # top-level so the spawned worker can import it; render_clip is atomic (temp + os.replace).
    # The private manim folders go under work/<this worker's pid>/ (see reap_stale).
    return str(render_clip(scene, payload, Path(out), width=width, height=height, fps=fps, duration=duration,
                           work_dir=Path(work_dir) / str(os.getpid())))


# --------------------------------------------------------------------------- interrupted builds


def _worker_init(parent_pid: int) -> None:
    """Pool initializer: the worker dies with the build process ``parent_pid``, even a SIGKILLed one."""
    _assemble.die_with_parent(parent_pid)  # Linux: the kernel sends SIGKILL
    # everywhere (and should the signal not be armed): exit once re-parented
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), name="exit-when-orphaned", daemon=True).start()


def _exit_when_orphaned(parent_pid: int, interval: float = 0.5) -> None:
    while os.getppid() == parent_pid:
        time.sleep(interval)
    os._exit(1)


def _stop_pool(pool: cf.ProcessPoolExecutor) -> None:
    """Stop ``pool`` now: drop the queued clips and end the workers mid-clip (SIGTERM, then
    SIGKILL). ``shutdown`` alone would wait for every clip in flight."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for p in procs:
        p.terminate()
    deadline = time.monotonic() + 5
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()
    pool.shutdown(wait=True, cancel_futures=True)


@contextlib.contextmanager
def _signals_raise_exit():
    """While the body runs in the main thread, SIGTERM and SIGHUP raise ``SystemExit(128 + sig)``
    (where they would otherwise kill the process outright) so that cleanup code runs; a second
    signal kills as before. Handlers someone else installed are left alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        signal.signal(signum, signal.SIG_DFL)
        raise SystemExit(128 + signum)

    old = {}
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) == signal.SIG_DFL:
            old[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


#: temp names written by render_clip and assemble: ``.<stem>.<pid>.<random>.tmp.mp4``, and in
#: ``<cache>/work`` a folder per worker pid or ``assemble_<pid>_<random>``
_TMP_MP4 = re.compile(r"\.(?P<stem>.+)\.(?P<pid>\d+)\.[a-z0-9_]+\.tmp\.mp4")
_WORK_ENTRY = re.compile(r"(?P<pid>\d+)|assemble_(?P<apid>\d+)_[a-z0-9_]+")
#: names from before the pid was in them (assemble's ``.<stem>.<random>.tmp.mp4``, a worker's
#: ``work/clip_<scene>_<random>``): deleted once untouched for LEGACY_STALE_S seconds
_LEGACY_TMP_MP4 = re.compile(r"\.(?P<stem>.+)\.[a-z0-9_]{8}\.tmp\.mp4")
_LEGACY_WORK_ENTRY = re.compile(r"clip_\w+_[a-z0-9_]{8}")
LEGACY_STALE_S = 3600


def _pid_alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill(pid, 0) would terminate it there: never call a pid dead
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: someone else's process
        return True
    try:  # Linux: a zombie nobody has reaped yet is gone too
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True


def _untouched_for(path: Path, seconds: float) -> bool:
    try:
        newest = max([path.stat().st_mtime] + [p.stat().st_mtime for p in path.rglob("*")] if path.is_dir()
                     else [path.stat().st_mtime])
    except OSError:
        return False
    return time.time() - newest > seconds


def _kill_encoders_writing(paths: list[Path]) -> None:
    """SIGKILL ffmpeg processes whose command line writes one of ``paths`` (temp videos whose
    build is gone). On Linux they died with it; elsewhere a killed build's encoder runs on."""
    if not paths or os.name == "nt":
        return
    names = [str(p.absolute()) for p in paths]
    try:
        listing = subprocess.run(["ps", "-A", "-ww", "-o", "pid=,args="], capture_output=True, text=True,
                                 timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return
    for line in listing.splitlines():
        pid, _, args = line.strip().partition(" ")
        exe = args.split(" ", 1)[0].rsplit("/", 1)[-1]
        if exe.startswith("ffmpeg") and any(args.rstrip().endswith(n) for n in names):
            with contextlib.suppress(ValueError, OSError):
                os.kill(int(pid), signal.SIGKILL)


def reap_stale(*folders: str | Path) -> list[Path]:
    """Delete the temp files and folders that killed builds left in ``folders`` (output and
    clip-cache folders) and return them. Only this package's temp names qualify, and only
    those whose writing process is gone, so a build running beside this one keeps its files."""
    stale: list[Path] = []
    for folder in map(Path, folders):
        if not folder.is_dir():
            continue
        orphans = []
        for f in folder.iterdir():
            if m := _TMP_MP4.fullmatch(f.name):
                if not _pid_alive(int(m["pid"])):
                    orphans.append(f)
            elif _LEGACY_TMP_MP4.fullmatch(f.name) and _untouched_for(f, LEGACY_STALE_S):
                stale.append(f)
        _kill_encoders_writing(orphans)
        stale += orphans
        work = folder / "work"
        if work.is_dir():
            for d in work.iterdir():
                if m := _WORK_ENTRY.fullmatch(d.name):
                    if not _pid_alive(int(m["pid"] or m["apid"])):
                        stale.append(d)
                elif _LEGACY_WORK_ENTRY.fullmatch(d.name) and _untouched_for(d, LEGACY_STALE_S):
                    stale.append(d)
    for p in stale:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return stale


def _file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Prepared:
    """A storyboard resolved against a run, narrated and timed: everything before rendering."""

    sb: Storyboard
    data: RunData
    shots: list[ResolvedShot]
    durations: list[float]
    narrations: list  # Narration | None per shot
    width: int
    height: int
    fps: int
    stages: dict[str, float]
    speaker: Speaker | None = None  # the voice that spoke (None: --no-voice, or nothing to say)
    fallback: str = ""  # why the storyboard's voice could not speak, when espeak-ng stood in


def prepare(
    storyboard: str | Path | Storyboard,
    *,
    run: str | Path | None = None,
    kg: str | Path | None = None,
    questions: str | Path | None = None,
    quality: str = "high",
    size: tuple[int, int] | None = None,
    fps: int | None = None,
    voice: bool = True,
    cache_dir: str | Path = Path("renders/cache"),
    progress: Progress | None = None,
) -> Prepared:
    """Load, resolve, synthesise narration and fix every shot's duration (no rendering)."""
    stages: dict[str, float] = {}
    t0 = time.perf_counter()
    note = progress or (lambda stage, done, total: None)
    cache = Path(cache_dir)

    sb = storyboard if isinstance(storyboard, Storyboard) else load_storyboard(storyboard)
    width, height, rate = output_size(sb.format, quality)
    if size is not None:
        width, height = size
    rate = fps or rate
    data = RunData.load(run or sb.run, kg=kg, questions=questions, kg_default=sb.kg, questions_default=sb.questions)
    shots = resolve_shots(sb, data)
    if not shots:
        # said here, in the storyboard's terms, rather than by the assembler much later
        raise sb.fail(("shots",), f"every shot was skipped (their when: conditions are false for run "
                                  f"{data.path}); nothing to render")
    stages["resolve"] = time.perf_counter() - t0

    # ---- narration first: it sets the length of `duration: narration` shots
    t = time.perf_counter()
    v = sb.voice
    said = [s for s in shots if s.narration]
    who, fallback = choose_speaker(v.engine, v.voice, v.speed) if voice and said else (None, "")
    narrations: list = []
    for s in shots:
        if who is not None and s.narration:
            # the words as a person says them; the caption keeps the written form
            narrations.append(synthesize(s.spoken, cache / "voice", who=who))
            note("narration", len([n for n in narrations if n]), len(said))
        else:
            narrations.append(None)
    durations = []
    for i, (s, n) in enumerate(zip(shots, narrations)):
        speech = n.seconds if n else (estimate_seconds(s.narration, v.speed) if s.narration else None)
        if s.duration is None and speech is None:
            raise sb.fail(("shots", s.index, "duration"), "duration: narration needs narration text")
        durations.append(s.final_duration(speech, first=i == 0, last=i == len(shots) - 1))
    # a Short over 60 s fails here, before any clip is rendered
    sb.check_short_length(durations)
    stages["narration"] = time.perf_counter() - t
    return Prepared(sb, data, shots, durations, narrations, width, height, rate, stages, who, fallback)


def build(
    storyboard: str | Path | Storyboard,
    *,
    run: str | Path | None = None,
    kg: str | Path | None = None,
    questions: str | Path | None = None,
    quality: str = "high",
    size: tuple[int, int] | None = None,
    fps: int | None = None,
    jobs: int = 2,
    voice: bool = True,
    out_dir: str | Path = "renders",
    cache_dir: str | Path | None = None,
    preset: str = "veryfast",
    progress: Progress | None = None,
) -> BuildReport:
    """Build one storyboard. ``size``/``fps`` override the quality preset (tests use tiny sizes)."""
    note = progress or (lambda stage, done, total: None)
    out_dir = Path(out_dir)
    cache = Path(cache_dir) if cache_dir is not None else out_dir / "cache"
    # first delete what earlier, killed builds left (temp videos, work folders)
    reap_stale(out_dir, cache)
    with _signals_raise_exit():
        prep = prepare(storyboard, run=run, kg=kg, questions=questions, quality=quality, size=size, fps=fps,
                       voice=voice, cache_dir=cache, progress=progress)
        sb, data, shots, durations, narrations = prep.sb, prep.data, prep.shots, prep.durations, prep.narrations
        width, height, rate, stages = prep.width, prep.height, prep.fps, prep.stages

        # ---- clips
        t = time.perf_counter()
        clips = []
        for s, d, n in zip(shots, durations, narrations):
            key = clip_key(s.scene, s.payload, width, height, rate, d)
            clips.append(Clip(s, d, key, cache / f"{key}.mp4", n.path if n else None, n.key if n else None))
        missing: dict[str, Clip] = {}
        for c in clips:
            if not c.path.exists() and c.key not in missing:
                missing[c.key] = c
        rendered_shots = [c.shot.index for c in clips if c.key in missing]
        if missing:
            cache.mkdir(parents=True, exist_ok=True)
            work = cache / "work"
            note("clips", 0, len(missing))
            ctx = multiprocessing.get_context("spawn")
            pool = cf.ProcessPoolExecutor(max_workers=max(1, min(jobs, len(missing))), mp_context=ctx,
                                          initializer=_worker_init, initargs=(os.getpid(),))
            try:
                # longest clips first: with few workers the last clip to start decides the wall time
                order = sorted(missing.values(), key=lambda c: (-c.duration, c.shot.index))
                futures = {pool.submit(_render_worker, c.shot.scene, c.shot.payload, str(c.path), width, height, rate,
                                       c.duration, str(work)): c for c in order}
                done = 0
                for fut in cf.as_completed(futures):
                    c = futures[fut]
                    try:
                        fut.result()
                    except Exception as exc:
                        # the clips in flight finish (and stay cached); the queued ones never start
                        pool.shutdown(wait=True, cancel_futures=True)
                        raise RuntimeError(f"{sb.source}:{c.shot.line}: shot {c.shot.index + 1} ({c.shot.scene}) "
                                           f"failed to render: {exc}") from exc
                    done += 1
                    note("clips", done, len(missing))
                pool.shutdown(wait=True)
            finally:
                # after KeyboardInterrupt / SIGTERM (SystemExit): end the workers mid-clip; a no-op
                # once the pool is shut down. Then delete their folders and any temp clip they left.
                try:
                    _stop_pool(pool)
                finally:
                    reap_stale(cache)
        stages["clips"] = time.perf_counter() - t

        # ---- assembly (skipped when the manifest says the output is up to date)
        t = time.perf_counter()
        plan = _assemble.Plan(
            [_assemble.ShotMedia(c.path, frame_count(c.duration, rate) / rate, c.shot.caption, c.narration) for c in clips],
            width, height, rate)
        out = out_dir / f"{sb.name}.mp4"
        manifest_path = out_dir / f"{sb.name}.manifest.json"
        final_key = hashlib.sha256(json.dumps({
            "clips": [c.key for c in clips], "voice": [c.narration_key for c in clips],
            "captions": [c.shot.caption for c in clips], "starts": plan.starts, "total": plan.total,
            "size": [width, height, rate], "preset": preset,
            "assemble": _file_sha(Path(_assemble.__file__)), "loudness": _file_sha(Path(loudness.__file__)),
            "ffmpeg": _assemble.ffmpeg_exe(),
        }, sort_keys=True).encode()).hexdigest()
        assembled = False
        if not _up_to_date(out, manifest_path, final_key):
            note("assemble", 0, 1)
            _assemble.assemble(plan, out, work_dir=cache / "work", preset=preset,
                               on_progress=lambda d, tot: note("assemble", int(d * 100), int(tot * 100)))
            assembled = True
            # measured on the MP4 itself, as a platform would (a skipped encode keeps the last measure)
            level = loudness.measure(out).record() if prep.speaker is not None else None
        else:
            level = json.loads(manifest_path.read_text(encoding="utf-8")).get("loudness")
        # written on every build (atomically), so the shot list always describes this run's
        # episodes even when the encode was skipped: anyone can trace a frame to its log line
        atomic_write_json(manifest_path, render_manifest(final_key, sb, data, out, clips, plan, prep, level))
        stages["assemble"] = time.perf_counter() - t
        t = time.perf_counter()
        publish(sb, data, out, clips, plan, refresh=assembled, who=prep.speaker, fallback=prep.fallback)
        stages["publish"] = time.perf_counter() - t

        texts = [x for s in shots for x in s.texts]
        return BuildReport(sb.source, out, width, height, rate, len(clips), len(missing), len(clips) - len(rendered_shots),
                           assembled, plan.total, stages, rendered_shots, texts, prep.speaker, prep.fallback, level)


def upload_text(texts: dict[str, str], clips: list[Clip], starts: list[float], credit: str = "") -> str:
    """The upload text: title, description, the voice's credit line and, where shots name
    chapters, YouTube chapters (``M:SS title`` at each chaptered shot's start; the first is moved
    to 0:00 as YouTube wants).

    >>> from types import SimpleNamespace as S
    >>> clips = [S(shot=S(chapter="Intro")), S(shot=S(chapter=None)), S(shot=S(chapter="The reward"))]
    >>> print(upload_text({"title": "T", "description": "D"}, clips, [0.4, 10.0, 75.5], "Voice: hibari"))
    T
    <BLANKLINE>
    D
    <BLANKLINE>
    Voice: hibari
    <BLANKLINE>
    Chapters
    0:00 Intro
    1:15 The reward
    <BLANKLINE>
    """
    lines = [texts["title"], "", texts["description"]] + (["", credit] if credit else [])
    chapters = [(start, c.shot.chapter) for c, start in zip(clips, starts) if c.shot.chapter]
    if chapters:
        lines += ["", "Chapters"]
        for k, (start, title) in enumerate(chapters):
            seconds = 0 if k == 0 else int(start)
            lines.append(f"{seconds // 60}:{seconds % 60:02d} {title}")
    return "\n".join(lines) + "\n"


THUMBNAIL_AT = 0.8  # where in the thumbnail shot its frame is taken (share of the shot)
THUMBNAIL_LINE_CHARS = 22  # a headline line wraps before this many characters (large type on a phone)


def headline_lines(text: str, width: int) -> list[str]:
    """``text`` wrapped at spaces into lines of at most ``width`` characters (a longer word
    keeps its own line).

    >>> headline_lines("Base 0% → SFT 79% → RSFT 84% → GRPO 84%", 22)
    ['Base 0% → SFT 79% →', 'RSFT 84% → GRPO 84%']
    """
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def voice_credit(who: Speaker | None, fallback: str = "") -> str:
    """The upload text's line about the voice that spoke, saying so when espeak-ng stood in.

    >>> voice_credit(Speaker("hibari", "heart", "0.2.1"))
    'Voice: hibari (Apache-2.0), distilled from Kokoro-82M (Apache-2.0)'
    >>> voice_credit(Speaker("espeak-ng", "en-us", "1.51"), "no hibari")
    'Voice: eSpeak NG (GPL-3.0, run as a separate program), standing in for hibari, which could not load'
    """
    if who is None:
        return ""
    return who.credit + (", standing in for hibari, which could not load" if fallback else "")


def publish(sb: Storyboard, data: RunData, out: Path, clips: list[Clip], plan, *, refresh: bool,
            who: Speaker | None = None, fallback: str = "") -> None:
    """Beside the MP4: ``<name>.upload.txt`` (with the voice's credit line) and
    ``<name>.thumbnail.png`` (the middle frame of the storyboard's thumbnail shot with its
    headline), when the storyboard has an ``upload`` section. Both are rewritten atomically; the
    thumbnail is extracted again when the video was re-encoded or the headline changed."""
    texts = resolve_upload(sb, data)
    if texts is None:
        return
    atomic_write_text(out.with_suffix(".upload.txt"), upload_text(texts, clips, plan.starts, voice_credit(who, fallback)))
    thumb = out.with_suffix(".thumbnail.png")
    stamp = out.parent / f".{out.stem}.thumbnail.key"  # what the thumbnail was drawn from
    key = hashlib.sha256(json.dumps([out.stat().st_size, texts["headline"], sb.upload.thumbnail_shot,
                                     _file_sha(Path(__file__))]).encode()).hexdigest()  # and how it is drawn
    if not refresh and thumb.exists() and stamp.exists() and stamp.read_text(encoding="utf-8") == key:
        return
    wanted = sb.upload.thumbnail_shot - 1
    k = next((j for j, c in enumerate(clips) if c.shot.index >= wanted), 0)  # a skipped shot: the next one
    at = plan.starts[k] + clips[k].duration * THUMBNAIL_AT  # late in the shot: its animation has played
    lines = headline_lines(texts["headline"], THUMBNAIL_LINE_CHARS)
    with tempfile.TemporaryDirectory(prefix="kgr-thumbnail-") as tmp:
        frame = Path(tmp) / "thumb.png"
        headline = Path(tmp) / "headline.txt"
        headline.write_text("\n".join(lines), encoding="utf-8")  # a text file: no drawtext escaping
        # as large as fits: DejaVu Sans Bold with digits, "%" and arrows is ~0.75 em a character
        longest = max((len(line) for line in lines), default=1)
        size = max(16, round(min(plan.height * 0.06, 0.86 * plan.width / (0.75 * longest))))
        draw = (f"drawtext=fontfile={_assemble.FONT_DIR / 'DejaVuSans-Bold.ttf'}:textfile={headline}:expansion=none:"
                f"fontsize={size}:line_spacing={size // 4}:fontcolor=white:box=1:boxcolor=black@0.92:"
                f"boxborderw={size // 2}:x=(w-text_w)/2:y=h*0.04")
        cmd = [_assemble.ffmpeg_exe(), "-v", "error", "-y", "-ss", f"{at:.3f}", "-i", str(out), "-frames:v", "1",
               *(["-vf", draw] if texts["headline"] else []), str(frame)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0 or not frame.exists():
            raise RuntimeError(f"thumbnail of {out} failed: {proc.stderr[-500:]}")
        atomic_write_bytes(thumb, frame.read_bytes())
    atomic_write_text(stamp, key)


def render_manifest(key: str, sb: Storyboard, data: RunData, out: Path, clips: list[Clip], plan,
                    prep: Prepared | None = None, level: dict | None = None) -> dict:
    """``<out>/<name>.manifest.json``: the assembly key (for skipping the encode), the voice and
    the MP4's loudness, and per shot its scene, start time, the episodes it shows (``phase``,
    ``ex_id``, ``role``), the narration as spoken and the voice that spoke it, so that a
    listener's check (``python -m scenes.listen``) runs from the files alone."""
    who = prep.speaker.record() if prep is not None and prep.speaker is not None else None
    shots = []
    narrations = prep.narrations if prep is not None else [None] * len(clips)
    for i, (c, start, n) in enumerate(zip(clips, plan.starts, narrations)):
        entry = {**c.shot.manifest_entry(), "start": round(start, 3), "clip": c.key}
        if c.shot.narration:
            # where the words are in the video: after the shot's fade in
            entry.update(narration=c.shot.spoken, voice=who if n is not None else None,
                         speech_start=round(plan.faded_in(i), 3),
                         speech_seconds=round(n.seconds, 3) if n is not None else None)
        shots.append(entry)
    return {"key": key, "storyboard": sb.source, "run": str(data.path), "run_id": data.run_id,
            "size": out.stat().st_size, "clips": [c.key for c in clips], "seconds": plan.total,
            "voice": who, "voice_fallback": prep.fallback if prep is not None else "",
            "loudness": level, "shots": shots}


def _up_to_date(out: Path, manifest: Path, key: str) -> bool:
    if not out.exists() or not manifest.exists():
        return False
    try:
        m = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return m.get("key") == key and m.get("size") == out.stat().st_size


__all__ = ["build", "BuildReport", "clip_key", "output_size", "DataFileError"]
