"""Training curves: hand-built axes (Lines and Text ticks, no LaTeX), series drawn over time.

Axes, tick labels and any horizontal lines (thresholds) appear first, then dashed vertical
phase boundaries (or marked steps) with their labels, then each series is drawn left to right
with its legend entry, one after another (the ``monitor`` scene type draws its signals so).
"""

from __future__ import annotations

import math

import numpy as np
from manim import DOWN, LEFT, RIGHT, Create, DashedLine, Dot, FadeIn, GrowFromCenter, Line, VGroup, VMobject

from scenes.payloads import TrainingCurvesPayload
from scenes.theme import BG, GRID, MUTED, PATH, SERIES, TEXT, WRONG, Beat, ClipScene, fit_text, fmt_tick, nice_ticks, top_under


class TrainingCurvesScene(ClipScene):
    """See the module docstring."""

    payload: TrainingCurvesPayload

    def beats(self) -> list[Beat]:
        p, L = self.payload, self.L
        title = self.title_text(p.title)
        # Legend: one row per series in portrait (long names), a single row in landscape.
        entries = VGroup()
        for i, s in enumerate(p.series):
            sw = Line(ORIGIN3, RIGHT * 0.35, color=SERIES[i % len(SERIES)], stroke_width=8)
            entries.add(VGroup(sw, fit_text(s.name, L.small_size, L.content.width * 0.8, 1, color=TEXT))
                        .arrange(RIGHT, buff=0.12))
        if L.portrait:
            entries.arrange_in_grid(cols=2 if len(p.series) > 1 else 1, buff=(0.3, 0.1), cell_alignment=LEFT)
        else:
            entries.arrange(RIGHT, buff=0.5)
        if entries.width > L.content.width and not L.portrait:  # a grid of three before a column
            entries.arrange_in_grid(cols=3, buff=(0.5, 0.1), cell_alignment=LEFT)
        if entries.width > L.content.width:  # one entry a line rather than smaller text
            entries.arrange(DOWN, aligned_edge=LEFT, buff=0.1)
        entries.move_to((L.content.cx, L.content.bottom + entries.height / 2, 0))

        ylab = fit_text(p.y_label, L.small_size, L.content.width, 1, color=MUTED)
        ylab.move_to((L.content.left + ylab.width / 2, top_under(title) - ylab.height / 2, 0))
        xlab = fit_text(p.x_label, L.small_size, L.content.width, 1, color=MUTED)
        tick_w = 0.62 if L.portrait else 0.95
        left, right = L.content.left + tick_w, L.content.right - 0.1
        top = ylab.get_bottom()[1] - 0.35  # room for phase labels above the plot
        bottom = entries.get_top()[1] + 0.25 + xlab.height + 0.1 + L.tiny_size * 0.016 + 0.1
        xlab.move_to(((left + right) / 2, entries.get_top()[1] + 0.2 + xlab.height / 2, 0))
        ylo, yhi = p.y_range
        xlo, xhi = p.x_range

        def to_xy(x: float, y: float) -> np.ndarray:
            # Values outside y_range are clamped to the frame so a spike cannot leave the plot.
            y = min(max(y, ylo), yhi)
            return np.array((left + (x - xlo) / (xhi - xlo) * (right - left),
                             bottom + (y - ylo) / (yhi - ylo) * (top - bottom), 0.0))

        axes = VGroup(Line((left, bottom, 0), (right, bottom, 0), color=TEXT, stroke_width=3),
                      Line((left, bottom, 0), (left, top, 0), color=TEXT, stroke_width=3))
        for t in nice_ticks(ylo, yhi, 4):
            if ylo - 1e-9 <= t <= yhi + 1e-9:
                y = to_xy(xlo, t)[1]
                axes.add(Line((left, y, 0), (right, y, 0), color=GRID, stroke_width=1.5))
                axes.add(fit_text(fmt_tick(t), L.tiny_size, tick_w - 0.08, 1, color=MUTED)
                         .next_to(np.array((left, y, 0.0)), LEFT, buff=0.08))
        xticks = nice_ticks(xlo, xhi, 3 if L.portrait else 5)
        if all(float(x).is_integer() for s in p.series for x, _ in s.points):
            # steps are whole: no tick at step 1.5
            xticks = [t for t in xticks if float(t).is_integer()]
            if len(xticks) < 2:  # a short phase: every whole step in the range
                xticks = list(range(math.ceil(xlo), math.floor(xhi) + 1))
        for t in xticks:
            if xlo - 1e-9 <= t <= xhi + 1e-9:
                x = to_xy(t, ylo)[0]
                axes.add(fit_text(fmt_tick(t), L.tiny_size, 1.0, 1, color=MUTED)
                         .next_to(np.array((x, bottom, 0.0)), DOWN, buff=0.08))
        phases = VGroup()
        for b in p.phase_boundaries:
            x = to_xy(b.x, ylo)[0]
            phases.add(DashedLine((x, bottom, 0), (x, top + 0.05, 0), color=MUTED, stroke_width=3, dash_length=0.1))
            lab = fit_text(b.label, L.tiny_size, 3.0, 1, color=TEXT)
            lab.move_to((min(max(x, L.content.left + lab.width / 2), L.content.right - lab.width / 2),
                         top + 0.08 + lab.height / 2, 0))
            phases.add(lab)
        hlines = VGroup()
        for hl in p.hlines:
            if ylo - 1e-9 <= hl.y <= yhi + 1e-9:
                y = to_xy(xlo, hl.y)[1]
                hlines.add(DashedLine((left, y, 0), (right, y, 0), color=TEXT, stroke_width=3, dash_length=0.12))
                lab = fit_text(hl.label, L.tiny_size, (right - left) * 0.45, 1, color=TEXT)
                lab.move_to((right - lab.width / 2 - 0.05, y + 0.06 + lab.height / 2, 0))
                # drawn over the curves on a patch of background, so a line through it cannot hide it
                lab.add_background_rectangle(color=BG, opacity=0.85, buff=0.04)
                hlines.add(lab.set_z_index(5))
        curves = VGroup()
        for i, s in enumerate(p.series):
            pts = [to_xy(x, y) for x, y in s.points]
            if len(pts) == 1:
                pts = pts * 2
            curve = VMobject(stroke_color=SERIES[i % len(SERIES)], stroke_width=6)
            curve.set_points_as_corners(pts)
            curves.add(curve)
        beats = [
            Beat([FadeIn(title), FadeIn(axes), FadeIn(ylab), FadeIn(xlab)] + ([FadeIn(hlines)] if len(hlines) else []), 0.7),
        ]
        if len(phases):
            beats.append(Beat([FadeIn(phases)], 0.5))
        # the monitor's verdicts: a dot on the x axis at each step that warned (amber) or stopped (red)
        marks = [Dot((to_xy(m.x, ylo)[0], bottom, 0), radius=0.09, color=MARKS[m.kind][0]).set_z_index(6)
                 for m in p.marks]
        kinds = [k for k in MARKS if any(m.kind == k for m in p.marks)]
        mark_key = VGroup(*[VGroup(Dot(radius=0.07, color=MARKS[k][0]),
                                   fit_text(MARKS[k][1], L.tiny_size, 2.0, 1, color=TEXT))
                            .arrange(RIGHT, buff=0.1) for k in kinds]).arrange(RIGHT, buff=0.3)
        if len(mark_key):
            mark_key.move_to((right - mark_key.width / 2, top + 0.08 + mark_key.height / 2 + (0.3 if len(phases) else 0), 0))
        if len(curves) == 1:
            beats += [Beat([Create(curves[0])], 1.8), Beat([FadeIn(entries)], 0.5)]
        else:  # one series at a time, each with its legend entry: the eye follows one line
            beats += [Beat([Create(c), FadeIn(e)], 1.2) for c, e in zip(curves, entries)]
        for i, dot in enumerate(marks):
            beats.append(Beat([GrowFromCenter(dot)] + ([FadeIn(mark_key)] if i == 0 else []), 0.4))
        return beats


ORIGIN3 = np.zeros(3)
#: a marked step's colour and its legend word, by kind
MARKS = {"warning": (PATH, "warned"), "stop": (WRONG, "stopped")}
