"""Reward bars: each reward component grows from a zero line to its value, one after another; the total last.

Every bar shares one vertical scale spanning all components' declared ranges and the total
range, so bar lengths are comparable and negative values (penalties) hang below zero. The
value labels are the payload's numbers formatted with a sign; the scene invents no numbers.
"""

from __future__ import annotations

from manim import DOWN, UP, Create, FadeIn, GrowFromEdge, Line, Rectangle, VGroup

from scenes.payloads import RewardBarsPayload
from scenes.theme import (
    GRID, MUTED, PANEL, PATH, SERIES, TEXT, WRONG, Beat, ClipScene, fit_text, shared_size, top_under,
)


def fmt_value(v: float) -> str:
    """Signed value label with up to 2 decimals.

    >>> fmt_value(1.0), fmt_value(-0.5), fmt_value(0.0), fmt_value(0.125)
    ('+1', '-0.5', '0', '+0.12')
    """
    s = f"{v:+.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("+0", "-0") else s


class RewardBarsScene(ClipScene):
    """Vertical bars, one per component plus a highlighted total bar."""

    payload: RewardBarsPayload

    def beats(self) -> list[Beat]:
        p, L = self.payload, self.L
        title = self.title_text(p.title)

        items = [(c.name, c.value, False) for c in p.components] + [("total", p.total, True)]
        lo = min([0.0, p.total_range[0]] + [c.lo for c in p.components])
        hi = max([0.0, p.total_range[1]] + [c.hi for c in p.components])
        if hi - lo < 1e-9:
            hi = lo + 1.0
        note = self.note_text(p.note)
        top = top_under(title) - 0.45  # room for value labels above positive bars
        bottom = L.content.bottom + 0.9 + (note.height + 0.15 if note else 0)  # names + note
        unit = (top - bottom) / (hi - lo)
        zero_y = bottom + (0 - lo) * unit
        n = len(items)
        slot = L.content.width / n
        # the term names share one size (the total's bold name wraps if it must)
        name_size = shared_size([nm for nm, _, _ in items], L.small_size, slot * 0.95, 2)
        bar_w = min(slot * 0.62, 1.6)
        zero = Line((L.content.left, zero_y, 0), (L.content.right, zero_y, 0), color=GRID, stroke_width=3)
        bars, values, names = VGroup(), VGroup(), VGroup()
        grows = []
        for i, (name, v, is_total) in enumerate(items):
            x = L.content.left + slot * (i + 0.5)
            h = max(abs(v) * unit, 0.02)
            color = PATH if is_total else (WRONG if v < 0 else SERIES[1])
            bar = Rectangle(width=bar_w, height=h, stroke_width=4 if is_total else 0,
                            stroke_color=TEXT, fill_color=color, fill_opacity=1.0)
            if v >= 0:
                bar.move_to((x, zero_y + h / 2, 0))
                grows.append(GrowFromEdge(bar, DOWN))
            else:
                bar.move_to((x, zero_y - h / 2, 0))
                grows.append(GrowFromEdge(bar, UP))
            label = fit_text(fmt_value(v), L.body_size, slot * 0.95, 1, color=TEXT, bold=is_total)
            if v >= 0:
                label.next_to(bar, UP, buff=0.08)
            else:
                label.next_to(bar, DOWN, buff=0.08)
            nm = fit_text(name, name_size, slot * 0.95, 2, color=PATH if is_total else MUTED, bold=is_total,
                          min_size=name_size)
            nm.move_to((x, L.content.bottom + 0.45 + (note.height + 0.15 if note else 0), 0))
            bars.add(bar), values.add(label), names.add(nm)
        # A panel behind the total bar marks it as the sum of the others.
        tx = L.content.left + slot * (n - 0.5)
        panel = Rectangle(width=slot * 0.96, height=top - bottom + 0.9, stroke_width=0,
                          fill_color=PANEL, fill_opacity=1.0).move_to((tx, (top + bottom) / 2 + 0.1, 0))
        # one term at a time, as the narration reads them, then the total
        beats = [Beat([FadeIn(title), FadeIn(panel), Create(zero), FadeIn(names)], 0.7)]
        beats += [Beat([grows[i], FadeIn(values[i])], 0.6) for i in range(n - 1)]
        beats += [Beat([grows[-1]], 0.7), Beat([FadeIn(values[-1], scale=1.3)], 0.4)]
        if note is not None:
            note.move_to((L.content.cx, L.content.bottom + note.height / 2, 0))
            beats.append(Beat([FadeIn(note)], 0.4))
        return beats
