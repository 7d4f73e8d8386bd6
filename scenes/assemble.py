"""Assembly: the rendered clips + narration + captions -> one MP4, in ONE ffmpeg command.

docs/MEASUREMENTS.md measured MoviePy compositing of a 60 s 1080x1920 Short at 358 s against 34.6 s for
a single ffmpeg command, so the fast path builds a filtergraph instead of compositing frames
in Python:

* ``xfade`` crossfades between consecutive clips (``XFADE_SECONDS``), so shot k starts at
  ``sum(d[:k]) - k * xfade``;
* captions are an ASS subtitle file burned in with libass (large DejaVu Sans, outlined, in
  the bottom third, in the band portrait scenes leave free), wrapped by us at word boundaries and
  paged two lines at a time;
* each narration WAV is delayed to its shot's start (``adelay``) and the tracks are mixed
  (``amix``; silence when there is no narration, so the file always has an audio stream), then
  brought to -14 LUFS with peaks under -1 dBTP: a first audio-only pass measures the mix, the
  encode applies the missing gain and a peak limiter (``scenes/loudness.py``);
* H.264 yuv420p + AAC with ``+faststart``, written to a temporary file in the output folder
  (``.<name>.<pid>.<random>.tmp.mp4``, ``<pid>`` = the process running ``assemble``) and
  ``os.replace``-d into place: an interrupted render never leaves a truncated MP4 at the
  final path. On an exception (KeyboardInterrupt included) ffmpeg is killed and the temp file
  deleted; on Linux ffmpeg also dies with its parent (``die_with_parent``), so a SIGKILLed
  render leaves only the temp file, which the next build deletes (``scenes.build.reap_stale``).

The binary is imageio-ffmpeg's static ffmpeg (it has xfade and libass). The naive MoviePy
path (``assemble_naive``) exists only for ``benchmarks/render.py``.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from scenes import loudness
from scenes.ffmpeg import ffmpeg_exe
from scenes.storyboard import XFADE_SECONDS

FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
FONT_FILE = FONT_DIR / "DejaVuSans.ttf"
AUDIO_RATE = 48000
ASS_NEWLINE = r"\N"  # a hard line break inside an ASS Dialogue text


@dataclass
class ShotMedia:
    clip: Path
    seconds: float  # exact clip length (frames / fps)
    caption: str = ""
    audio: Path | None = None


@dataclass
class Plan:
    """The timeline: where every shot, caption page and narration track starts."""

    shots: list[ShotMedia]
    width: int
    height: int
    fps: int
    xfade: float = XFADE_SECONDS
    starts: list[float] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.shots:
            raise ValueError("nothing to assemble: no shots")
        # a crossfade cannot be longer than the shorter of the two clips it joins
        shortest = min(s.seconds for s in self.shots)
        self.xfade = min(self.xfade, shortest / 2) if len(self.shots) > 1 else 0.0
        t, self.starts = 0.0, []
        for s in self.shots:
            self.starts.append(round(t, 4))
            t += s.seconds - self.xfade
        self.total = round(t + self.xfade, 4)

    def end_of(self, i: int) -> float:
        return self.starts[i] + self.shots[i].seconds - (self.xfade if i + 1 < len(self.shots) else 0.0)

    def faded_in(self, i: int) -> float:
        """When shot ``i`` has faded in (the first shot has no fade): where its narration and its
        captions start, so that no crossfade covers a word.

        >>> plan = Plan([ShotMedia(Path("a.mp4"), 4.0), ShotMedia(Path("b.mp4"), 4.0)], 480, 854, 15)
        >>> plan.starts, plan.faded_in(0), plan.faded_in(1)
        ([0.0, 3.7], 0.0, 4.0)
        """
        return self.starts[i] + (self.xfade if i else 0.0)


# --------------------------------------------------------------------------- captions


@dataclass
class CaptionStyle:
    font_size: int
    outline: int
    margin_h: int
    margin_v: int
    max_chars: int


#: Caption geometry as fractions of the frame height, (portrait, landscape). The scenes' layout
#: (theme.layout_for) keeps the band these captions occupy free, so both read them from here.
CAPTION_FONT = (0.036, 0.046)  # 69 px on 1080x1920, 50 px on 1920x1080
# portrait: the two-line block sits low in the bottom third, above the phone's own bottom bar
CAPTION_MARGIN_V = (0.13, 0.05)
CAPTION_LINES = 2  # lines per caption page (caption_pages)
#: line height per font size: libass scales a font so that an ASS Fontsize is its ascender
#: plus descender, i.e. one line (measured: a two-line page at 1080x1920 lights rows 1542-1656)
CAPTION_LINE_EM = 1.0
CAPTION_OUTLINE_EM = 0.08


def caption_style(width: int, height: int) -> CaptionStyle:
    i = 0 if height > width else 1
    fs = round(height * CAPTION_FONT[i])
    margin_h = round(width * 0.07)
    # DejaVu Sans averages ~0.55 em per character; wrap before the text could reach a margin
    max_chars = max(12, int((width - 2 * margin_h) / (0.56 * fs)))
    margin_v = round(height * CAPTION_MARGIN_V[i])
    return CaptionStyle(fs, max(2, round(fs * CAPTION_OUTLINE_EM)), margin_h, margin_v, max_chars)


def caption_block_top(portrait: bool) -> float:
    """How high a full caption page (CAPTION_LINES lines and their outline) reaches, as a
    fraction of the frame height measured from the bottom edge.

    >>> round(caption_block_top(True), 3)  # 1080x1920: the block's top edge is 393 px above the bottom
    0.205
    >>> caption_block_top(True) < 1 / 3  # inside the bottom third
    True
    """
    i = 0 if portrait else 1
    return CAPTION_MARGIN_V[i] + CAPTION_FONT[i] * (CAPTION_LINES * CAPTION_LINE_EM + CAPTION_OUTLINE_EM)


def caption_pages(text: str, max_chars: int, lines_per_page: int = CAPTION_LINES) -> list[list[str]]:
    """Word-wrapped caption pages (never breaking a word) of at most ``lines_per_page`` lines.

    Whole sentences are packed onto a page while they fit, so a page rarely ends mid-sentence;
    a sentence longer than a page is split across pages at line breaks.

    >>> caption_pages("5 hops. Before: check the clock offset. After GRPO: restart the service.", 26)
    [['5 hops. Before: check the', 'clock offset.'], ['After GRPO: restart the', 'service.']]
    >>> caption_pages("accuracy rose from 33% to 100% on four-hop questions", 20)
    [['accuracy rose from', '33% to 100% on'], ['four-hop questions']]
    """
    def wrap(t: str) -> list[str]:
        return textwrap.wrap(t, width=max_chars, break_long_words=False, break_on_hyphens=False)

    sentences = re.split(r"(?<=[.!?])\s+", " ".join(text.split()))
    pages: list[list[str]] = []
    chunk = ""
    for sentence in filter(None, sentences):
        joined = f"{chunk} {sentence}".strip()
        if len(wrap(joined)) <= lines_per_page:
            chunk = joined
            continue
        if chunk:
            pages.append(wrap(chunk))
        lines = wrap(sentence)
        while len(lines) > lines_per_page:  # a sentence longer than one page
            pages.append(lines[:lines_per_page])
            lines = lines[lines_per_page:]
        chunk = " ".join(lines)
    if chunk:
        pages.append(wrap(chunk))
    return _no_orphan_pages(pages, wrap)


def _no_orphan_pages(pages: list[list[str]], wrap) -> list[list[str]]:
    """Never a page of one word ("reason?" alone): words move from the page before it, which
    keeps its lines, until the short page holds at least two (or the page before would empty).

    >>> w = lambda t: __import__("textwrap").wrap(t, 12)
    >>> _no_orphan_pages([["a b c d e f", "g h i j k l"], ["measurable"]], w)
    [['a b c d e f', 'g h i j k'], ['l measurable']]
    """
    for i in range(1, len(pages)):
        words = " ".join(pages[i]).split()
        before = " ".join(pages[i - 1]).split()
        while len(words) < 2 and len(before) > 2:
            moved = [before.pop()] + words
            if len(wrap(" ".join(moved))) > len(pages[i]) + (1 if len(pages[i]) < CAPTION_LINES else 0):
                break
            words = moved
        pages[i - 1], pages[i] = wrap(" ".join(before)), wrap(" ".join(words))
    return pages


def _ass_time(t: float) -> str:
    cs = max(0, round(t * 100))
    return f"{cs // 360000}:{cs // 6000 % 60:02d}:{cs // 100 % 60:02d}.{cs % 100:02d}"


def _ass_escape(s: str) -> str:
    # braces start override blocks and a backslash starts a tag in ASS
    return s.replace("\\", "\u2216").replace("{", "(").replace("}", ")")


def caption_events(plan: Plan) -> list[tuple[float, float, list[str]]]:
    """(start, end, lines) for every caption page; a shot's pages share its time by length."""
    style = caption_style(plan.width, plan.height)
    events = []
    for i, shot in enumerate(plan.shots):
        pages = caption_pages(shot.caption, style.max_chars)
        if not pages:
            continue
        start, end = plan.faded_in(i), plan.end_of(i)
        weights = [sum(len(line) for line in p) + 8 for p in pages]
        t = start
        for page, w in zip(pages, weights):
            dt = (end - start) * w / sum(weights)
            events.append((t, t + dt, page))
            t += dt
    return events


