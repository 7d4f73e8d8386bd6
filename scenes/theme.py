"""Look and pacing shared by every scene: palette, fonts, layout boxes, text fitting, timing.

Two orientations are laid out from the frame the renderer configured (``render_clip`` sets
frame_height 8 and frame_width from the pixel aspect ratio):

* portrait 9:16 (Shorts): title at the top, content filling the frame down to the caption
  band, and that band (the bottom 22.5%, where the assembly step burns in a two-line caption
  page, inside the bottom third: ``scenes.assemble.caption_block_top``) left empty;
* landscape 16:9 (explainer): title at the top, content below, a bottom strip kept free for
  captions.

Font sizes are manim ``font_size`` values. In portrait one scene unit is 240 px at
1080x1920, and DejaVu Sans at font_size 20 is 0.26 units from ascender to descender (~62 px),
so body text stays well above the 40 px phone-legibility floor; the smallest text (relation
labels) is ~43 px. The em size of a font_size is ``font_size / 72`` scene units (measured: a
capital H at font_size 100 is 1.01 units, DejaVu's cap height 0.729 em), so at 1080x1920 one
font_size unit is 3.33 px of em. ``Layout.min_size`` is the floor no text goes below: 36 px at
1080x1920 (font_size 10.8), 30 px at 1920x1080 (font_size 16).

Every piece of text is made by :func:`fit_text`, the one place that decides how text fits a
box: shrink toward the floor, then wrap onto more lines, then use known short forms; it never
cuts a word or adds an ellipsis (a quoted model trace may be shown as a marked excerpt).

``ClipScene`` is the base class of every scene: it receives a validated payload and a
duration, and its subclasses describe their animation as a list of ``Beat``s (animations plus
a nominal length). The base class paces the beats to fill the clip and pads with a final hold
so the clip has exactly ``round(duration * fps)`` frames (see ``_play_frames`` for how manim's
frame counting is pinned down).
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Sequence

from manim import (
    BOLD,
    NORMAL,
    Animation,
    Paragraph,
    RoundedRectangle,
    Scene,
    Text,
    VGroup,
    config,
)

from scenes.assemble import caption_block_top

# --------------------------------------------------------------------------- palette
# Dark background, high-contrast foreground. Accent choices keep the path (amber) and the
# TRACE-mentioned entities (sky blue) distinguishable for the common colour-vision
# deficiencies; red/green are reserved for wrong/right and always come with a text mark.
BG = "#0E1116"
PANEL = "#1A212B"
GRID = "#2C3644"
TEXT = "#F2F4F8"
MUTED = "#A3ADBB"
NODE_FILL = "#1C2430"
NODE_STROKE = "#5B6778"
PATH = "#FFB000"
MENTIONED = "#38B6FF"
WRONG = "#FF4D4D"
RIGHT = "#2ECC71"
HIGHLIGHT = "#2A3B55"
#: series colours for charts, in order (first = the path accent so a single series matches).
SERIES = ["#FFB000", "#38B6FF", "#C77DFF", "#2ECC71", "#FF7F50", "#F2F4F8"]

FONT = "DejaVu Sans"
CHECK = "\u2713"  # ✓ (DejaVu Sans has it)
CROSS = "\u2717"  # ✗

# Average advance of one DejaVu Sans character per font_size unit, in scene units (measured:
# "sync clocks with NTP" is 3.45 units wide at font_size 24). Used to pick wrap widths before
# building Text; fit_text then re-measures and tightens if a line is still too wide.
CHAR_W = 0.00718


@dataclass(frozen=True)
class Box:
    """An axis-aligned rectangle in scene units."""

    left: float
    right: float
    bottom: float
    top: float

    @property
    def width(self) -> float:
        return self.right - self.left

    @property
    def height(self) -> float:
        return self.top - self.bottom

    @property
    def cx(self) -> float:
        return (self.left + self.right) / 2

    @property
    def cy(self) -> float:
        return (self.bottom + self.top) / 2


@dataclass(frozen=True)
class Layout:
    """Where things go and how big text is, for one orientation."""

    portrait: bool
    frame: Box
    title: Box  # title / question block
    content: Box  # main content
    captions: Box  # kept empty for burned-in captions
    title_size: float
    body_size: float
    small_size: float
    tiny_size: float
    line_spacing: float = 0.35
    min_size: float = 0.0  # the floor of every text (see MIN_TEXT_PX)


#: Gap between the lowest content and the top of a two-line caption page, as a fraction of the
#: frame height (38 px at 1080x1920): text above a caption must not seem to belong to it.
CAPTION_CLEARANCE = 0.02

#: The smallest em size any text may have, in pixels of the format's full-size frame: a Short
#: (1080x1920) is read on a phone, so 36 px; the explainer (1920x1080) on a larger screen, 30 px.
MIN_TEXT_PX = {"portrait": (36, 1920), "landscape": (30, 1080)}
#: font_size units per em scene unit (em = font_size / 72 units, measured, see the module doc)
EM_PER_FONT_SIZE = 1 / 72


def min_font_size(portrait: bool, frame_height: float = 8.0) -> float:
    """The font_size whose em is MIN_TEXT_PX at the format's full size.

    >>> round(min_font_size(True), 2), round(min_font_size(False), 2)
    (10.8, 16.0)
    """
    px, full_height = MIN_TEXT_PX["portrait" if portrait else "landscape"]
    return px / (full_height / frame_height) / EM_PER_FONT_SIZE


def em_pixels(font_size: float, pixel_height: int, frame_height: float = 8.0) -> float:
    """Em size in pixels of ``font_size`` in a frame ``pixel_height`` px tall.

    >>> round(em_pixels(10.8, 1920), 1)
    36.0
    """
    return font_size * EM_PER_FONT_SIZE * pixel_height / frame_height


def layout_for(frame_width: float, frame_height: float) -> Layout:
    """Layout for the configured frame; portrait when taller than wide.

    >>> L = layout_for(4.5, 8.0)
    >>> L.portrait, L.content.bottom > L.captions.top
    (True, True)
    >>> round(L.captions.top, 2)  # the caption band: the bottom 22.5% of the frame (432 px of 1920)
    -2.2
    """
    w, h = frame_width / 2, frame_height / 2
    frame = Box(-w, w, -h, h)
    if frame_height > frame_width:
        m = 0.22
        # Content reaches down to just above where the assembly burns a two-line caption page
        # in (inside the bottom third); a fixed third left a fifth of the frame empty.
        caption_top = -h + frame_height * (caption_block_top(True) + CAPTION_CLEARANCE)
        return Layout(
            portrait=True,
            frame=frame,
            title=Box(-w + m, w - m, h - 1.45, h - 0.25),
            content=Box(-w + m, w - m, caption_top + 0.12, h - 1.6),
            captions=Box(-w, w, -h, caption_top),
            title_size=24,
            body_size=19,
            small_size=16,
            tiny_size=14,
            min_size=min_font_size(True, frame_height),
        )
    m = 0.5
    caption_top = -h + 1.2
    return Layout(
        portrait=False,
        frame=frame,
        title=Box(-w + m, w - m, h - 1.25, h - 0.3),
        content=Box(-w + m, w - m, caption_top + 0.15, h - 1.4),
        captions=Box(-w, w, -h, caption_top),
        title_size=34,
        body_size=24,
        small_size=20,
        tiny_size=17,
        min_size=min_font_size(False, frame_height),
    )


# --------------------------------------------------------------------------- text


#: Short forms a viewer knows, used only when a text does not fit at the floor size on the
#: lines its box allows; never a cut word. Whole words only; a capitalised word keeps its capital.
SHORT_FORMS = {
    "accuracy": "acc.",
    "certificate": "cert",
    "certificates": "certs",
    "configuration": "config",
    "coverage": "cov.",
    "database": "DB",
    "directory": "dir",
    "environment": "env",
    "kubernetes": "k8s",
    "maximum": "max",
    "minimum": "min",
    "shuffled": "shuf.",
}

# Inside a word too long for a line, a break may follow one of these (identifiers such as
# "max.poll.interval.ms" or "kafka-consumer-groups"): wrapped, never cut.
_BREAK_AFTER = re.compile(r"[^./_\-=:]*[./_\-=:]+|[^./_\-=:]+$")


def abbreviate(text: str) -> str:
    """``text`` with every word that has a known short form replaced (SHORT_FORMS).

    >>> abbreviate("Accuracy (95% CI), renew the certificate")
    'Acc. (95% CI), renew the cert'
    """
    def one(m: re.Match) -> str:
        word = m.group(0)
        short = SHORT_FORMS.get(word.lower())
        if short is None:
            return word
        return short[0].upper() + short[1:] if word[0].isupper() else short
    return re.sub(r"[A-Za-z]+", one, text)


def wrap_lines(text: str, max_chars: int) -> list[str]:
    """Greedy word wrap to ``max_chars`` per line. Nothing is ever dropped: a word longer than
    a line is broken after punctuation inside it (``.``, ``/``, ``_``, ``-``, ``=``, ``:``),
    and one with none stays whole on its own line (fit_text then shrinks or reports it).

    >>> wrap_lines("the quick brown fox jumps over the lazy dog", 10)
    ['the quick', 'brown fox', 'jumps over', 'the lazy', 'dog']
    >>> wrap_lines("raise max.poll.interval.ms", 10)
    ['raise max.', 'poll.', 'interval.', 'ms']
    >>> wrap_lines("", 10)
    ['']
    """
    max_chars = max(2, max_chars)
    pieces: list[tuple[str, bool]] = []  # (piece, preceded by a space)
    for word in text.split():
        if len(word) <= max_chars:
            pieces.append((word, True))
            continue
        for j, part in enumerate(p for p in _BREAK_AFTER.findall(word) if p):
            pieces.append((part, j == 0))
    lines: list[str] = []
    line = ""
    for piece, spaced in pieces:
        joined = line + (" " if spaced and line else "") + piece
        if line and len(joined) > max_chars:
            lines.append(line)
            line = piece
        else:
            line = joined
    lines.append(line)
    return lines


@dataclass
class TextFit:
    """One fit_text decision, kept while :func:`record_fits` is active (the layout audit)."""

    text: str  # as asked for
    lines: list[str]  # as drawn
    size: float  # font_size drawn at
    floor: float  # the smallest size it was allowed
    max_width: float
    abbreviated: bool
    excerpt: bool  # a quoted trace shown in part, marked "(+N more words)"
    mob: object  # the Text: later scaling by the scene shows in its height
    height: float  # its height when made

    @property
    def effective_size(self) -> float:
        """The font size as finally laid out, after any scaling the scene applied."""
        return self.size * (self.mob.height / self.height) if self.height else self.size


_RECORD: list[TextFit] | None = None


@contextmanager
def record_fits():
    """Collect every fit_text decision made inside the block (tests audit them)."""
    global _RECORD
    saved, _RECORD = _RECORD, []
    try:
        yield _RECORD
    finally:
        _RECORD = saved


#: Inside ``trial()``: fit_text calls measure, nothing they make is drawn.
_TRIAL = False
#: The texts trials made, by fit_text's arguments and the frame (least recently used dropped past
#: _TRIALS_KEPT): a layout asks the same trial many times (each earlier card of the before/after
#: shot measures its header and its line at three sizes), and a manim Text costs ~50 ms to build.
_TRIALS: OrderedDict[tuple, Text] = OrderedDict()
_TRIALS_KEPT = 256


@contextmanager
def trial():
    """fit_text calls inside are trials, not drawn: kept out of the layout audit
    (``record_fits``), and a trial asked again gets the Text the first one made. Read a trial's
    Text (size, width, height); never move it into a scene or change its shape."""
    global _RECORD, _TRIAL
    saved, (_RECORD, _TRIAL) = (_RECORD, _TRIAL), (None, True)
    try:
        yield
    finally:
        _RECORD, _TRIAL = saved


def fit_text(
    text: str,
    size: float,
    max_width: float,
    max_lines: int = 1,
    *,
    color: str = TEXT,
    bold: bool = False,
    align: str = "center",
    line_spacing: float = 0.35,
    min_size: float | None = None,
    extra_lines: int = 2,
    excerpt: bool = False,
) -> Text:
    """A Text of ``text`` no wider than ``max_width`` units; the one text-fitting rule.

    In order: the largest size from ``size`` down to ``min_size`` (default: the layout's
    floor, ``Layout.min_size``; never below it) at which the text wraps into ``max_lines``
    lines; then, at that floor, up to ``extra_lines`` more lines; then known short forms
    (SHORT_FORMS); then as many lines as it takes. Nothing is cut and no ellipsis is added:
    callers lay out by the measured height. ``excerpt=True`` (quoted model output only) keeps
    the leading words that fit in ``max_lines`` lines, ending "(+N more words)", instead of
    growing.
    ``align``: left/center.
    """
    if _TRIAL:
        key = (text, size, max_width, max_lines, color, bold, align, line_spacing, min_size, extra_lines,
               excerpt, config.pixel_width, config.pixel_height, config.frame_width, config.frame_height)
        if key not in _TRIALS:
            _TRIALS[key] = _fit_text(text, size, max_width, max_lines, color, bold, align, line_spacing,
                                     min_size, extra_lines, excerpt)
            if len(_TRIALS) > _TRIALS_KEPT:
                _TRIALS.popitem(last=False)
        _TRIALS.move_to_end(key)
        return _TRIALS[key]
    return _fit_text(text, size, max_width, max_lines, color, bold, align, line_spacing, min_size, extra_lines,
                     excerpt)


def _fit_text(text, size, max_width, max_lines, color, bold, align, line_spacing, min_size, extra_lines,
              excerpt) -> Text:
    floor = _floor() if min_size is None else max(min_size, _floor())
    floor = min(floor, size)
    text = " ".join(text.split())
    sizes = [size]
    while sizes[-1] * 0.9 > floor:
        sizes.append(sizes[-1] * 0.9)
    if floor < size:
        sizes.append(floor)  # always try the floor itself
    args = (color, bold, align, line_spacing)
    for s in sizes:
        lines, mob, fits = _wrap_fit(text, s, max_width, *args, build_misfit=False)
        if fits and len(lines) <= max_lines:
            return _done(text, lines, s, floor, max_width, False, False, mob)
    if excerpt:
        # the most leading words that fit in max_lines with the count of the rest at the end
        words = text.split()
        lo, hi, best = 0, len(words) - 1, None
        while lo <= hi:
            k = (lo + hi) // 2
            rest = len(words) - k
            cand = " ".join(words[:k] + [f"(+{rest} more word{'s' if rest != 1 else ''})"])
            lines, mob, fits = _wrap_fit(cand, floor, max_width, *args, build_misfit=False)
            if fits and len(lines) <= max_lines:
                best, lo = (lines, mob), k + 1
            else:
                hi = k - 1
        if best is None:  # not even the count fits: show it anyway, the caller measures
            lines, mob, _ = _wrap_fit(f"(+{len(words)} more words)", floor, max_width, *args)
            best = (lines, mob)
        return _done(text, best[0], floor, floor, max_width, False, True, best[1])
    short = abbreviate(text)
    lines, mob, fits = _wrap_fit(text, floor, max_width, *args)
    used = False
    if (not fits or len(lines) > max_lines + extra_lines) and short != text:
        s_lines, s_mob, s_fits = _wrap_fit(short, floor, max_width, *args)
        if s_fits and (len(s_lines) < len(lines) or not fits):
            lines, mob, fits, used = s_lines, s_mob, s_fits, True
    if not fits:
        # a single unbreakable token wider than the box: the one case that goes below the
        # floor (the layout audit in tests/test_text_fit.py reports it)
        mob.scale_to_fit_width(max_width)
    return _done(text, lines, floor, floor, max_width, used, False, mob)


def shared_size(texts: Sequence[str], size: float, max_width: float | Sequence[float], max_lines: int = 1, *,
                bold: bool = False, min_size: float | None = None) -> float:
    """One font size for a row or column of labels: the smallest size fit_text picks for any
    of them (``max_width``: one width, or one per text). Mixed sizes in a row of like labels
    read as emphasis that is not there; callers then fit each at this size."""
    widths = [max_width] * len(texts) if isinstance(max_width, (int, float)) else list(max_width)
    with trial():
        return min((fit_text(t, size, w, max_lines, bold=bold, min_size=min_size).fit_size
                    for t, w in zip(texts, widths)), default=size)


def min_text_scale(group, floor: float) -> float:
    """The smallest factor ``group`` may be scaled by before any fit_text text in it would go
    below ``floor`` (1.0 when a text is already at the floor)."""
    limit = 0.0
    for m in group.get_family():
        size = getattr(m, "fit_size", None)
        if size and m.fit_height:
            limit = max(limit, floor / (size * m.height / m.fit_height))
    return min(1.0, limit)


def _floor() -> float:
    return layout_for(config.frame_width, config.frame_height).min_size


def _done(text, lines, size, floor, max_width, abbreviated, excerpt, mob) -> Text:
    # the size it was made at travels with the Text, so a scene scaling a group of mobjects
    # can ask how far it may go (min_text_scale) without pushing text under the floor
    mob.fit_size, mob.fit_height = size, mob.height
    if _RECORD is not None:
        _RECORD.append(TextFit(text, list(lines), size, floor, max_width, abbreviated, excerpt, mob, mob.height))
    return mob


#: The width of every text built in this process, by (lines, size, bold, align, spacing, the
#: pixel canvas pango draws on): fitting
#: tries a text at several sizes and layouts try several node sizes, so a wrap already measured
#: too wide is not built again (a manim Text costs ~50 ms; a copy of one costs as much).
_WIDTHS: dict[tuple, float] = {}


def _wrap_fit(text, size, max_width, color, bold, align, line_spacing, *, build_misfit=True):
    """(lines, Text, fits?) of ``text`` wrapped at ``size`` to ``max_width`` (measured).
    ``build_misfit=False``: a text that does not fit comes back as None (the caller tries another)."""
    # DejaVu Sans Bold is ~20% wider than Book (measured on mixed-case text with digits).
    chars = max(2, int(max_width / (CHAR_W * size * (1.2 if bold else 1.0))))
    for _ in range(12):
        lines = wrap_lines(text, chars)
        key = (tuple(lines), round(size, 9), bold, align, line_spacing, config.pixel_width, config.pixel_height)
        width, mob = _WIDTHS.get(key), None
        if width is None or width <= max_width + 1e-6:
            mob = _make_text(lines, size, color, bold, align, line_spacing)
            width = _WIDTHS[key] = mob.width
            if width <= max_width + 1e-6:
                return lines, mob, True
        if chars <= 4:
            break
        # Shrink by the measured overshoot, but at most to one character less, so a slightly
        # wide line does not wrap more than it must.
        chars = max(4, min(chars - 1, int(chars * max_width / width)))
    if mob is None and build_misfit:
        mob = _make_text(lines, size, color, bold, align, line_spacing)
    return lines, mob, False


def _make_text(lines: list[str], size: float, color: str, bold: bool, align: str, spacing: float) -> Text:
    weight = BOLD if bold else NORMAL
    if len(lines) == 1:
        return Text(lines[0] or " ", font=FONT, font_size=size, color=color, weight=weight,
                    disable_ligatures=True)
    # Paragraph lays all lines out as one pango text (even baselines) and then aligns each
    # line; separate Text objects per line would sit unevenly (glyph-height-dependent boxes).
    # Ligatures must be off: Paragraph splits glyphs into lines by character count, and an
    # "fi"/"ff" ligature (one glyph, two characters) shifted letters onto the wrong line.
    return Paragraph(
        *[line or " " for line in lines], font=FONT, font_size=size, color=color,
        weight=weight, alignment=align, line_spacing=spacing, disable_ligatures=True,
    )


def label_box(
    text: str,
    size: float,
    max_width: float,
    *,
    max_lines: int = 2,
    stroke: str = NODE_STROKE,
    fill: str = NODE_FILL,
    color: str = TEXT,
    pad: float = 0.12,
    min_width: float = 0.0,
    min_size: float | None = None,
) -> VGroup:
    """A rounded box with a wrapped label centred in it: VGroup(box, label)."""
    label = fit_text(text, size, max_width - 2 * pad, max_lines, color=color, min_size=min_size)
    w = max(label.width + 2 * pad, min_width)
    h = label.height + 1.6 * pad
    box = RoundedRectangle(
        width=w, height=h, corner_radius=min(0.14, h / 3),
        stroke_color=stroke, stroke_width=3, fill_color=fill, fill_opacity=1.0,
    )
    label.move_to(box.get_center())
    return VGroup(box, label)


# --------------------------------------------------------------------------- pacing


def beat_schedule(seconds: Sequence[float], duration: float, fps: int, share: float = 0.8,
                  max_stretch: float = 1.5, max_rest: float = 4.0, max_gap: float = 6.0) -> tuple[list[int], list[int]]:
    """First and end frame of each beat of nominal ``seconds`` in a clip of ``duration``.

    The beats' lengths are scaled to take ``share`` of the clip (at most ``max_stretch`` times
    nominal) and played one after another; the clip's last frame is kept for the finished
    picture. If what is left after the beats would be a still of more than ``max_rest``
    seconds, it is shared out as equal rests after each beat instead, and if a rest would then
    last more than ``max_gap`` seconds (a long narration over few beats), the beats play slower
    so that none does: slow movement rather than a still.

    >>> beat_schedule([1, 1], 2.5, 10)      # a short clip: the beats back to back, a final rest
    ([0, 10], [10, 20])
    >>> beat_schedule([1, 1, 1], 20.0, 10)  # a long one: 4.5 s of beats, 15.5 / 3 s of rest after each
    ([0, 67, 133], [15, 82, 148])
    >>> beat_schedule([1, 1, 1], 30.0, 10)  # longer: beats of 4 s, rests of 6 s
    ([0, 100, 200], [40, 140, 240])
    """
    total = max(1, round(duration * fps))
    nominal = sum(max(0.0, s) for s in seconds) or 1.0
    scale = min(max_stretch, share * duration / nominal)
    budget = total - 1  # keep at least one frame for the final picture
    played = nominal * scale
    rest = (duration - played) / len(seconds) if seconds and duration - played > max_rest else 0.0
    if rest > max_gap:
        rest = max_gap
        scale = (duration - rest * len(seconds)) / nominal
    starts, ends, t = [], [], 0.0
    for s in seconds:
        # cumulative time is rounded, not each beat, so rounding errors do not accumulate
        start = min(budget, round(t * fps))
        t += max(0.0, s) * scale
        end = min(budget, round(t * fps))
        starts.append(start)
        ends.append(end)
        t += rest
    return starts, ends


@dataclass
class Beat:
    """One step of a scene: animations played together for ``seconds`` (nominal).

    ``anims`` may be a callable returning the animations, for animations that must be built
    after earlier beats have run. An empty list is a pause.
    """

    anims: Sequence[Animation] | Callable[[], Sequence[Animation]]
    seconds: float = 1.0
    kwargs: dict = field(default_factory=dict)


class ClipScene(Scene):
    """Base scene: holds the payload and paces ``beats()`` to exactly fill ``duration``.

    Subclasses implement ``beats()``, which builds mobjects and returns the Beat list. Nominal
    beat lengths are scaled so they take ~80% of the clip (never stretched beyond 1.5x, so a
    long clip does not crawl); the rest is a final hold that keeps the finished picture on
    screen while narration ends. When that hold would last more than ``MAX_REST`` seconds (a
    long narration over few seconds of animation), the rest is shared out after every beat
    instead, so the picture keeps changing while the narrator talks: a viewer leaves during
    a still.
    """

    #: share of the clip the animations may use; the rest is the final hold.
    ANIM_SHARE = 0.8
    MAX_STRETCH = 1.5
    #: longest final hold (s) before the rest is shared out between the beats
    MAX_REST = 4.0
    #: longest rest (s) between beats; past it the beats play slower instead
    MAX_GAP = 6.0

    def __init__(self, payload, duration: float, **kwargs):
        self.payload = payload
        self.clip_duration = float(duration)
        super().__init__(**kwargs)

    # subclasses -------------------------------------------------------------------
    def beats(self) -> list[Beat]:  # pragma: no cover - abstract
        """Build the scene's mobjects and return its beats."""
        raise NotImplementedError

    def title_text(self, text: str) -> Text:
        """The scene's title: at most two lines, bold, placed at the top of the title band."""
        L = self.L
        title = fit_text(text, L.title_size, L.title.width, 2, bold=True, min_size=L.body_size)
        title.move_to((L.title.cx, L.title.top - title.height / 2, 0))
        return title

    def note_text(self, text: str) -> Text | None:
        """The scene's note under its content (two lines at the small size), None without one."""
        return fit_text(text, self.L.small_size, self.L.content.width, 2, color=MUTED) if text else None

    # machinery --------------------------------------------------------------------
    def construct(self) -> None:
        self.L = layout_for(config.frame_width, config.frame_height)
        self.fps = int(round(config.frame_rate))
        self.total_frames = max(1, round(self.clip_duration * self.fps))
        self.frames_written = 0
        beats = self.beats()
        starts, ends = beat_schedule([b.seconds for b in beats], self.clip_duration, self.fps,
                                     self.ANIM_SHARE, self.MAX_STRETCH, self.MAX_REST, self.MAX_GAP)
        for b, start, end in zip(beats, starts, ends):
            self._hold(start - self.frames_written)
            anims = b.anims() if callable(b.anims) else list(b.anims)
            self._play_frames(anims, end - start, **b.kwargs)
        self._hold(self.total_frames - self.frames_written)

    def _play_frames(self, anims: Sequence[Animation], k: int, **kwargs) -> None:
        """Play ``anims`` as exactly ``k`` frames (k == 0: apply them instantly, no frame).

        manim renders ``np.arange(0, run_time, 1/fps)`` frames for an animation, i.e.
        ceil(run_time * fps); a run_time of (k - 0.5)/fps makes that exactly k whatever the
        float rounding. The animation's last frame is then at alpha (k-1)/(k-0.5) < 1, and
        manim's finish() snaps to the end state, which the next frame shows.
        """
        if not anims:
            self._hold(k)
            return
        if k <= 0:
            self._apply_instantly(anims, **kwargs)
            return
        # (k = 1 uses exactly one frame period: manim warns about, and rounds up, anything less.)
        self.play(*anims, run_time=max(k - 0.5, 1) / self.fps, **kwargs)
        self.frames_written += k

    def _hold(self, k: int) -> None:
        """A still of exactly ``k`` frames.

        A frozen wait writes int(duration * fps) frames, so (k + 0.5)/fps gives exactly k.
        """
        if k <= 0:
            return
        self.wait((k + 0.5) / self.fps, frozen_frame=True)
        self.frames_written += k

    def _apply_instantly(self, anims: Sequence[Animation], **kwargs) -> None:
        """Run ``anims`` to their end state without writing frames (clips too short to show
        every beat). Uses manim's own skipping so begin/finish/clean-up happen as usual."""
        r = self.renderer
        saved = r._original_skipping_status
        r._original_skipping_status = True
        try:
            self.play(*anims, **kwargs)
        finally:
            r._original_skipping_status = saved
            r.skip_animations = saved


