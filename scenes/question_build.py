"""Question build: how one question was made, and the checks its data passed.

The question's text first; then the walk it came from, hop by hop; then its options one by
one, each with where the generator took it from (the walk's end, or a distractor's source);
then the data's own checks tick one by one with their counts (stats.json: one option
reachable, each leakage check's overlaps). Three columns in landscape; in portrait, three
pages in turn.
"""

from __future__ import annotations

from manim import DOWN, LEFT, UP, FadeIn, FadeOut, VGroup
from manim import RIGHT as RIGHT_DIR

from scenes.payloads import QuestionBuildPayload
from scenes.theme import CHECK, CROSS, MUTED, PATH, RIGHT, TEXT, WRONG, Beat, ClipScene, fit_text, shared_size, top_under


class QuestionBuildScene(ClipScene):
    """See the module docstring."""

    payload: QuestionBuildPayload

    def beats(self) -> list[Beat]:
        p, L = self.payload, self.L
        title = self.title_text(p.title)
        question = fit_text(p.question, L.small_size, L.content.width, 2, color=TEXT)
        question.move_to((L.content.cx, top_under(title) - question.height / 2, 0))
        top = question.get_bottom()[1] - 0.3
        cols = 1 if L.portrait else 3
        col_w = (L.content.width - 0.4 * (cols - 1)) / cols
        size = L.tiny_size if L.portrait else L.small_size

        def line(text: str, colour: str = TEXT, lines: int = 2, bold: bool = False):
            return fit_text(text, size, col_w, lines, color=colour, bold=bold, align="left")

        walk_head = line("The walk", MUTED, 1, bold=True)
        walk = [f"{i + 1}. {h.src} {h.rel} {h.dst}" for i, h in enumerate(p.hops)]
        hop_size = shared_size(walk, size, col_w, 3)  # one size for the whole walk
        hops = [fit_text(t, hop_size, col_w, 3, color=PATH, align="left", min_size=hop_size) for t in walk]
        opt_head = line("The options", MUTED, 1, bold=True)
        options = [VGroup(line(f"{o.letter}) {o.label}", PATH if o.answer else TEXT, 1, bold=o.answer),
                          line(o.source, RIGHT if o.answer else MUTED, 1)).arrange(DOWN, aligned_edge=LEFT, buff=0.04)
                   for o in p.options]
        check_head = line("The checks", MUTED, 1, bold=True) if p.checks else None
        checks = [line(f"{CHECK if c.ok else CROSS} {c.label}", RIGHT if c.ok else WRONG) for c in p.checks]
        columns = [[walk_head, *hops], [opt_head, *options], ([check_head, *checks] if check_head else [])]
        groups = [VGroup(*c).arrange(DOWN, aligned_edge=LEFT, buff=0.12) for c in columns if c]
        room = top - L.content.bottom
        if L.portrait:
            # on a phone the columns are pages in the same place: the walk, then the options,
            # then the checks, each replacing the one before
            for g in groups:
                if g.height > room:
                    g.scale(room / g.height)
                g.move_to((L.content.cx, top - g.height / 2, 0))
        else:
            body = VGroup(*groups).arrange(RIGHT_DIR, aligned_edge=UP, buff=0.4)
            if body.height > room:  # a long walk or many checks: the whole body shrinks together
                body.scale(room / body.height)
            body.move_to((L.content.cx, top - body.height / 2, 0))
        beats = [Beat([FadeIn(title), FadeIn(question)], 0.8), Beat([FadeIn(walk_head)], 0.3)]
        beats += [Beat([FadeIn(h, shift=DOWN * 0.1)], 0.5) for h in hops]
        if L.portrait:
            beats += [Beat([FadeOut(groups[0])], 0.3)]
        beats += [Beat([FadeIn(opt_head)], 0.3)]
        beats += [Beat([FadeIn(o, shift=LEFT * 0.1)], 0.5) for o in options]
        if check_head is not None:
            if L.portrait:
                beats += [Beat([FadeOut(groups[1])], 0.3)]
            beats += [Beat([FadeIn(check_head)], 0.3)]
            beats += [Beat([FadeIn(c, scale=1.1)], 0.35) for c in checks]
        return beats

