"""Before/after: the same question answered by 1-4 training phases, stacked as cards.

The question (and its options, compactly) sits at the top; then one card per phase appears
in order: phase label, the model's trace (wrapped, truncated with an ellipsis), and its
answer marked RIGHT (green) or WRONG (red) against the starred answer.
"""

from __future__ import annotations

from manim import DOWN, LEFT, RIGHT, UP, FadeIn, RoundedRectangle, VGroup

from scenes.payloads import BeforeAfterPayload
from scenes.theme import (
    CHECK, CROSS, MUTED, PANEL, PATH, RIGHT as RIGHT_COLOR, TEXT, WRONG, Beat, ClipScene, fit_text,
)


class BeforeAfterScene(ClipScene):
    """Cards stacked top to bottom in the content box, revealed one per beat."""

    payload: BeforeAfterPayload

    def beats(self) -> list[Beat]:
        p, L = self.payload, self.L
        head = VGroup(fit_text(p.question, L.body_size, L.title.width, 3, bold=True, min_size=L.small_size))
        if p.options:
            opts = "   ".join(f"{k}) {v}" for k, v in p.options.items())
            head.add(fit_text(opts, L.tiny_size, L.title.width, 2, color=MUTED))
        head.arrange(DOWN, buff=0.1)
        # The question may need more room than the title box; it pushes the cards down.
        head.move_to((L.title.cx, L.title.top - head.height / 2, 0))
        star = p.options.get(p.answer_star, "") if p.options else ""
        key = fit_text(f"Correct: {p.answer_star}" + (f" ({star})" if star else ""), L.small_size,
                       L.content.width, 1, color=PATH, bold=True)
        top = min(L.content.top, head.get_bottom()[1] - 0.15)
        key.move_to((L.content.cx, top - key.height / 2, 0))
        top = key.get_bottom()[1] - 0.15
        n = len(p.rows)
        gap = 0.12
        card_h = (top - L.content.bottom - gap * (n - 1)) / n
        inner_w = L.content.width - 0.3
        cards = []
        for i, row in enumerate(p.rows):
            ok = row.correct
            color = RIGHT_COLOR if ok else WRONG
            mark = f"{CHECK} RIGHT" if ok else f"{CROSS} WRONG"
            answer = row.answer if row.answer is not None else "no answer"
            phase = fit_text(row.phase_label, L.small_size, inner_w * 0.5, 1, color=PATH, bold=True)
            verdict = fit_text(f"{answer}  {mark}", L.small_size, inner_w * 0.5, 1, color=color, bold=True)
            # Trace lines: as many as fit in the card under the header line.
            line_h = L.tiny_size * 0.0175
            lines = max(1, int((card_h - phase.height - 0.3) / line_h))
            trace = fit_text(row.trace or "(empty trace)", L.tiny_size, inner_w, lines, color=TEXT, align="left")
            box = RoundedRectangle(width=L.content.width, height=card_h, corner_radius=0.12,
                                   stroke_color=color, stroke_width=4, fill_color=PANEL, fill_opacity=1.0)
            y = top - card_h / 2 - i * (card_h + gap)
            box.move_to((L.content.cx, y, 0))
            phase.move_to(box.get_corner(UP + LEFT) + RIGHT * (0.15 + phase.width / 2) + DOWN * (0.12 + phase.height / 2))
            verdict.move_to(box.get_corner(UP + RIGHT) + LEFT * (0.15 + verdict.width / 2) + DOWN * (0.12 + verdict.height / 2))
            trace.next_to(phase, DOWN, buff=0.12).align_to(phase, LEFT)
            if trace.get_bottom()[1] < box.get_bottom()[1] + 0.05:
                trace.scale_to_fit_height(max(0.05, trace.get_top()[1] - box.get_bottom()[1] - 0.08))
                trace.align_to(phase, LEFT)
            cards.append((VGroup(box, phase, trace), verdict))
        beats = [Beat([FadeIn(head), FadeIn(key)], 0.7)]
        for card, verdict in cards:
            beats.append(Beat([FadeIn(card, shift=UP * 0.15)], 0.7))
            beats.append(Beat([FadeIn(verdict, scale=1.2)], 0.4))
        return beats
