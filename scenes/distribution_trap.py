"""Distribution trap: accuracy (or any score) per training distribution with error bars.

Bar by bar, each grows from zero, then its [lo, hi] interval is drawn as an error bar and its
value appears (names and sample counts are there from the start). The y scale always includes
0 and every interval, so a short bar with a wide interval is visibly uncertain. The
``intervals`` scene type draws the same chart from a run's phases or paired differences.
"""

from __future__ import annotations

import numpy as np
from manim import DOWN, LEFT, UP, Create, FadeIn, GrowFromEdge, Line, Rectangle, VGroup

from scenes.payloads import DistributionTrapPayload
from scenes.theme import GRID, MUTED, SERIES, TEXT, Beat, ClipScene, fit_text, fmt_tick, nice_ticks, top_under


def fmt_bar(v: float) -> str:
    """Value label: 2 decimals for values up to 1 (accuracies), else 3 significant digits.

    >>> fmt_bar(0.4567), fmt_bar(12.345), fmt_bar(1.0)
    ('0.46', '12.3', '1.00')
    """
    return f"{v:.2f}" if abs(v) <= 1 else f"{v:.3g}"


class DistributionTrapScene(ClipScene):
    """Vertical bars with whiskers, value labels above, ``n = ...`` under each label."""

    payload: DistributionTrapPayload

    def beats(self) -> list[Beat]:
        p, L = self.payload, self.L
        title = self.title_text(p.title)
        note = self.note_text(p.note)
        lo = min([0.0] + [b.lo for b in p.bars] + [b.value for b in p.bars])
        hi = max([0.0] + [b.hi for b in p.bars] + [b.value for b in p.bars])
        if hi - lo < 1e-9:
            hi = lo + 1.0
        ticks = nice_ticks(lo, hi, 4)
        lo, hi = min(lo, ticks[0]), max(hi, ticks[-1])
        ylab = fit_text(p.y_label, L.small_size, L.content.width, 1, color=MUTED)
        ylab.move_to((L.content.cx, top_under(title) - ylab.height / 2, 0))
        tick_w = 0.6 if L.portrait else 0.9
        left = L.content.left + tick_w
        n = len(p.bars)
        slot = (L.content.right - left) / n
        # condition names (and n) under the bars: measured first, so the plot ends right above
        # them; 0.85 of a slot keeps a visible gap between neighbouring names
        names = VGroup(*[VGroup(
            fit_text(b.label, L.small_size, slot * 0.85, 2, color=TEXT),
            fit_text(f"n = {b.n}", L.tiny_size, slot * 0.85, 1, color=MUTED),
        ).arrange(DOWN, buff=0.08) for b in p.bars])
        names_h = max(m.height for m in names)
        top = ylab.get_bottom()[1] - 0.5
        bottom = L.content.bottom + names_h + 0.25 + (note.height + 0.2 if note else 0)
        unit = (top - bottom) / (hi - lo)
        y_of = lambda v: bottom + (v - lo) * unit  # noqa: E731 - tiny local mapping
        grid = VGroup()
        for t in ticks:
            grid.add(Line((left, y_of(t), 0), (L.content.right, y_of(t), 0), color=GRID, stroke_width=2))
            grid.add(fit_text(fmt_tick(t), L.tiny_size, tick_w - 0.08, 1, color=MUTED)
                     .next_to(np.array((left, y_of(t), 0.0)), LEFT, buff=0.08))
        bar_w = min(slot * 0.55, 1.6)
        grows, whiskers, labels = [], VGroup(), VGroup()
        for i, b in enumerate(p.bars):
            x = left + slot * (i + 0.5)
            h = max(abs(b.value) * unit, 0.02)
            bar = Rectangle(width=bar_w, height=h, stroke_width=0, fill_color=SERIES[i % len(SERIES)],
                            fill_opacity=0.9)
            bar.move_to((x, y_of(0) + (h / 2 if b.value >= 0 else -h / 2), 0))
            grows.append(GrowFromEdge(bar, DOWN if b.value >= 0 else UP))
            cap = bar_w * 0.35
            wk = VGroup(
                Line((x, y_of(b.lo), 0), (x, y_of(b.hi), 0), color=TEXT, stroke_width=4),
                Line((x - cap, y_of(b.hi), 0), (x + cap, y_of(b.hi), 0), color=TEXT, stroke_width=4),
                Line((x - cap, y_of(b.lo), 0), (x + cap, y_of(b.lo), 0), color=TEXT, stroke_width=4),
            )
            whiskers.add(wk)
            val = fit_text(b.text or fmt_bar(b.value), L.body_size, slot * 0.95, 1, bold=True)
            val.next_to(np.array((x, max(y_of(b.hi), y_of(b.value)), 0.0)), UP, buff=0.15)
            labels.add(val)
            names[i].move_to((x, bottom - 0.12 - names[i].height / 2, 0))
        # bar by bar: each grows, its interval is drawn, its value appears
        beats = [Beat([FadeIn(title), FadeIn(ylab), FadeIn(grid), FadeIn(names)], 0.7)]
        for i in range(n):
            beats += [Beat([grows[i]], 0.5), Beat([Create(whiskers[i]), FadeIn(labels[i])], 0.5)]
        if note is not None:
            note.move_to((L.content.cx, L.content.bottom + note.height / 2, 0))
            beats.append(Beat([FadeIn(note)], 0.5))
        return beats