def top_under(title, gap: float = 0.35) -> float:
    """Where a scene's content starts: ``gap`` under its title as drawn. The title box has room
    for two lines; a one-line title leaves the second to the content instead of an empty band."""
    return title.get_bottom()[1] - gap


def clamp(v: float, lo: float, hi: float) -> float:
    """``v`` limited to [lo, hi].

    >>> clamp(5, 0, 1), clamp(-1, 0, 1), clamp(0.5, 0, 1)
    (1, 0, 0.5)
    """
    return max(lo, min(hi, v))


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1/2/5 x 10^k steps), ends included when round.

    >>> nice_ticks(0, 1)
    [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    >>> nice_ticks(0, 1000, 4)
    [0.0, 250.0, 500.0, 750.0, 1000.0]
    """
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / max(1, target)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw - 1e-12)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    v = first
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 10))
        v += step
    return ticks


def fmt_tick(v: float) -> str:
    """Short tick label: integers without decimals, others with up to 2 significant decimals.

    >>> fmt_tick(1000.0), fmt_tick(0.25), fmt_tick(0.5), fmt_tick(-2.0), fmt_tick(12500.0)
    ('1000', '0.25', '0.5', '-2', '12.5k')
    """
    if abs(v) >= 10000:
        return f"{v / 1000:g}k"
    if float(v).is_integer():
        return str(int(v))
    return f"{v:.2f}".rstrip("0").rstrip(".")
