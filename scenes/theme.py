"""Look and pacing shared by every scene: palette, fonts, layout boxes, text fitting, timing.

Two orientations are laid out from the frame the renderer configured (``render_clip`` sets
frame_height 8 and frame_width from the pixel aspect ratio):

* portrait 9:16 (Shorts): title at the top, content in the middle, and the **bottom third
  left empty** for the captions the assembly step burns in;
* landscape 16:9 (explainer): title at the top, content below, a bottom strip kept free for
  captions.

Font sizes are manim ``font_size`` values. In portrait one scene unit is 240 px at
1080x1920, and DejaVu Sans at font_size 20 is 0.26 units from ascender to descender (~62 px),
so body text stays well above the 40 px phone-legibility floor; the smallest text (relation
labels) is ~43 px.

``ClipScene`` is the base class of every scene: it receives a validated payload and a
duration, and its subclasses describe their animation as a list of ``Beat``s (animations plus
a nominal length). The base class paces the beats to fill the clip and pads with a final hold
so the clip has exactly ``round(duration * fps)`` frames (see ``_play_frames`` for how manim's
frame counting is pinned down).
"""

from __future__ import annotations

import math
import textwrap
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


def layout_for(frame_width: float, frame_height: float) -> Layout:
    """Layout for the configured frame; portrait when taller than wide.

    >>> L = layout_for(4.5, 8.0)
    >>> L.portrait, L.content.bottom > L.captions.top
    (True, True)
    >>> round(L.captions.top, 3)  # the bottom third of an 8-unit frame starts at y = -4/3
    -1.333
    """
    w, h = frame_width / 2, frame_height / 2
    frame = Box(-w, w, -h, h)
    if frame_height > frame_width:
        m = 0.22
        caption_top = -h + frame_height / 3
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
    )


# --------------------------------------------------------------------------- text


def wrap_lines(text: str, max_chars: int, max_lines: int) -> list[str]:
    """Greedy word wrap to ``max_chars`` per line, at most ``max_lines`` lines.

    Overflow is cut with an ellipsis instead of spilling out of the layout box.

    >>> wrap_lines("the quick brown fox jumps over the lazy dog", 10, 2)
    ['the quick', 'brown fox…']
    >>> wrap_lines("short", 10, 3)
    ['short']
    >>> wrap_lines("", 10, 3)
    ['']
    """
    max_chars = max(2, max_chars)
    text = " ".join(text.split())
    # Words are never split: a word longer than a line stays whole and fit_text shrinks the
    # text instead (a label broken as "phas / e" reads worse than a slightly smaller one).
    lines = textwrap.wrap(text, width=max_chars, break_long_words=False, break_on_hyphens=True)
    if not lines:
        return [""]
    if len(lines) > max_lines:
        kept = lines[:max_lines]
        last = kept[-1]
        if len(last) + 1 > max_chars:
            last = last[: max_chars - 1].rstrip()
        kept[-1] = last.rstrip(" .,;:") + "…"
        lines = kept
    return lines


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
) -> Text:
    """A Text of ``text`` wrapped to fit ``max_width`` units in at most ``max_lines`` lines.

    Lines are wrapped by estimated character width, then the real width is measured and the
    wrap is tightened until it fits. If the text only fits by truncation and ``min_size`` is
    given, the font shrinks (down to ``min_size``) before an ellipsis is used; a uniform
    scale-down is the last resort for a single over-long token. ``align``: "left"/"center".
    """
    sizes = [size]
    if min_size is not None:
        while sizes[-1] * 0.9 > min_size:
            sizes.append(sizes[-1] * 0.9)
        if min_size < size:
            sizes.append(min_size)  # always try the floor itself
    for s in sizes:
        mob, truncated = _fit_at(text, s, max_width, max_lines, color, bold, align, line_spacing)
        if not truncated:
            break
    if mob.width > max_width:
        mob.scale_to_fit_width(max_width)
    return mob


def _fit_at(text, size, max_width, max_lines, color, bold, align, line_spacing):
    """(Text, truncated?) for one font size; see fit_text."""
    # DejaVu Sans Bold is ~20% wider than Book (measured on mixed-case text with digits).
    chars = max(2, int(max_width / (CHAR_W * size * (1.2 if bold else 1.0))))
    for _ in range(12):
        lines = wrap_lines(text, chars, max_lines)
        mob = _make_text(lines, size, color, bold, align, line_spacing)
        if mob.width <= max_width or chars <= 4:
            break
        # Shrink by the measured overshoot, but at most to one character less, so a slightly
        # wide line does not overshoot into needless truncation.
        chars = max(4, min(chars - 1, int(chars * max_width / mob.width)))
    truncated = len(" ".join(lines)) < len(" ".join(text.split())) or lines[-1].endswith("…") and not text.rstrip().endswith("…")
    return mob, truncated


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
    beat lengths are scaled so they take ~80% of the clip (never stretched beyond 1.5x, so long
    clips end on a longer still hold rather than sluggish animation); the rest is a final
    hold that keeps the finished picture on screen while narration ends.
    """

    #: share of the clip the animations may use; the rest is the final hold.
    ANIM_SHARE = 0.8
    MAX_STRETCH = 1.5

    def __init__(self, payload, duration: float, **kwargs):
        self.payload = payload
        self.clip_duration = float(duration)
        super().__init__(**kwargs)

    # subclasses -------------------------------------------------------------------
    def beats(self) -> list[Beat]:  # pragma: no cover - abstract
        """Build the scene's mobjects and return its beats."""
        raise NotImplementedError

    # machinery --------------------------------------------------------------------
    def construct(self) -> None:
        self.L = layout_for(config.frame_width, config.frame_height)
        self.fps = int(round(config.frame_rate))
        self.total_frames = max(1, round(self.clip_duration * self.fps))
        self.frames_written = 0
        beats = self.beats()
        nominal = sum(max(0.0, b.seconds) for b in beats) or 1.0
        scale = min(self.MAX_STRETCH, self.ANIM_SHARE * self.clip_duration / nominal)
        budget = self.total_frames - 1  # keep at least one frame for the final picture
        t = 0.0
        for b in beats:
            # Round cumulative time, not each beat, so rounding errors do not accumulate.
            start = min(budget, round(t * self.fps))
            t += max(0.0, b.seconds) * scale
            end = min(budget, round(t * self.fps))
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


def is_portrait() -> bool:
    """True when the configured frame is taller than wide."""
    return config.frame_height > config.frame_width


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