def write_ass(plan: Plan, path: Path) -> Path:
    s = caption_style(plan.width, plan.height)
    head = f"""[Script Info]
ScriptType: v4.00+
PlayResX: {plan.width}
PlayResY: {plan.height}
WrapStyle: 2
ScaledBorderAndShadow: yes

[V4+ Styles]
Format: Name, Fontname, Fontsize, PrimaryColour, SecondaryColour, OutlineColour, BackColour, Bold, Italic, Underline, StrikeOut, ScaleX, ScaleY, Spacing, Angle, BorderStyle, Outline, Shadow, Alignment, MarginL, MarginR, MarginV, Encoding
Style: Caption,DejaVu Sans,{s.font_size},&H00FFFFFF,&H000000FF,&H00101010,&H96000000,-1,0,0,0,100,100,0,0,1,{s.outline},{max(1, s.outline // 2)},2,{s.margin_h},{s.margin_h},{s.margin_v},1

[Events]
Format: Layer, Start, End, Style, Name, MarginL, MarginR, MarginV, Effect, Text
"""
    body = "".join(
        f"Dialogue: 0,{_ass_time(a)},{_ass_time(b)},Caption,,0,0,0,,{ASS_NEWLINE.join(_ass_escape(x) for x in lines)}\n"
        for a, b, lines in caption_events(plan)
    )
    path.write_text(head + body, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- ffmpeg


def _filter_path(p: Path) -> str:
    # filtergraph option values: escape the characters the parser treats specially
    s = str(p)
    for ch in ("\\", ":", "'", ",", "[", "]", ";"):
        s = s.replace(ch, "\\" + ch)
    return s


#: Test-only knob (tests/test_render_cleanup.py): when set, ffmpeg reads every input at this
#: multiple of real time (``-readrate``), so an encode lasts about the video's length and a test
#: can kill a render mid-assembly; never set in normal use.
READRATE_ENV = "KGR_TEST_ASSEMBLE_READRATE"


def audio_graph(plan: Plan, first_input: int, audio_filter: str = "", *, pad: bool = True) -> list[str]:
    """The filters that lay each shot's narration at its start and mix them into ``[aout]``
    (inputs from ``first_input`` on, one per narrated shot); ``audio_filter`` (the loudness
    gain, ``scenes/loudness.py``) is applied to the mix, and ``pad`` pads it with silence to
    the video's end."""
    audio = [i for i, s in enumerate(plan.shots) if s.audio is not None]
    if not audio:
        return [f"anullsrc=r={AUDIO_RATE}:cl=stereo[aout]"]
    g, labels = [], []
    for j, i in enumerate(audio):
        ms = round(plan.faded_in(i) * 1000)
        g.append(f"[{first_input + j}:a]aresample={AUDIO_RATE},aformat=sample_fmts=fltp:channel_layouts=stereo,adelay={ms}:all=1[a{j}]")
        labels.append(f"[a{j}]")
    mix = [f"amix=inputs={len(labels)}:normalize=0:dropout_transition=0"] if len(labels) > 1 else []
    chain = mix + ([audio_filter] if audio_filter else []) + (["apad"] if pad else []) or ["anull"]
    g.append(f"{''.join(labels)}{','.join(chain)}[aout]")
    return g


def ffmpeg_command(plan: Plan, out: Path, ass: Path | None, *, preset: str = "veryfast", crf: int = 20,
                   audio_filter: str = "") -> list[str]:
    cmd = [ffmpeg_exe(), "-hide_banner", "-nostdin", "-y", "-loglevel", "error"]
    readrate = os.environ.get(READRATE_ENV)
    for s in plan.shots:
        cmd += (["-readrate", readrate] if readrate else []) + ["-i", str(s.clip)]
    cmd += [x for s in plan.shots if s.audio is not None for x in ("-i", str(s.audio))]
    n, fps = len(plan.shots), plan.fps
    g = [f"[{i}:v]settb=AVTB,fps={fps},format=yuv420p,setsar=1[v{i}]" for i in range(n)]
    prev = "v0"
    for k in range(1, n):
        g.append(f"[{prev}][v{k}]xfade=transition=fade:duration={plan.xfade:.4f}:offset={plan.starts[k]:.4f}[x{k}]")
        prev = f"x{k}"
    if ass is not None:
        g.append(f"[{prev}]ass=filename={_filter_path(ass)}:fontsdir={_filter_path(FONT_DIR)}[vout]")
    else:
        g.append(f"[{prev}]null[vout]")
    g += audio_graph(plan, n, audio_filter)
    cmd += ["-filter_complex", ";".join(g), "-map", "[vout]", "-map", "[aout]", "-t", f"{plan.total:.4f}",
            "-c:v", "libx264", "-preset", preset, "-crf", str(crf), "-pix_fmt", "yuv420p", "-r", str(fps),
            "-c:a", "aac", "-b:a", "160k", "-ar", str(AUDIO_RATE), "-movflags", "+faststart",
            "-progress", "pipe:1", "-nostats", "-f", "mp4", str(out)]
    return cmd


def assemble(plan: Plan, out_path: Path, *, work_dir: Path | None = None, preset: str = "veryfast",
             on_progress: Callable[[float, float], None] | None = None) -> Path:
    """Encode ``plan`` into ``out_path`` atomically. ``on_progress(done_s, total_s)`` is called
    as ffmpeg reports; if it (or anything) raises, ffmpeg is killed and no file is left.

    Temp names carry this process's id (``.<stem>.<pid>.<random>.tmp.mp4`` beside
    ``out_path``, ``assemble_<pid>_<random>/`` in ``work_dir``) so that a later build can tell
    the leftovers of a killed render (their pid is gone) from a live render's files."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if work_dir is not None:
        Path(work_dir).mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    work = Path(tempfile.mkdtemp(prefix=f"assemble_{pid}_", dir=work_dir))
    tmp = None
    proc = None
    try:
        fd, tmp_name = tempfile.mkstemp(dir=out_path.parent, prefix=f".{out_path.stem}.{pid}.", suffix=".tmp.mp4")
        os.close(fd)
        tmp = Path(tmp_name).absolute()  # absolute: ffmpeg's command line names the file it writes
        ass = write_ass(plan, work / "captions.ass") if any(s.caption.strip() for s in plan.shots) else None
        cmd = ffmpeg_command(plan, tmp, ass, preset=preset, audio_filter=loudness_filter(plan))
        # killed with this process even if it is SIGKILLed (ffmpeg ignores SIGPIPE, so the
        # closed progress pipe alone would not stop it)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                **_child_dies_with_us())
        assert proc.stdout is not None
        for line in proc.stdout:
            if on_progress and line.startswith("out_time_us=") and line.strip() != "out_time_us=N/A":
                on_progress(min(plan.total, int(line.split("=", 1)[1]) / 1e6), plan.total)
        err = proc.stderr.read() if proc.stderr else ""
        if proc.wait() != 0:
            raise RuntimeError(f"ffmpeg failed ({proc.returncode}): {err.strip()[-2000:]}")
        os.replace(tmp, out_path)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    return out_path


def loudness_filter(plan: Plan) -> str:
    """The gain that brings this plan's mixed narration to the platforms' loudness, from a
    first, audio-only pass that measures it (seconds even for the explainer); "" without
    narration, or when the narration is silent (no gain could reach the target)."""
    narrated = [str(s.audio) for s in plan.shots if s.audio is not None]
    if not narrated:
        return ""
    # unpadded, the mix ends with the last narration: the same loudness (silence is gated out)
    graph = audio_graph(plan, 0, pad=False)
    found = loudness.run_measure(loudness.measure_command(ffmpeg_exe(), narrated, graph), **_child_dies_with_us())
    if found.integrated_lufs <= loudness.SILENT_LUFS:
        return ""
    return loudness.gain_filter(found.integrated_lufs)


# --------------------------------------------------------------------------- child lifetime

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _load_prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        prctl.restype = ctypes.c_int
        return prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()  # resolved here, never in a freshly forked child


def die_with_parent(parent_pid: int) -> bool:
    """Make the calling process die (SIGKILL) when its parent ``parent_pid`` dies.

    Linux only (``prctl(PR_SET_PDEATHSIG)``; returns False elsewhere, where callers need their
    own fallback). The signal fires when the parent *thread* that started this process exits,
    so start children from a thread that outlives them (the build does). If the parent died
    before the call, this process is already re-parented and kills itself now.
    """
    armed = _PRCTL is not None and _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    if armed and os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)
    return armed


def _child_dies_with_us() -> dict:
    """``subprocess.Popen`` keyword arguments that tie the child's life to this process."""
    if _PRCTL is None:
        return {}
    parent = os.getpid()
    # preexec_fn runs between fork and exec; it only calls the prctl pointer resolved above
    return {"preexec_fn": lambda: die_with_parent(parent)}


# --------------------------------------------------------------------------- naive path


def assemble_naive(plan: Plan, out_path: Path, *, preset: str = "veryfast", threads: int = 2) -> Path:
    """The same video composited frame by frame with MoviePy (benchmark baseline only).

    Crossfades via CrossFadeIn on overlapping clips, captions as TextClips (wrapped by us:
    MoviePy's ``method="caption"`` breaks words mid-word; ``margin`` keeps descenders).
    """
    from moviepy import AudioFileClip, CompositeAudioClip, CompositeVideoClip, TextClip, VideoFileClip, vfx

    style = caption_style(plan.width, plan.height)
    layers, sources = [], []
    for i, s in enumerate(plan.shots):
        clip = VideoFileClip(str(s.clip), audio=False)
        sources.append(clip)
        clip = clip.with_start(plan.starts[i])
        if i:
            clip = clip.with_effects([vfx.CrossFadeIn(plan.xfade)])
        layers.append(clip)
    for a, b, lines in caption_events(plan):
        txt = TextClip(font=str(FONT_FILE), text="\n".join(lines), font_size=style.font_size, color="white",
                       stroke_color="black", stroke_width=style.outline, method="label", text_align="center",
                       margin=(style.outline * 2, style.font_size // 3))
        y = plan.height - style.margin_v - txt.h
        layers.append(txt.with_start(a).with_duration(b - a).with_position(("center", y)))
    tracks = []
    for i, s in enumerate(plan.shots):
        if s.audio is not None:
            au = AudioFileClip(str(s.audio))
            sources.append(au)
            tracks.append(au.with_start(plan.faded_in(i)))
    video = CompositeVideoClip(layers, size=(plan.width, plan.height)).with_duration(plan.total)
    if tracks:
        video = video.with_audio(CompositeAudioClip(tracks).with_duration(plan.total))
    out_path = Path(out_path)
    tmp = out_path.parent / f".{out_path.stem}.naive.tmp.mp4"
    try:
        video.write_videofile(str(tmp), fps=plan.fps, codec="libx264", audio_codec="aac", preset=preset,
                              threads=threads, ffmpeg_params=["-pix_fmt", "yuv420p"], logger=None)
        os.replace(tmp, out_path)
    finally:
        tmp.unlink(missing_ok=True)
        for c in sources:
            c.close()
    return out_path
