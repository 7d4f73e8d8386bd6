"""Title card: the title, an accent rule, then the subtitle and a small footer fade in."""

from __future__ import annotations

from manim import DOWN, UP, Create, FadeIn, Line

from scenes.payloads import TitlePayload
from scenes.theme import MUTED, PATH, TEXT, Beat, ClipScene, fit_text


class TitleCardScene(ClipScene):
    """Centred title block placed in the content box (above the caption zone in portrait)."""

    payload: TitlePayload

    def beats(self) -> list[Beat]:
        p, L = self.payload, self.L
        width = L.content.width * 0.94
        title = fit_text(
            p.title, L.title_size * 1.35, width, 3, color=TEXT, bold=True, min_size=L.title_size * 0.9
        )
        rule = Line((-width * 0.3, 0, 0), (width * 0.3, 0, 0), color=PATH, stroke_width=6)
        parts = [title, rule]
        sub = foot = None
        if p.subtitle:
            sub = fit_text(p.subtitle, L.body_size * 1.1, width, 3, color=PATH)
            parts.append(sub)
        if p.footer:
            foot = fit_text(p.footer, L.small_size, width, 2, color=MUTED)
        # Stack title / rule / subtitle and centre the stack in the content box, slightly high
        # (the eye's resting point on a phone is above the middle).
        rule.next_to(title, DOWN, buff=0.3)
        if sub is not None:
            sub.next_to(rule, DOWN, buff=0.3)
        stack_top = title.get_top()[1]
        stack_bottom = (sub if sub is not None else rule).get_bottom()[1]
        shift = L.content.cy + 0.12 * L.content.height - (stack_top + stack_bottom) / 2
        for m in parts:
            m.shift(UP * shift)
        out = [
            Beat([FadeIn(title, shift=UP * 0.3)], 1.0),
            Beat([Create(rule)], 0.5),
        ]
        if sub is not None:
            out.append(Beat([FadeIn(sub, shift=UP * 0.2)], 0.8))
        if foot is not None:
            foot.move_to((L.content.cx, L.content.bottom + foot.height / 2 + 0.1, 0))
            out.append(Beat([FadeIn(foot)], 0.5))
        return out
