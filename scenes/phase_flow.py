"""Phase flow: the training phases as one diagram, lit one after another.

Each phase is a box: its name, what it trained on (rows, prompts, samples, steps, from the
run's logs) and its held-out accuracy. An arrow joins each box to the next, labelled with what
that phase changed, paired on the same questions (green a measurable gain, red a measurable
loss), or "nothing measurable" (grey). The boxes sit in a
row (landscape) or a column (portrait); the phase being told is lit, the others dimmed.
"""

from __future__ import annotations

from manim import DOWN, LEFT, RIGHT, Arrow, FadeIn, GrowArrow, RoundedRectangle, VGroup

from scenes.payloads import PhaseFlowPayload
from scenes.theme import MUTED, NODE_STROKE, PANEL, PATH, RIGHT as RIGHT_COLOUR, TEXT, WRONG, Beat, ClipScene, fit_text, top_under


class PhaseFlowScene(ClipScene):
    """See the module docstring."""

    payload: PhaseFlowPayload

    def beats(self) -> list[Beat]:
        p, L = self.payload, self.L
        title = self.title_text(p.title)
        note = self.note_text(p.note)
        n = len(p.boxes)
        top = top_under(title)
        bottom = L.content.bottom + (note.height + 0.2 if note else 0)
        gap = 0.9 if not L.portrait else 0.45  # room for an arrow and its label
        boxes, frames = [], []
        if L.portrait:
            # a full-width box per phase, stacked: name and result on the left, what it trained
            # on to the right; the whole column shrinks together if a long run needs it
            box_w = L.content.width
            contents = []
            for b in p.boxes:
                left_w, right_w = box_w * 0.42, box_w * 0.5
                head = VGroup(fit_text(b.label, L.body_size, left_w, 1, color=TEXT, bold=True),
                              *([fit_text(b.result, L.small_size, left_w, 2, color=PATH, bold=True)] if b.result else []))
                head.arrange(DOWN, buff=0.08)
                side = VGroup(*[fit_text(line, L.tiny_size, right_w, 2, color=MUTED, align="left") for line in b.lines])
                if len(side):
                    side.arrange(DOWN, aligned_edge=LEFT, buff=0.06)
                contents.append((head, side))
            box_h = max(max(h.height, s.height) for h, s in contents) + 0.2
            scale = min(1.0, (top - bottom) / (n * box_h + (n - 1) * gap))
            box_h, gap = box_h * scale, gap * scale
            for i, (head, side) in enumerate(contents):
                frame = RoundedRectangle(corner_radius=0.12, width=box_w, height=box_h, stroke_color=PATH,
                                         stroke_width=5, fill_color=PANEL, fill_opacity=1.0)
                cy = top - box_h / 2 - i * (box_h + gap)
                frame.move_to((L.content.cx, cy, 0))
                for part in (head, side):
                    part.scale(scale)
                head.move_to((L.content.left + box_w * 0.23, cy, 0))
                if len(side):
                    side.move_to((L.content.left + box_w * 0.48 + side.width / 2, cy, 0))
                boxes.append(VGroup(frame, head, side))
                frames.append(frame)
        else:
            box_w, box_h = (L.content.width - gap * (n - 1)) / n, min(top - bottom, 3.6)
            for i, b in enumerate(p.boxes):
                # each box appears lit; the one before it dims as the next appears
                frame = RoundedRectangle(corner_radius=0.15, width=box_w, height=box_h, stroke_color=PATH,
                                         stroke_width=6, fill_color=PANEL, fill_opacity=1.0)
                inner = box_w * 0.9
                parts = [fit_text(b.label, L.body_size, inner, 1, color=TEXT, bold=True)]
                parts += [fit_text(line, L.tiny_size, inner, 2, color=MUTED) for line in b.lines]
                if b.result:
                    parts.append(fit_text(b.result, L.small_size, inner, 2, color=PATH, bold=True))
                content = VGroup(*parts).arrange(DOWN, buff=0.14)
                if content.height > box_h * 0.92:
                    content.scale(box_h * 0.92 / content.height)
                centre = (L.content.left + box_w / 2 + i * (box_w + gap), (top + bottom) / 2, 0)
                frame.move_to(centre)
                content.move_to(centre)
                boxes.append(VGroup(frame, content))
                frames.append(frame)
        arrows = []
        for i, a in enumerate(p.arrows):
            src, dst = frames[i], frames[i + 1]
            colour = (RIGHT_COLOUR if a.diff > 0 else WRONG) if a.measurable else MUTED
            if L.portrait:
                x = L.content.left + box_w * 0.23
                arrow = Arrow((x, src.get_bottom()[1], 0), (x, dst.get_top()[1], 0), buff=0.02, color=colour,
                              stroke_width=5, max_tip_length_to_length_ratio=0.5)
                label = fit_text(a.text, L.tiny_size, box_w * 0.6, 1, color=colour, align="left")
                label.move_to((x + 0.3 + label.width / 2, arrow.get_center()[1], 0))
            else:
                arrow = Arrow(src.get_right(), dst.get_left(), buff=0.05, color=colour, stroke_width=5,
                              max_tip_length_to_length_ratio=0.4)
                label = fit_text(a.text, L.tiny_size, box_w * 0.9, 2, color=colour)
                label.next_to(dst, DOWN, buff=0.15)
            arrows.append((arrow, label))
        beats = [Beat([FadeIn(title)], 0.5)]
        for i, box in enumerate(boxes):
            anims = [FadeIn(box, shift=RIGHT * 0.2 if not L.portrait else DOWN * 0.2)]
            if i > 0:
                arrow, label = arrows[i - 1]
                beats.append(Beat([GrowArrow(arrow)], 0.5))
                anims += [FadeIn(label), frames[i - 1].animate.set_stroke(color=NODE_STROKE, width=3)]
            beats.append(Beat(anims, 0.8))
        if note is not None:
            note.move_to((L.content.cx, L.content.bottom + note.height / 2, 0))
            beats.append(Beat([FadeIn(note)], 0.4))
        return beats
