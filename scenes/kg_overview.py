"""KG overview: the graph a run learned from, a sample of it drawn wave by wave.

The walk's entities first, then the entities one, two and three hops around them, each wave
with the edges it closes; the graph's counts appear beside the drawing; last, the walk is
traced hop by hop in the path colour and its entities are named. Positions come from the
payload (a seeded spring layout), fitted to the content box.
"""

from __future__ import annotations

from manim import DOWN, LEFT, RIGHT, Create, Dot, FadeIn, GrowFromCenter, LaggedStart, Line, VGroup

from scenes.payloads import KGOverviewPayload
from scenes.theme import BG, GRID, PATH, SERIES, TEXT, Beat, ClipScene, fit_text, top_under


class KGOverviewScene(ClipScene):
    """See the module docstring."""

    payload: KGOverviewPayload

    def beats(self) -> list[Beat]:
        p, L = self.payload, self.L
        title = self.title_text(p.title)
        note = self.note_text(p.note)
        counts = VGroup(*[fit_text(c, L.body_size, L.content.width * (0.3 if not L.portrait else 0.9), 1,
                                   color=PATH if i == 0 else TEXT, bold=i == 0) for i, c in enumerate(p.counts)])
        top = top_under(title)
        bottom = L.content.bottom + (note.height + 0.15 if note else 0)
        if L.portrait:
            if len(counts):
                counts.arrange(DOWN, buff=0.1).move_to((L.content.cx, top - counts.height / 2, 0))
            box = (L.content.left, L.content.right, bottom, (counts.get_bottom()[1] - 0.2) if len(counts) else top)
        else:
            counts.arrange(DOWN, aligned_edge=LEFT, buff=0.25)
            if len(counts):
                counts.move_to((L.content.right - counts.width / 2, (top + bottom) / 2, 0))
            box = (L.content.left, (counts.get_left()[0] - 0.4) if len(counts) else L.content.right, bottom, top)
        left, right, low, high = box
        pad = 0.25

        def at(n) -> tuple[float, float, float]:
            return (left + pad + n.x * (right - left - 2 * pad), low + pad + n.y * (high - low - 2 * pad), 0.0)

        types = sorted({n.type for n in p.nodes})
        colour = {t: SERIES[1 + i % (len(SERIES) - 1)] for i, t in enumerate(types)}  # amber is the walk's
        dots = {n.id: Dot(at(n), radius=0.07 if not L.portrait else 0.05, color=colour[n.type]) for n in p.nodes}
        by_id = {n.id: n for n in p.nodes}
        lines = {}
        for e in p.edges:
            lines[(e.src, e.dst)] = Line(dots[e.src].get_center(), dots[e.dst].get_center(), color=GRID, stroke_width=2)
        waves = sorted({n.wave for n in p.nodes})
        beats = [Beat([FadeIn(title)], 0.4)]
        # count i appears with wave i (entities with the first); any left over after the last
        for k, w in enumerate(waves):
            new = [dots[n.id] for n in p.nodes if n.wave == w]
            closed = [ln for (a, b), ln in lines.items() if max(by_id[a].wave, by_id[b].wave) == w]
            anims = [LaggedStart(*[GrowFromCenter(d) for d in new], lag_ratio=0.05)]
            if closed:
                anims.append(LaggedStart(*[Create(ln) for ln in closed], lag_ratio=0.02))
            if k < len(counts):
                anims.append(FadeIn(counts[k]))
            beats.append(Beat(anims, 0.9))
        if len(counts) > len(waves):
            beats.append(Beat([FadeIn(c) for c in counts[len(waves):]], 0.4))
        # the walk, hop by hop, over the drawing
        names = []
        for node_id in p.walk:
            lab = fit_text(by_id[node_id].label, L.tiny_size, (right - left) * 0.35, 2, color=TEXT)
            lab.next_to(dots[node_id], DOWN, buff=0.08)
            # kept inside the content box: a node at the drawing's edge keeps its name on screen
            lab.shift(RIGHT * (max(0.0, L.content.left - lab.get_left()[0])
                                   - max(0.0, lab.get_right()[0] - L.content.right)))
            lab.add_background_rectangle(color=BG, opacity=0.8, buff=0.03)
            # a name that would cover one already placed is left out (the walk still shows it)
            if any(_overlap(lab, other) for other in names if other is not None):
                names.append(None)
                continue
            names.append(lab.set_z_index(4))
        for i, node_id in enumerate(p.walk):
            anims = [dots[node_id].animate.set_color(PATH).scale(1.6)] + ([FadeIn(names[i])] if names[i] is not None else [])
            if i > 0:
                a, b = p.walk[i - 1], node_id
                hop = Line(dots[a].get_center(), dots[b].get_center(), color=PATH, stroke_width=6).set_z_index(2)
                anims.append(Create(hop))
            beats.append(Beat(anims, 0.7))
        if note is not None:
            note.move_to((L.content.cx, L.content.bottom + note.height / 2, 0))
            beats.append(Beat([FadeIn(note)], 0.4))
        return beats


def _overlap(a, b) -> bool:
    """Whether two mobjects' bounding boxes intersect."""
    return not (a.get_right()[0] < b.get_left()[0] or b.get_right()[0] < a.get_left()[0]
                or a.get_top()[1] < b.get_bottom()[1] or b.get_top()[1] < a.get_bottom()[1])
