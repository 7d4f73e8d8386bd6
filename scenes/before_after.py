"""Before/after: the same question answered by 1-4 training phases, stacked as cards.

The question (and its options, compactly) sits at the top; then one card per phase appears
in order: phase label, the model's trace (wrapped; a trace longer than its card is shown as a
marked excerpt, "(+N more words)"), and its answer marked RIGHT (green) or WRONG (red) against
the starred answer. The last phase's card is the largest: its whole TRACE is the point. The question, options and answers are never cut (theme.fit_text).
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
        # portrait: the question gets smaller before it takes room from the four cards
        head = VGroup(fit_text(p.question, L.body_size, L.title.width, 3, bold=True,
                               min_size=L.tiny_size if L.portrait else L.small_size))
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
        # The last phase's card is the one whose reasoning the viewer reads in full: it gets the
        # room of (n + 1) earlier cards, which show their answer and the start of their trace.
        weights = [1.0] * (n - 1) + [float(n + 1) if n > 1 else 1.0]
        unit = (top - L.content.bottom - gap * (n - 1)) / sum(weights)
        inner_w = L.content.width - 0.3
        cards = []
        y_top = top
        for i, row in enumerate(p.rows):
            card_h = unit * weights[i]
            ok = row.correct
            color = RIGHT_COLOR if ok else WRONG
            mark = f"{CHECK} RIGHT" if ok else f"{CROSS} WRONG"
            answer = row.answer if row.answer is not None else "no answer"
            if L.portrait and row.answer is not None and row.answer[1:2] == ")":
                answer = row.answer[0]  # the options are listed above: the letter leaves room for the trace
            phase = fit_text(row.phase_label, L.small_size, inner_w * 0.3, 1, color=PATH, bold=True)
            # the answer is what the card is about: it wraps rather than being cut, on the
            # last card; a small earlier card keeps it on one line at a smaller size
            last = i == n - 1
            verdict = fit_text(f"{answer}  {mark}", L.small_size, inner_w * 0.68, 2 if last else 1, color=color,
                               bold=True, align="right", min_size=None if last else L.tiny_size * 0.8,
                               extra_lines=2 if last else 0)
            box = RoundedRectangle(width=L.content.width, height=card_h, corner_radius=0.12,
                                   stroke_color=color, stroke_width=4, fill_color=PANEL, fill_opacity=1.0)
            box.move_to((L.content.cx, y_top - card_h / 2, 0))
            y_top -= card_h + gap
            phase.move_to(box.get_corner(UP + LEFT) + RIGHT * (0.15 + phase.width / 2) + DOWN * (0.1 + phase.height / 2))
            verdict.move_to(box.get_corner(UP + RIGHT) + LEFT * (0.15 + verdict.width / 2) + DOWN * (0.1 + verdict.height / 2))
            # The trace is quoted model output: as many lines as fit under the header, then a
            # marked excerpt. Fewer lines until it fits, never a smaller font.
            trace_top = min(phase.get_bottom()[1], verdict.get_bottom()[1]) - 0.07
            room = trace_top - box.get_bottom()[1] - 0.06
            # start from more lines than the estimate: the loop below keeps the most that fit
            lines = max(1, int(room / (L.tiny_size * 0.0175)) * 2)
            card = VGroup(box, phase)
            while lines >= 1:
                trace = fit_text(row.trace or "(empty trace)", L.tiny_size, inner_w, lines, color=TEXT,
                                 align="left", min_size=L.tiny_size, excerpt=True)
                if trace.height <= room:
                    trace.move_to((box.get_left()[0] + 0.15 + trace.width / 2, trace_top - trace.height / 2, 0))
                    card.add(trace)
                    break
                lines -= 1  # a card too short for even the marker shows phase and answer only
            cards.append((card, verdict))
        beats = [Beat([FadeIn(head), FadeIn(key)], 0.7)]
        for card, verdict in cards:
            beats.append(Beat([FadeIn(card, shift=UP * 0.15)], 0.7))
            beats.append(Beat([FadeIn(verdict, scale=1.2)], 0.4))
        return beats
